"""Issue 26's red-team cases (a package, so that this folder's conftest.py does not take the
name `conftest` from tests/conftest.py, which the other test modules import)."""
