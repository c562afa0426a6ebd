"""A stand-in for Peano (llvm-aie) and for the folders it works with, built as files in a
test's directory: Peano is not installable here.

`peano(root)` writes `root/bin/clang` (and `clang++`, the same script), an executable that
answers `--version` as a Peano build does and otherwise compiles the way Peano's driver is
called (`-c SOURCE -o OBJECT --target=...`): it writes a minimal relocatable ELF32 with the
AIE machine (264) and the e_flags of the target's architecture (aie2: 2, aie2p: 3, as
Xilinx/llvm-aie's ELF streamer sets them), and appends its command line to `calls.jsonl`
beside it. A source that contains `FAKE_ERROR` fails as a compile error does. `FAKE_PEANO_EFLAGS`
overrides the flags it writes (a compiler that builds for the wrong core).

`aie_install(root)` is mlir-aie's include directory (aie_api/aie.hpp,
aie_kernels/aie_kernel_utils.h); `mlir_air_checkout(root, sources)` an mlir-air checkout
with the given kernel sources (programming_examples/...), each a few lines of text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VERSION = "clang version 19.0.0git (https://github.com/Xilinx/llvm-aie fake)"

SCRIPT = r'''#!{python}
import json, os, struct, sys
from pathlib import Path
args = sys.argv[1:]
here = Path(__file__).resolve().parent.parent
if "--version" in args:
    print({version!r}); print("Target: aie2p-none-unknown-elf"); sys.exit(0)
with open(here / "calls.jsonl", "a") as log:
    log.write(json.dumps([sys.argv[0], *args]) + "\n")
out = args[args.index("-o") + 1]
source = args[args.index("-c") + 1]
if "FAKE_ERROR" in Path(source).read_text():
    print(f"{{source}}:3:1: error: use of undeclared identifier 'FAKE_ERROR'", file=sys.stderr)
    sys.exit(1)
target = next(a.split("=", 1)[1] for a in args if a.startswith("--target="))
flags = {{"aie-none-unknown-elf": 1, "aie2-none-unknown-elf": 2,
         "aie2p-none-unknown-elf": 3}}[target]
flags = int(os.environ.get("FAKE_PEANO_EFLAGS", flags))
ident = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9)
header = ident + struct.pack("<HHIIIIIHHHHHH", 1, 264, 1, 0, 0, 0, flags, 52, 0, 0, 40, 0, 0)
Path(out).write_bytes(header + source.encode())
'''


def peano(root: Path) -> Path:
    """A Peano install at `root` (PEANO_INSTALL_DIR): bin/clang and bin/clang++."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    clang = bin_dir / "clang"
    clang.write_text(SCRIPT.format(python=sys.executable, version=VERSION))
    clang.chmod(0o755)
    plus = bin_dir / "clang++"
    plus.write_text(clang.read_text())
    plus.chmod(0o755)
    return root


def calls(root: Path) -> list[list[str]]:
    """Every compile the fake Peano at `root` ran, its argv."""
    log = root / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def aie_install(root: Path) -> Path:
    """An mlir-aie install (MLIR_AIE_INSTALL_DIR) with the headers the kernels include."""
    include = root / "include"
    (include / "aie_api").mkdir(parents=True, exist_ok=True)
    (include / "aie_api" / "aie.hpp").write_text("// aie_api stand-in\n")
    (include / "aie_kernels").mkdir(parents=True, exist_ok=True)
    (include / "aie_kernels" / "aie_kernel_utils.h").write_text("// utils stand-in\n")
    return root


def mlir_air_checkout(root: Path, sources: set[str]) -> Path:
    """An mlir-air checkout holding `sources` (paths under it), each including a zero.cc of
    its folder, as several of upstream's kernels do; attn_npu2.cc also holds the line our
    native-bf16 build edits (its matmul's `constexpr int r = 8;`), once, as upstream's does."""
    for source in sources:
        path = root / source
        path.parent.mkdir(parents=True, exist_ok=True)
        text = f'#include <aie_api/aie.hpp>\n#include "zero.cc"\n// {source}\n'
        if source.endswith("attn_npu2.cc"):
            text += "constexpr int r = 8;\n"
        path.write_text(text)
        (path.parent / "zero.cc").write_text("// zero stand-in\n")
    return root
