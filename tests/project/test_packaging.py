"""What `pip install npu-deploy` puts on a machine: one import name of ours, `npu_deploy`, so
that no other distribution's package (Hugging Face's `kernels`, say) can replace one of ours,
nor ours one of theirs."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from paths import ROOT

#: The folders at the repository's top level whose code installs as npu_deploy.<name>.
PACKAGE_FOLDERS = {p.name for p in (ROOT / "npu_deploy").iterdir() if p.is_symlink()}


def _wheel(out: Path, scratch: Path) -> Path:
    """The wheel of a copy of the checkout (setuptools writes build/ and egg-info where it
    builds, and the checkout is no place for them)."""
    source = scratch / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", "reports"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(source)],
                   check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = out.glob("npu_deploy-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _wheel(tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("scratch"))


def test_every_package_folder_is_linked_under_the_namespace():
    linked = {p.name: os.readlink(p) for p in (ROOT / "npu_deploy").iterdir() if p.is_symlink()}
    folders = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - {"npu_deploy",
                                                                                    "benchmarks"}
    assert {Path(target).name for target in linked.values()} == folders
    for target in linked.values():
        assert target.startswith("../"), "a link points at its folder, relative to the repo"


def test_the_wheel_installs_one_top_level_name(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top_level = zf.read(next(n for n in names if n.endswith("top_level.txt"))).decode()
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"npu_deploy"}
    assert top_level.split() == ["npu_deploy"]
    # every package's code and data went in: the links were followed, not copied as links
    for folder in PACKAGE_FOLDERS:
        assert f"npu_deploy/{folder}/__init__.py" in names, folder
    assert any(n.startswith("npu_deploy/skills/catalog/") and n.endswith("SKILL.md")
               for n in names)
    assert any(n.endswith(".tcss") for n in names)
    # the kernel families' measured figures, read at run time
    assert "npu_deploy/kernels/data/gemm_bf16.json" in names
    assert "npu_deploy/kernels/data/calibration.json" in names
    # the stubs lazy_loader reads the store's and the kernels areas' public names from
    assert "npu_deploy/store/__init__.pyi" in names
    assert "npu_deploy/kernels/plans/__init__.pyi" in names


@pytest.mark.slow         # several seconds: out of the fast core (make test-fast)
def test_the_code_imports_only_through_the_namespace():
    """No module, test or benchmark imports a package folder by its bare name: run from the
    repository, `import kernels` would load a second copy of ours (and installed, someone
    else's)."""
    bare = PACKAGE_FOLDERS | {"npu_tui"}
    # and in code a test or a benchmark hands to another interpreter as a string
    in_text = re.compile(r"(?:^|[\n;]|\bsys\.path[^\n;]*[\n;])\s*(?:from|import)\s+(" +
                         "|".join(sorted(bare)) + r")\b")
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in (".venv", "build") or rel.parts[0] == "npu_deploy" and \
                len(rel.parts) > 1 and rel.parts[1] in PACKAGE_FOLDERS:
            continue                     # the links: the same files, seen from inside
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if path == Path(__file__).resolve():
                    continue         # below, Hugging Face's `kernels` is imported on purpose
                offenders += [f"{rel}:{node.lineno} runs code that imports {m.group(1)}"
                              for m in in_text.finditer(node.value)]
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [f"{rel}:{node.lineno} imports {n}" for n in names
                          if n.split(".")[0] in bare]
    assert offenders == []


def _outside_the_checkout(code: str, python: str = sys.executable,
                          tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `code` from a directory that is not the repository (whose top-level folders are
    importable from the working directory)."""
    return subprocess.run([python, "-c", code], cwd=tmp or Path(sysconfig.get_paths()["data"]),
                          capture_output=True, text=True, timeout=300)


_WHICH_KERNELS = ("import importlib.util as u, importlib.metadata as m; "
                  "from transformers.utils import is_kernels_available; "
                  "s = u.find_spec('kernels'); "
                  "print(is_kernels_available(), s and s.origin, "
                  "s and m.distribution('kernels').locate_file('kernels/__init__.py'))")


def _which_kernels(done: subprocess.CompletedProcess[str]) -> tuple[str, str, str]:
    assert done.returncode == 0, done.stderr
    available, origin, installed = done.stdout.split()
    return available, origin, installed


def test_transformers_does_not_take_our_kernels_for_the_kernel_hub():
    """`kernels` is Hugging Face's kernel hub (a dependency of transformers from 5.25) or
    nothing: never ours, so transformers answers about the package it means."""
    available, origin, installed = _which_kernels(_outside_the_checkout(_WHICH_KERNELS))
    assert (available, origin) in (("False", "None"), ("True", installed)), (origin, installed)
    assert not origin.startswith(str(ROOT / "kernels"))


@pytest.mark.parametrize("package", ["benchmarks", "npu_deploy"])
def test_a_package_run_from_the_checkout_leaves_our_kernels_to_their_namespace(package):
    """`python -m benchmarks.NAME` or `python -m npu_deploy` puts the checkout on sys.path,
    where kernels/ would shadow Hugging Face's `kernels` (the emulator benchmark's model load
    failed on it: "cannot import name 'CUDAProperties' from 'kernels'"). Importing the
    package takes the checkout off again; -c puts it on the path just as -m does."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    code = f"import {package}.import_path as p; p.leave_the_checkout(); " if \
        package == "npu_deploy" else f"import {package}; "
    done = subprocess.run([sys.executable, "-c", code + _WHICH_KERNELS], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    available, origin, installed = _which_kernels(done)
    assert not origin.startswith(str(ROOT / "kernels"))
    assert (available, origin) in (("False", "None"), ("True", installed))


def test_the_evaluators_process_leaves_our_kernels_to_their_namespace():
    """Phase 7 starts the evaluator with `python -m` (`make demo` from the checkout, without
    PYTHONSAFEPATH): its interpreter flags keep the checkout's kernels/ from standing in for
    Hugging Face's (the demo's evaluator failed on it: "cannot import name 'CUDAProperties'
    from 'kernels'")."""
    from npu_deploy.pipeline.gates.evaluator import EVALUATOR_PYTHON

    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    done = subprocess.run([*EVALUATOR_PYTHON, "-c", _WHICH_KERNELS], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    available, origin, installed = _which_kernels(done)
    assert not origin.startswith(str(ROOT / "kernels"))
    assert (available, origin) in (("False", "None"), ("True", installed))


@pytest.mark.slow
def test_hugging_face_kernels_installs_beside_ours_and_both_work(wheel: Path, tmp_path: Path):
    """A scratch environment with our wheel and Hugging Face's `kernels` from PyPI (the other
    dependencies come from this venv): both import, and `npu-deploy kernels` runs."""
    env_dir = tmp_path / "scratch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   timeout=120)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], check=True,
                               capture_output=True, text=True).stdout.strip())
    # This venv's packages (torch, transformers, ...) after the scratch's own: a plain path
    # entry, so this venv's editable npu_deploy is not among them.
    (site / "base-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                "--target", str(site), str(wheel), "kernels"],
                               capture_output=True, text=True, timeout=600)
    if installed.returncode != 0 and "No matching distribution" in installed.stderr:
        pytest.skip("Hugging Face's kernels is not reachable on the package index")
    assert installed.returncode == 0, installed.stderr
    done = _outside_the_checkout(
        "import kernels, npu_deploy.kernels as ours; "
        "print(kernels.__file__); print(ours.__file__); "
        "from transformers.utils import is_kernels_available; print(is_kernels_available())",
        str(python), tmp_path)
    assert done.returncode == 0, done.stderr
    theirs, ours, available = done.stdout.split()
    assert theirs.startswith(str(site / "kernels"))
    assert ours.startswith(str(site / "npu_deploy" / "kernels"))
    run = subprocess.run([str(python), "-m", "npu_deploy", "kernels", "smollm2-135m",
                          "--seq-len", "128", "--json"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert '"kernel": "gemm_bf16"' in run.stdout
