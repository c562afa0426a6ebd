"""`npu-deploy build-objects`: every micro-kernel object the programs link, compiled with
Peano into one folder with a manifest, as upstream compiles its own
(programming_examples/llms/shared/infra/external_kernels.py `_compile_kernel`):

    $PEANO_INSTALL_DIR/bin/clang++ -O2 -std=c++20 --target=aie2p-none-unknown-elf -DNDEBUG
        -D__AIE_API_AIE_ADF_HPP__ -Wno-parentheses -Wno-attributes -Wno-macro-redefined
        -Wno-empty-body -I<mlir-aie include> [-include aie_kernels/aie_kernel_utils.h]
        -DNAME=VALUE... -c SOURCE -o OBJECT

with the recipe's defines (kernels.air_programs.air_parts.KernelSource). A recipe with
edits (literal replacements, each of a text that must occur once) compiles an edited copy
of its source, written in the folder's `.edited/`, with the source's own folder on the
include path for its local includes. `-D__AIE_API_AIE_ADF_HPP__`
keeps aie_api from including the Vitis-only adf.h, as upstream's flags do. The utilities
header is force-included for the sources upstream force-includes it for (silu_and_mul.cc,
gelu_and_mul.cc: external_kernels.py `compile_silu_and_mul`, and the example Makefiles).

Sources: a recipe of mlir-air (`programming_examples/...`) is read from the owner's mlir-air
checkout (`--mlir-air-source`), one of npu-deploy (`kernels/aie/...`) from this package.
Each built object is read back and must be an ELF for aie2p (kernels.npu_runtime.aie_objects).

The manifest (`manifest.json`) records per object its source, the SHA-256 of the source and
of the files it includes from its own folder (`#include "zero.cc"`), the defines, the target,
the flags, the Peano version and the object's own digest. An object whose inputs are all
unchanged is skipped; anything else is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..air_programs.air_parts import MLIR_AIR, NPU_DEPLOY, KernelSource
from .aie_objects import (
    MANIFEST,
    MANIFEST_SCHEMA,
    MANIFEST_VERSION,
    TARGET,
    UTILS_HEADER,
    object_problem,
    read_manifest,
)
from .toolchain import peano

#: upstream's `_PEANO_FLAGS`, in its order
PEANO_FLAGS = ("-O2", "-std=c++20", f"--target={TARGET}", "-DNDEBUG",
               "-D__AIE_API_AIE_ADF_HPP__", "-Wno-parentheses", "-Wno-attributes",
               "-Wno-macro-redefined", "-Wno-empty-body")
#: sources upstream compiles with aie_kernels/aie_kernel_utils.h force-included
FORCE_UTILS = frozenset({"programming_examples/silu_and_mul/silu_and_mul.cc",
                         "programming_examples/gelu_and_mul/gelu_and_mul.cc"})
#: our own kernel sources, as packaged: kernels/aie/*.cc beside this package's modules
PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent
MLIR_AIR_SOURCE_ENV = "NPU_DEPLOY_MLIR_AIR_SOURCE"
COMPILE_TIMEOUT_S = 600


class BuildError(RuntimeError):
    """build-objects cannot go on: what is wrong and what to do, in one line."""


@dataclass(frozen=True)
class Compiler:
    """Peano's clang++, the aie_api include directory and Peano's version."""

    clang: Path
    include: Path
    version: str


def find_compiler(include: Path | None) -> Compiler:
    """Peano where mlir-air looks for it, with the include directory `include` (found as
    upstream finds it); BuildError naming the fix when either is missing."""
    found = peano()
    if not found.ok:
        raise BuildError(f"no Peano (llvm-aie) on this machine: {found.problem}; "
                         f"{found.fix}, then run build-objects again")
    clang = Path(found.found or "") / "bin" / "clang++"
    if not (clang.is_file() and os.access(clang, os.X_OK)):
        raise BuildError(f"Peano at {found.found} has no executable bin/clang++; set "
                         "PEANO_INSTALL_DIR to a Peano (llvm-aie) install")
    if include is None:
        raise BuildError("no mlir-aie include directory with aie_api/aie.hpp: put "
                         "mlir-aie's aie-opt on PATH or set MLIR_AIE_INSTALL_DIR "
                         "(`npu-deploy doctor` says where it looked)")
    return Compiler(clang, include, found.version or "unknown")


def source_path(k: KernelSource, mlir_air: Path | None) -> Path:
    """Where the recipe's source is on this machine."""
    if k.repository == NPU_DEPLOY:
        return PACKAGE_ROOT / k.source
    if k.repository != MLIR_AIR:
        raise BuildError(f"{k.obj}: a source of {k.repository!r}, which build-objects "
                         "does not know")
    if mlir_air is None:
        raise BuildError(f"{k.obj} is compiled from mlir-air's {k.source}: give a checkout "
                         "of github.com/Xilinx/mlir-air with --mlir-air-source DIR "
                         f"(${MLIR_AIR_SOURCE_ENV})")
    return mlir_air / k.source


