"""The layers of the installed package (docs/layers.py, the table in docs/architecture.md):
every module of `npu_deploy` is in exactly one row, and no import goes where its row may
not, a lower layer into a higher one included."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from paths import ROOT


def load_layers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layers", ROOT / "docs" / "layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layers = load_layers()


def test_every_module_of_the_package_is_in_exactly_one_row():
    modules = list(layers.modules())
    assert len(modules) > 100      # the walk follows npu_deploy/'s links into the folders
    astray = [f"{dotted} ({file.relative_to(ROOT)}): in {layers.rows_of(dotted) or 'no row'}"
              for dotted, file in modules if len(layers.rows_of(dotted)) != 1]
    assert not astray, ("add each to PARTS in docs/layers.py, in the layer that serves its "
                        "importers, and run `make docs`:\n" + "\n".join(astray))


def test_every_row_is_a_part_of_the_package():
    names = [p.name for p in layers.PARTS]
    assert len(names) == len(set(names)), "a part is listed twice in docs/layers.py"
    missing = [n for n in names if n != "__init__" and not (layers.PACKAGE / n).is_dir()
               and not (layers.PACKAGE / f"{n}.py").exists()]
    assert not missing, f"docs/layers.py lists parts npu_deploy/ does not have: {missing}"


def test_the_rows_state_an_order():
    """What a part may import is listed above it: the rule allows no cycle."""
    seen: set[str] = set()
    for p in layers.PARTS:
        later = sorted(set(p.may_import) - seen)
        assert not later, f"{p.name} may import {later}, which are not below it"
        seen.add(p.name)


def test_no_import_goes_against_the_order():
    problems = layers.broken()
    assert not problems, ("each import must stay inside its part or go to one its row in "
                          "docs/layers.py may import:\n" + "\n".join(problems))


def test_the_check_finds_a_module_in_no_row_and_an_import_up_the_layers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The same functions over a package made for the purpose: a top module that no row
    holds (as npu_deploy/progress.py was), imported by the store, and the events importing
    the store."""
    package = tmp_path / "npu_deploy"
    for folder in ("events", "store"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "progress.py").write_text("import os\n")
    (package / "store" / "log.py").write_text("from npu_deploy import progress\n"
                                              "from ..events import fold\n")
    (package / "events" / "fold.py").write_text(
        "def f():\n    from npu_deploy.store.log import x\n")
    monkeypatch.setattr(layers, "PACKAGE", package)
    monkeypatch.setattr(layers, "PARTS", (
        layers.Part("__init__", (), ""), layers.Part("events", (), ""),
        layers.Part("store", ("events",), "")))

    assert [d for d, _ in layers.modules() if not layers.rows_of(d)] == ["npu_deploy.progress"]
    assert layers.broken() == [
        "npu_deploy.events.fold imports npu_deploy.store: 'events' may import nothing of ours",
        "npu_deploy.store.log imports npu_deploy.progress: no row holds it"]
