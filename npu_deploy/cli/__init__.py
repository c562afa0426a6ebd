"""The `npu-deploy` command line: a thin layer over the library packages, one module per
command group, every command listed in group.py's COMMANDS and imported when it runs.

Every failure the user can cause (a bad path, a foreign or damaged file, an unknown run, a
tampered log) ends as one line on stderr and a non-zero exit (`group.CLI`).
"""

from __future__ import annotations

from .group import main

__all__ = ["main"]