def locate_sources(recipes: Mapping[str, KernelSource], mlir_air: Path | None
                   ) -> dict[str, Path]:
    """Each recipe's source file on this machine; BuildError naming those not there."""
    sources = {obj: source_path(k, mlir_air) for obj, k in recipes.items()}
    absent = [f"{obj} ({path})" for obj, path in sources.items() if not path.is_file()]
    if absent:
        raise BuildError(f"{len(absent)} kernel source(s) not found: {', '.join(absent[:3])}"
                         + (", ..." if len(absent) > 3 else "")
                         + "; give the mlir-air checkout the programs were written against "
                           "with --mlir-air-source DIR")
    return sources


def local_includes(source: Path) -> dict[str, str]:
    """SHA-256 of each file `source` includes from its own folder (`#include "x"`), and of
    theirs, by name relative to that folder."""
    out: dict[str, str] = {}
    todo = [source]
    while todo:
        text = todo.pop().read_text(encoding="utf-8", errors="replace")
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            path = source.parent / name
            if name not in out and path.is_file():
                out[name] = _sha256(path)
                todo.append(path)
    return out


def edited_source(k: KernelSource, source: Path, out: Path) -> Path:
    """`source` itself, or, for a recipe with edits, its edited copy written in `out`'s
    `.edited/` folder (`<object>.cc`); BuildError when an edit's text does not occur exactly
    once (the checkout is not the source the edit was written for)."""
    if not k.edits:
        return source
    text = source.read_text(encoding="utf-8")
    for old, new in k.edits:
        found = text.count(old)
        if found != 1:
            raise BuildError(f"{k.obj}: the edit of {old!r} needs it exactly once in "
                             f"{source}, found {found}; give the mlir-air checkout the "
                             "programs were written against (--mlir-air-source DIR)")
        text = text.replace(old, new)
    copy = out / ".edited" / (Path(k.obj).stem + source.suffix)
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(text, encoding="utf-8")
    return copy


