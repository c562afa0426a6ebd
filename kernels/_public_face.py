"""How an area of kernels/ (definition/, plans/, air_programs/, ...) shows its public face
without importing itself whole.

An area's `__init__` lists its public names in `__all__` and as imports under
`if TYPE_CHECKING:`, which is what type checkers and editors read; at run time `public_face`
reads that block and imports each name's module the first time the name is asked for (as
lazy_loader's stubs do). So importing one module of an area loads that module and what it
imports, not the rest of its area: the families import `air_programs.air_parts` without
loading the emitter, which imports the plans, which import the families. The modules' import
graph has no cycle and the areas' `__init__`s add none."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def exports(init_file: str) -> dict[str, str]:
    """name -> the module (relative to the area) its area's `__init__` imports it from under
    `if TYPE_CHECKING:`."""
    tree = ast.parse(Path(init_file).read_text())
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.level == 1 and imp.module:
                    out.update({a.asname or a.name: imp.module for a in imp.names})
    return out


def public_face(package: str, init_file: str
                ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for the area `package` (its `__all__` lists the same names;
    a test holds them equal)."""
    where = exports(init_file)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)      # asked once
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
