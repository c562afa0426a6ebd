"""The red-team cases (issue 26). A package, so that this folder's conftest is imported as
`redteam.conftest` and does not take the name `conftest` that the other tests import from."""
