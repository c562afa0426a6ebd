"""`npu-deploy build-objects` and the doctor's check of the objects folder, through the real
command line, with a stand-in Peano (tests/fake_peano.py: a script in place of clang++ that
writes a relocatable AIE ELF), a stand-in mlir-aie include directory and a stand-in mlir-air
checkout. Peano, mlir-aie and mlir-air are not installable here; everything else is real:
the plans, the recipes, the commands, the manifest, the ELF checks."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from conftest import assert_one_error
from fake_peano import VERSION, aie_install, calls, mlir_air_checkout, peano

from npu_deploy.kernels.air_programs.air_parts import MLIR_AIR
from npu_deploy.kernels.npu_runtime.aie_objects import (
    EF_AIE_AIE2P,
    EM_AIE,
    TARGET,
    object_problem,
    read_header,
)
from npu_deploy.kernels.npu_runtime.needed_objects import needed_objects
from npu_deploy.kernels.npu_runtime.peano_build import PACKAGE_ROOT, PEANO_FLAGS
from npu_deploy.models import CATALOG

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def needed():
    return needed_objects(MODEL, CATALOG[MODEL].args, 128)


@pytest.fixture
def kit(tmp_path: Path, monkeypatch, needed):
    """A machine with Peano, mlir-aie's headers and an mlir-air checkout (stand-ins)."""
    root = peano(tmp_path / "peano")
    aie = aie_install(tmp_path / "mlir-aie")
    sources = {n.source.source for n in needed.values() if n.source.repository == MLIR_AIR}
    checkout = mlir_air_checkout(tmp_path / "mlir-air", sources)
    monkeypatch.setenv("PEANO_INSTALL_DIR", str(root))
    monkeypatch.setenv("MLIR_AIE_INSTALL_DIR", str(aie))
    monkeypatch.setenv("PATH", str(tmp_path / "no-aie-opt"))   # upstream's first place
    return {"peano": root, "include": aie / "include", "checkout": checkout,
            "out": tmp_path / "objects"}


def build(cli, kit, *more):
    return cli("build-objects", MODEL, "--out", kit["out"], "--mlir-air-source",
               kit["checkout"], "--jobs", 2, *more)


def test_without_peano_it_says_how_to_get_it_and_builds_nothing(cli, tmp_path: Path,
                                                                monkeypatch):
    monkeypatch.delenv("PEANO_INSTALL_DIR", raising=False)
    result = cli("build-objects", MODEL, "--out", tmp_path / "objects")
    assert result.exit_code == 1
    assert_one_error(result, "no Peano (llvm-aie)", "pip install llvm-aie",
                     "PEANO_INSTALL_DIR")
    assert not (tmp_path / "objects").exists()


