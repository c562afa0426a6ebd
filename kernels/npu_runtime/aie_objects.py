"""What an AIE micro-kernel object for NPU2 is, where the headers it is compiled against are,
and whether a folder of them is fit to link: the checks `npu-deploy doctor` runs and the
facts `npu-deploy build-objects` (kernels.npu_runtime.peano_build) builds to.

An object for XDNA 2 is what Peano writes for `--target=aie2p-none-unknown-elf`: a 32-bit,
little-endian relocatable ELF whose machine is EM_AIE (264) and whose e_flags name the
AIE2P architecture (3). The same source built for XDNA 1 (`aie2-none-unknown-elf`) carries
e_flags 2, links, and is the wrong core's code. Where the values come from:
Xilinx/llvm-aie `llvm/include/llvm/BinaryFormat/ELF.h` (EM_AIE = 264, EF_AIE_AIE1 = 1,
EF_AIE_AIE2 = 2) and `llvm/lib/Target/AIE/MCTargetDesc/AIETargetELFStreamer.cpp` (the
streamer sets e_flags from the target triple's architecture); the AIE2P value, 3, was added
with AIE2P's linker support (Xilinx/llvm-aie pull request 267) after issue 258 reported
that objects built for `aie2p-none-unknown-elf` carry e_flags 3 and those for
`aie2-none-unknown-elf` carry 2 (docs/hardware-facts.md#the-toolchain-on-the-machine).

The aie_api headers (`aie_api/aie.hpp`) and `aie_kernels/aie_kernel_utils.h` are mlir-aie's,
in its install's `include/`: upstream finds it from `aie-opt` on PATH (`<bin>/../include`),
then `$MLIR_AIE_INSTALL_DIR/include` (programming_examples/llms/shared/infra/
external_kernels.py `_get_aie_include_dir`, and every example Makefile's AIEOPT_DIR).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Peano's target triple for XDNA 2 (NPU2, Strix / Krackan): upstream's `_PEANO_FLAGS`.
TARGET = "aie2p-none-unknown-elf"
EM_AIE = 264
EF_AIE_AIE2 = 2           # XDNA 1 (Phoenix, Hawk Point)
EF_AIE_AIE2P = 3          # XDNA 2 (Strix, Strix Halo, Krackan)
ET_REL = 1                # a relocatable object (.o)
ARCHITECTURES = {1: "aie (Versal AIE1)", EF_AIE_AIE2: "aie2 (XDNA 1)",
                 EF_AIE_AIE2P: "aie2p (XDNA 2)"}

#: the header every AIE kernel source includes, under the include directory
AIE_API_HEADER = Path("aie_api") / "aie.hpp"
#: mlir-aie's kernel helpers, force-included for the kernels whose recipe asks for it
UTILS_HEADER = Path("aie_kernels") / "aie_kernel_utils.h"

#: the file build-objects writes beside the objects
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "npu-deploy/kernel-objects"
MANIFEST_VERSION = 1
#: where build-objects writes and doctor and validate-hardware look, unless told
ENV = "NPU_DEPLOY_AIR_OBJECTS"


def default_objects_dir() -> Path:
    """$NPU_DEPLOY_AIR_OBJECTS, else air-objects/ in the user's data directory
    (~/.local/share/npu-deploy/air-objects), beside the run store."""
    env = os.environ.get(ENV, "")
    if env:
        return Path(env)
    from platformdirs import user_data_path
    return user_data_path("npu-deploy") / "air-objects"


# --- one object's ELF header ---------------------------------------------------------------

@dataclass(frozen=True)
class ElfHeader:
    """The fields of an ELF header that say what a file is built for."""

    elf_class: int        # 1: 32-bit, 2: 64-bit
    data: int             # 1: little-endian
    e_type: int
    e_machine: int
    e_flags: int


def read_header(path: Path) -> ElfHeader | None:
    """The ELF header of `path`, or None when it is not an ELF file (or too short to be)."""
    try:
        with path.open("rb") as f:
            head = f.read(52)
    except OSError:
        return None
    if len(head) < 52 or head[:4] != b"\x7fELF":
        return None
    elf_class, data = head[4], head[5]
    order = "<" if data == 1 else ">"
    e_type, e_machine = struct.unpack_from(order + "HH", head, 16)
    # e_flags sits after e_version, e_entry, e_phoff, e_shoff: 4 words in ELF32
    offset = 36 if elf_class == 1 else 48
    if len(head) < offset + 4:
        return None
    (e_flags,) = struct.unpack_from(order + "I", head, offset)
    return ElfHeader(elf_class, data, e_type, e_machine, e_flags)


def object_problem(path: Path) -> str | None:
    """Why `path` is not an object built for NPU2 (aie2p), or None when it is."""
    h = read_header(path)
    if h is None:
        return "not an ELF file"
    if h.e_machine != EM_AIE:
        return f"an ELF for machine {h.e_machine}, not an AIE core (EM_AIE, {EM_AIE})"
    if h.elf_class != 1 or h.data != 1:
        return "not a 32-bit little-endian ELF, as Peano writes for the AIE cores"
    if h.e_flags != EF_AIE_AIE2P:
        built = ARCHITECTURES.get(h.e_flags, f"e_flags {h.e_flags:#x}")
        return f"built for {built}, not aie2p (XDNA 2, e_flags {EF_AIE_AIE2P})"
    if h.e_type != ET_REL:
        return f"an ELF of type {h.e_type}, not a relocatable object (.o)"
    return None


# --- the headers ------------------------------------------------------------------------------

def aie_include_dir() -> tuple[Path | None, str]:
    """mlir-aie's include directory with aie_api/aie.hpp, found as upstream finds it, and
    where it was looked for (for the line that says why not)."""
    looked = []
    aie_opt = shutil.which("aie-opt")
    if aie_opt:
        candidate = Path(aie_opt).resolve().parent.parent / "include"
        if (candidate / AIE_API_HEADER).is_file():
            return candidate, ""
        looked.append(f"{candidate} (beside aie-opt) has no {AIE_API_HEADER}")
    else:
        looked.append("no aie-opt on PATH")
    given = os.environ.get("MLIR_AIE_INSTALL_DIR", "")
    if given:
        candidate = Path(given) / "include"
        if (candidate / AIE_API_HEADER).is_file():
            return candidate, ""
        looked.append(f"$MLIR_AIE_INSTALL_DIR/include ({candidate}) has no {AIE_API_HEADER}")
    else:
        looked.append("MLIR_AIE_INSTALL_DIR is not set")
    return None, "; ".join(looked)


# --- the folder -------------------------------------------------------------------------------

def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest build-objects wrote in `directory`, or None (none, or not one)."""
    try:
        data = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA \
            or not isinstance(data.get("objects"), dict):
        return None
    return data