def command(k: KernelSource, source: Path, out: Path, cc: Compiler,
            compiled: Path | None = None) -> list[str]:
    """The clang++ line that compiles `k` from `source` into `out`; `compiled`: the edited
    copy of `source` that is compiled instead (its own folder's includes then found with
    -I of the original folder)."""
    cmd = [str(cc.clang), *PEANO_FLAGS, f"-I{cc.include}"]
    if compiled is not None and compiled != source:
        cmd.append(f"-I{source.parent}")
    if k.source in FORCE_UTILS and (cc.include / UTILS_HEADER).is_file():
        cmd += ["-include", str(cc.include / UTILS_HEADER)]
    cmd += [f"-D{name}" if value is None else f"-D{name}={value}" for name, value in k.defines]
    return [*cmd, "-c", str(compiled or source), "-o", str(out)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Built:
    """What became of one object: built, skipped (unchanged), or failed (why)."""

    obj: str
    status: str                     # built | skipped | failed
    seconds: float = 0.0
    message: str = ""
    entry: dict[str, Any] = field(default_factory=dict)


def _entry(k: KernelSource, source: Path, cc: Compiler, cmd: list[str]) -> dict[str, Any]:
    """The manifest entry of `k` before it is built: everything that decides its bytes."""
    entry: dict[str, Any] = {
        "source": k.source, "repository": k.repository, "path": str(source),
        "sha256": _sha256(source), "includes": local_includes(source),
        "defines": {n: v for n, v in k.defines}, "target": TARGET,
        "flags": list(PEANO_FLAGS), "include_dir": str(cc.include),
        "force_included": [c for c in cmd if c.endswith(str(UTILS_HEADER))],
        "peano": cc.version}
    if k.edits:                     # an unedited object's entry and key read as before
        entry["edits"] = [list(e) for e in k.edits]
    entry["key"] = hashlib.sha256(json.dumps(
        {n: entry[n] for n in ("sha256", "includes", "defines", "target", "flags",
                               "force_included", "peano", "edits") if n in entry},
        sort_keys=True, default=str).encode()).hexdigest()
    return entry


def _build_one(k: KernelSource, source: Path, out: Path, cc: Compiler,
               previous: Mapping[str, Any] | None) -> Built:
    target = out / k.obj
    try:
        compiled = edited_source(k, source, out)
    except BuildError as e:
        return Built(k.obj, "failed", message=str(e))
    cmd = command(k, source, target.with_name(f".{k.obj}.tmp"), cc, compiled)
    entry = _entry(k, source, cc, cmd)
    if previous and previous.get("key") == entry["key"] and target.is_file() \
            and previous.get("object_sha256") == _sha256(target):
        return Built(k.obj, "skipped", entry=dict(previous))
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        return Built(k.obj, "failed", message=f"clang++ could not run: {e}")
    seconds = time.perf_counter() - t0
    tmp = Path(cmd[-1])
    if done.returncode != 0:
        errors = [ln for ln in done.stderr.splitlines() if "error" in ln.lower()]
        tmp.unlink(missing_ok=True)
        return Built(k.obj, "failed", seconds, "; ".join(errors[:3]) or
                     (done.stderr.strip().splitlines() or ["clang++ failed"])[-1])
    problem = object_problem(tmp) if tmp.is_file() else "clang++ wrote no object"
    if problem:
        tmp.unlink(missing_ok=True)
        return Built(k.obj, "failed", seconds, f"the object Peano wrote is {problem}")
    tmp.replace(target)
    entry.update(command=[*cmd[:-1], str(target)], object_sha256=_sha256(target),
                 built=datetime.now(UTC).isoformat(timespec="seconds"),
                 compile_s=round(seconds, 3))
    return Built(k.obj, "built", seconds, entry=entry)


def build_objects(recipes: Mapping[str, KernelSource], out: Path, cc: Compiler,
                  mlir_air: Path | None, *, jobs: int = 1, models: tuple[str, ...] = (),
                  seq_len: int | None = None,
                  done: Callable[[Built], None] = lambda b: None) -> list[Built]:
    """Compile every recipe into `out` (each object skipped when unchanged), then write the
    manifest: the entries of this build over those of objects built before. Sources are
    located first, so a missing checkout fails before anything is compiled."""
    sources = locate_sources(recipes, mlir_air)
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out / ".build.lock")):
        manifest = read_manifest(out) or {}
        before = manifest.get("objects", {})
        results: list[Built] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(_build_one, recipes[obj], sources[obj], out, cc,
                                   before.get(obj)) for obj in sorted(recipes)]
            for future in futures:
                result = future.result()
                done(result)
                results.append(result)
        objects = {**before, **{b.obj: b.entry for b in results if b.status != "failed"}}
        write_manifest(out, {
            "schema": MANIFEST_SCHEMA, "version": MANIFEST_VERSION, "target": TARGET,
            "peano": cc.version, "clang": str(cc.clang), "include_dir": str(cc.include),
            "models": sorted(set(manifest.get("models", [])) | set(models)),
            "seq_len": seq_len, "objects": objects})
    return results


def write_manifest(out: Path, data: dict[str, Any]) -> None:
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out / MANIFEST)


__all__ = ["FORCE_UTILS", "MLIR_AIR_SOURCE_ENV", "PEANO_FLAGS", "BuildError", "Built",
           "Compiler", "build_objects", "command", "edited_source", "find_compiler",
           "local_includes",
           "locate_sources",
           "source_path"]