def test_every_object_the_plans_link_is_built_as_upstream_builds_it(cli, kit, needed):
    result = build(cli, kit, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["built"] == len(needed) == 12 and summary["failed"] == 0
    out = kit["out"]
    assert sorted(p.name for p in out.glob("*.o")) == sorted(needed)

    # the compiler's command lines: upstream's flags and target, the include directory,
    # each recipe's defines, its source, the utilities header where upstream adds it
    clang = str(kit["peano"] / "bin" / "clang++")
    commands = {Path(c[c.index("-o") + 1]).name.strip(".").removesuffix(".tmp"): c
                for c in calls(kit["peano"])}
    assert set(commands) == set(needed)
    for obj, need in needed.items():
        k, cmd = need.source, commands[obj]
        assert cmd[0] == clang and cmd[1:1 + len(PEANO_FLAGS)] == list(PEANO_FLAGS)
        assert f"--target={TARGET}" in cmd and f"-I{kit['include']}" in cmd
        defines = [c for c in cmd if c.startswith("-D") and c not in PEANO_FLAGS]
        assert defines == [f"-D{n}" if v is None else f"-D{n}={v}" for n, v in k.defines]
        where = kit["checkout"] if k.repository == MLIR_AIR else PACKAGE_ROOT
        if k.edits:     # our native-bf16 attention: an edited copy, its folder included
            copy = kit["out"] / ".edited" / (Path(obj).stem + ".cc")
            assert cmd[cmd.index("-c") + 1] == str(copy)
            assert f"-I{(where / k.source).parent}" in cmd
            assert copy.read_text() == (where / k.source).read_text().replace(
                "constexpr int r = 8;", "constexpr int r = 4;")
        else:
            assert cmd[cmd.index("-c") + 1] == str(where / k.source)
        forced = "-include" in cmd
        assert forced == (obj == "silu_and_mul.o")
        if forced:
            assert cmd[cmd.index("-include") + 1].endswith("aie_kernels/aie_kernel_utils.h")

    # the objects: relocatable AIE ELFs built for aie2p
    for obj in needed:
        header = read_header(out / obj)
        assert header is not None and header.e_machine == EM_AIE
        assert header.e_flags == EF_AIE_AIE2P and object_problem(out / obj) is None

    # the manifest: per object its source, digest, defines, target, Peano's version
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["models"] == [MODEL] and manifest["seq_len"] == 128
    assert manifest["target"] == TARGET and manifest["peano"] == VERSION
    for obj, need in needed.items():
        entry = manifest["objects"][obj]
        source = Path(entry["path"])
        assert entry["source"] == need.source.source and entry["target"] == TARGET
        assert entry["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
        assert entry["defines"] == {n: v for n, v in need.source.defines}
        assert entry["peano"] == VERSION
        assert entry["object_sha256"] == hashlib.sha256((out / obj).read_bytes()).hexdigest()
        if need.source.repository == MLIR_AIR:
            assert set(entry["includes"]) == {"zero.cc"}
        assert entry.get("edits", []) == [list(e) for e in need.source.edits]
    assert any(n.source.edits for n in needed.values())     # attn_npu2_bf16_*.o


@pytest.mark.slow         # several seconds: out of the fast core (make test-fast)
def test_an_unchanged_object_is_skipped_and_a_changed_source_rebuilt(cli, kit, needed):
    assert build(cli, kit).exit_code == 0
    first = len(calls(kit["peano"]))
    again = build(cli, kit)
    assert again.exit_code == 0 and "0 built, 12 skipped" in again.stdout
    assert len(calls(kit["peano"])) == first                  # the compiler never ran
    rope = kit["checkout"] / needed["rope.o"].source.source
    rope.write_text(rope.read_text() + "// edited\n")
    third = build(cli, kit)
    assert "1 built, 11 skipped" in third.stdout and "built    rope.o" in third.stderr
    (kit["out"] / "mv_m8.o").write_bytes(b"damaged")          # an object changed by hand
    assert "1 built, 11 skipped" in build(cli, kit).stdout


def test_a_failed_compile_or_a_wrong_object_fails_with_the_compilers_error(cli, kit, needed,
                                                                           monkeypatch):
    rope = kit["checkout"] / needed["rope.o"].source.source
    rope.write_text("FAKE_ERROR\n")
    result = build(cli, kit)
    assert result.exit_code == 1
    assert "FAILED   rope.o:" in result.stderr and "undeclared identifier" in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("npu-deploy: error:") and "1 object(s) did not compile" in last
    manifest = json.loads((kit["out"] / "manifest.json").read_text())
    assert "rope.o" not in manifest["objects"] and len(manifest["objects"]) == 11
    rope.write_text("// fixed\n")
    monkeypatch.setenv("FAKE_PEANO_EFLAGS", "2")               # a compiler for XDNA 1
    result = build(cli, kit)
    assert result.exit_code == 1 and "built for aie2 (XDNA 1)" in result.stderr


def test_a_missing_checkout_or_source_fails_before_anything_is_compiled(cli, kit, needed):
    result = cli("build-objects", MODEL, "--out", kit["out"])
    assert_one_error(result, "--mlir-air-source DIR")
    (kit["checkout"] / needed["rope.o"].source.source).unlink()
    result = build(cli, kit)
    assert_one_error(result, "1 kernel source(s) not found", "rope.o")
    assert calls(kit["peano"]) == []


# --- the doctor's look at the folder ---------------------------------------------------------

def objects_line(cli, *args) -> dict:
    rows = json.loads(cli("doctor", "--json", *args).stdout)
    return next(r for r in rows if r["key"] == "objects")


@pytest.mark.slow         # several seconds: out of the fast core (make test-fast)
def test_doctor_reads_the_folder_each_object_and_the_plans(cli, kit, needed):
    out = kit["out"]
    out.mkdir()
    empty = objects_line(cli, "--air-objects", out)
    assert empty["found"] is None and "holds no objects" in empty["problem"]
    assert build(cli, kit).exit_code == 0
    good = objects_line(cli, "--air-objects", out)          # the manifest's model
    assert good["found"] and f"all {len(needed)} the plans link" in good["found"]
    (out / "rope.o").unlink()
    missing = objects_line(cli, "--air-objects", out)
    assert missing["found"] is None and "1 object(s) the plans link are not there (rope.o)" \
        in missing["problem"]
    # an object built for the other generation, and a file that is no ELF
    elf = bytearray((out / "mv_m8.o").read_bytes())
    elf[36] = 2                                               # e_flags: aie2
    (out / "rope.o").write_bytes(bytes(elf))
    (out / "mv_m16.o").write_text("not an object")
    wrong = objects_line(cli, "--air-objects", out)
    assert "2 of 12 object(s) are not NPU2 objects" in wrong["problem"]
    assert "mv_m16.o: not an ELF file" in wrong["problem"]
    assert "rope.o: built for aie2 (XDNA 1)" in wrong["problem"]
    # another model's plans link objects this folder lacks
    other = objects_line(cli, "--air-objects", out, "--model", "qwen2.5-0.5b")
    assert re.search(r"\b[1-9] object\(s\) the plans link are not there "
                     r"\(decode_attn_7x64x192\.o", other["problem"]), other["problem"]