@dataclass(frozen=True)
class FolderCheck:
    """The objects folder as doctor sees it: its objects, the ones that are not NPU2 objects
    (name -> why), and the ones the plans link that are not there."""

    directory: Path
    objects: tuple[str, ...]
    bad: dict[str, str]
    missing: tuple[str, ...]

    @property
    def problem(self) -> str:
        """One clause per thing wrong, or "" when the folder can be linked from."""
        if not self.directory.is_dir():
            return f"{self.directory} is not a directory"
        if not self.objects:
            return f"{self.directory} holds no objects (*.o)"
        parts = []
        if self.bad:
            first = sorted(self.bad.items())[:3]
            parts.append(f"{len(self.bad)} of {len(self.objects)} object(s) are not NPU2 "
                         "objects (" + ", ".join(f"{n}: {why}" for n, why in first)
                         + (", ..." if len(self.bad) > 3 else "") + ")")
        if self.missing:
            parts.append(f"{len(self.missing)} object(s) the plans link are not there ("
                         + ", ".join(self.missing[:4])
                         + (", ..." if len(self.missing) > 4 else "") + ")")
        return "; ".join(parts)


def check_folder(directory: Path, needed: set[str] | None = None) -> FolderCheck:
    """Every *.o in `directory` read as an ELF, and `needed` (the objects the plans link)
    looked for."""
    if not directory.is_dir():
        return FolderCheck(directory, (), {}, tuple(sorted(needed or ())))
    objects = tuple(sorted(p.name for p in directory.glob("*.o") if p.is_file()))
    bad = {name: why for name in objects if (why := object_problem(directory / name))}
    missing = tuple(sorted((needed or set()) - set(objects)))
    return FolderCheck(directory, objects, bad, missing)


__all__ = ["AIE_API_HEADER", "EF_AIE_AIE2", "EF_AIE_AIE2P", "EM_AIE", "ENV", "ET_REL",
           "MANIFEST", "TARGET", "UTILS_HEADER", "ElfHeader", "FolderCheck",
           "aie_include_dir", "check_folder", "default_objects_dir", "object_problem",
           "read_header", "read_manifest"]
