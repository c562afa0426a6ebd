"""Keep this checkout's folders from importing under their bare names.

`python -m benchmarks.NAME` or `python -m npu_deploy`, started in the checkout, put it first
on sys.path. The package folders there (kernels/, store/, models/, ...) would then import as
top-level packages, and kernels/ would stand in for Hugging Face's `kernels`, which
transformers (5.25 on) installs and imports when it loads a model. Once the package being
run is imported, its modules resolve through its own __path__, so the checkout can come off
the path again. Standard library only: this runs before anything else is imported."""

from __future__ import annotations

import sys
from pathlib import Path

#: The checkout: the folder that holds npu_deploy/ (the installed name, a folder of symlinks).
CHECKOUT = Path(__file__).resolve().parent.parent


def leave_the_checkout() -> None:
    """Take the checkout off sys.path ('' stands for the working directory). Installed from a
    wheel, npu_deploy/ holds real folders and its parent is site-packages: nothing is taken."""
    if not (CHECKOUT / "npu_deploy" / "kernels").is_symlink():
        return
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != CHECKOUT]
