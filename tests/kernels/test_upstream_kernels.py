"""Upstream's micro-kernel signatures: the data file loads with its provenance, each symbol
is recorded once, every reach expression evaluates and agrees with its blocked layout, the
evaluator refuses anything but arithmetic, a known fact per kernel family holds, and, where a
clone of Xilinx/mlir-air is at hand, every entry is what the source at the recorded commit
declares."""

from __future__ import annotations

import math
import re

import pytest
from paths import MIRROR

from npu_deploy.kernels.measured.ingest import Mirror
from npu_deploy.kernels.measured.measurements import load
from npu_deploy.kernels.measured.upstream_kernels import (
    DATA,
    elements,
    evaluate,
    kernel,
    kernels,
    provenance,
    suffixed,
    unmet,
)

POINTER_TYPES = {"bf16*", "f32*", "i8*"}
ACCESS = {"read", "write", "readwrite"}
#: An int argument's value wherever a test needs one: a multiple of every vector width.
SOME_INT = 64


def sample_ints(symbol: str) -> dict[str, int]:
    return dict.fromkeys(kernel(symbol).int_params, SOME_INT)


# --- the file ---------------------------------------------------------------------------------

def test_the_file_says_where_and_when_it_was_read():
    src = load(DATA)["source"]
    assert src == {"repository": "Xilinx/mlir-air",
                   "commit": "e972f2942d41123f161276b27f991ef10da2a2e6",
                   "date": "2026-08-22", "read": "2026-11-27"}
    assert provenance() == "Xilinx/mlir-air @ e972f2942d41, 2026-08-22"


def test_every_symbol_is_recorded_once():
    symbols = [row["symbol"] for row in load(DATA)["kernels"]]
    assert len(symbols) == len(set(symbols)) == len(kernels())


def test_every_param_is_a_typed_buffer_or_an_int():
    for k in kernels().values():
        assert len({p.name for p in k.params}) == len(k.params), k.symbol
        # an int argument and a define of the same name would shadow each other
        assert not set(k.int_params) & {name for name, _ in k.defines}, k.symbol
        for p in k.params:
            if p.pointer:
                assert p.type in POINTER_TYPES and p.access in ACCESS and p.elements, p
            else:
                assert p.type == "i32" and p.elements is None and p.access is None, p


def test_every_expression_evaluates_for_the_defaults():
    for symbol, k in kernels().items():
        defines, ints = k.resolved(), sample_ints(symbol)
        for p in k.params:
            if p.pointer:
                assert elements(p, defines, ints) > 0, (symbol, p.name)
        for r in k.requires:
            evaluate(r.value, {**defines, **ints})


def test_the_defaults_meet_every_requirement():
    for symbol, k in kernels().items():
        assert unmet(k, k.resolved(), sample_ints(symbol)) == []


def test_a_blocked_layout_covers_exactly_its_buffer():
    laid_out = [k for k in kernels().values() if k.mmul]
    assert {k.symbol for k in laid_out} == {
        "op_has_no_registered_library_name", "matmul_a_b_bf16", "matmul_g_b_bf16"}
    for k in laid_out:
        defines = k.resolved()
        for p in k.params:
            assert p.blocks is not None and len(p.blocks.shape) == len(p.blocks.axes) == 4
            size = math.prod(d if isinstance(d, int) else evaluate(d, defines)
                             for d in p.blocks.shape)
            assert size == elements(p, defines, {}), (k.symbol, p.name)
            assert p.blocks.shape[2:] == (8, 8) and k.mmul == (8, 8, 8)


# --- the evaluator ----------------------------------------------------------------------------

@pytest.mark.parametrize("expression", [
    "__import__('os')", "__import__('os').system('true')", "().__class__", "n.real", "f(n)",
    "2**10", "n % 16", "n / 2", "-n", "n if n else 1", "'text'", "True", "[n]", "n < 1",
    "1.5", "lambda: 1", "",
])
def test_the_evaluator_refuses_anything_but_arithmetic(expression):
    with pytest.raises(ValueError):
        evaluate(expression, {"n": 4, "f": 1})


def test_the_evaluator_does_integer_arithmetic_with_parentheses():
    assert evaluate("(2*(dk//8)-1+lc)*8*lqp", {"dk": 64, "lc": 1, "lqp": 32}) == 4096
    assert evaluate("row_offset+m", {"row_offset": 4, "m": 4}) == 8


def test_the_evaluator_names_what_it_lacks_and_refuses_division_by_zero():
    with pytest.raises(ValueError, match="'DIM_K'"):
        evaluate("DIM_M*DIM_K", {"DIM_M": 64})
    with pytest.raises(ValueError, match="zero"):
        evaluate("n//m", {"n": 4, "m": 0})


# --- looking kernels up -----------------------------------------------------------------------

def test_an_invented_symbol_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="matmul_bf16_f32_64x32x128") as err:
        kernel("matmul_bf16_f32_64x32x128")
    assert "op_has_no_registered_library_name" in str(err.value)
    assert "rope" in str(err.value)


def test_only_the_gemm_object_can_rename_its_symbols():
    assert {s for s, k in kernels().items() if k.suffix_define} == {
        "op_has_no_registered_library_name", "zero_f32_mn", "f32_to_bf16_mn", "f32_to_bf16_n"}
    assert suffixed("zero_f32_mn", "_m64") == "zero_f32_mn_m64"
    assert suffixed("op_has_no_registered_library_name", "_m32_n80") == \
        "op_has_no_registered_library_name_m32_n80"
    with pytest.raises(ValueError, match="cannot be renamed"):
        suffixed("linalg_fill_bf16", "_m8")
    with pytest.raises(ValueError, match="identifier"):
        suffixed("zero_f32_mn", "-m64")


def test_a_define_defaulting_to_another_follows_it():
    k = kernel("zero_fill_gp_bf16_all")
    assert k.resolved() == {"lqp": 32, "dv": 64, "dv_full": 64, "dk": 64, "dk_full": 64}
    assert k.resolved({"dv": 32})["dv_full"] == 32
    assert elements(k.param("base"), k.resolved({"dv": 64, "dv_full": 128}), {}) == 2 * 32 * 64
    with pytest.raises(ValueError, match="DIM_M"):
        k.resolved({"DIM_M": 64})


def test_attention_compiles_its_softmax_scale_for_four_head_dims_only():
    # attn_npu2.cc: static_assert(dk_full == 64 || 128 || 256 || 512), a file-wide define,
    # so every symbol of the object carries it
    for symbol in ("matmul_a_b_bf16", "exp_g_minus_u", "zero_fill_gp_bf16"):
        k = kernel(symbol)
        assert unmet(k, k.resolved({"dk_full": 128}), sample_ints(symbol)) == []
        assert unmet(k, k.resolved({"dk_full": 32}), sample_ints(symbol)) == [
            f"{symbol}: dk_full = 32, the code compiles only 64, 128, 256, 512"]


def test_broken_requirements_are_named():
    gemm = kernel("op_has_no_registered_library_name")
    assert unmet(gemm, gemm.resolved({"DIM_M": 40})) == [
        "op_has_no_registered_library_name: DIM_M = 40 is not a multiple of 16"]
    group = kernel("attn_1_group")
    assert unmet(group, group.resolved({"GROUP_SIZE": 8}), {"pos": 0}) == [
        "attn_1_group: GROUP_SIZE = 8, the code requires 4"]
    gemv = kernel("matvec_vectorized_bf16_bf16")
    assert unmet(gemv, {}, {"m": 8, "k": 600, "row_offset": 0}) == [
        "matvec_vectorized_bf16_bf16: k = 600 is not a multiple of 64"]
    assert unmet(gemv, {}) == []    # an int not given is not judged


# --- a known fact per kernel family: each would fail if the data were wrong -------------------

SPOT = [
    # symbol, param, type, access, define overrides, int arguments, elements
    ("op_has_no_registered_library_name", "a_in", "bf16*", "read",
     {"DIM_M": 64, "DIM_K": 32, "DIM_N": 128}, {}, 64 * 32),
    ("op_has_no_registered_library_name", "b_in", "bf16*", "read",
     {"DIM_M": 64, "DIM_K": 32, "DIM_N": 128}, {}, 32 * 128),
    ("op_has_no_registered_library_name", "c_out", "f32*", "readwrite",
     {"DIM_M": 64, "DIM_K": 32, "DIM_N": 128}, {}, 64 * 128),
    ("zero_f32_mn", "c", "f32*", "write", {"DIM_M": 32, "DIM_N": 128}, {}, 32 * 128),
    ("f32_to_bf16_mn", "dst", "bf16*", "write", {"DIM_M": 32, "DIM_N": 128}, {}, 32 * 128),
    ("f32_to_bf16_n", "src", "f32*", "read", {}, {"n": 512}, 512),
    ("matvec_vectorized_bf16_bf16", "a_in", "bf16*", "read", {},
     {"m": 4, "k": 2048, "row_offset": 4}, 4 * 2048),
    ("matvec_vectorized_bf16_bf16", "c_out", "bf16*", "write", {},
     {"m": 4, "k": 2048, "row_offset": 4}, 8),
    ("linalg_fill_bf16", "c_out", "bf16*", "write", {"DIM_M_OUTPUT": 8}, {}, 8),
    ("matvec_vectorized_bf16", "c", "bf16*", "readwrite", {}, {}, 8),
    ("matvec_vectorized_bf16", "a", "bf16*", "read", {}, {}, 8 * 512),
    ("partial_plus_r_bf16", "r_full", "bf16*", "read", {}, {"offset": 16}, 24),
    ("rope", "lut", "bf16*", "read", {}, {"dims": 64}, 64),
    ("rope_partial", "lut", "bf16*", "read", {}, {"dims": 128, "rope_dims": 96}, 96),
    ("rope_partial", "output", "bf16*", "write", {}, {"dims": 128, "rope_dims": 96}, 128),
    ("silu_and_mul_bf16", "out", "bf16*", "write", {}, {"n": 4096}, 4096),
    ("gelu_and_mul_bf16", "gate", "bf16*", "read", {}, {"n": 4096}, 4096),
    ("matmul_a_b_bf16", "out", "bf16*", "readwrite", {}, {}, 32 * 96),
    ("matmul_g_b_bf16", "b_in", "bf16*", "read", {"lkp": 64, "dv": 128}, {}, 64 * 128),
    ("fused_softmax", "up", "bf16*", "readwrite", {}, {}, 32),
    ("vector_copy_32elems", "outputs", "bf16*", "write", {"lqp": 64}, {"offset": 0}, 64),
    ("apply_causal_mask", "g", "bf16*", "readwrite", {"lqp": 64, "lkp": 64}, {}, 64 * 64),
    ("copy_half_tile", "src", "bf16*", "read", {"lqp": 32, "dk": 64}, {"lc": 1}, 2 * 32 * 64),
    ("matmul_g_b_bf16_chunk", "out_base", "bf16*", "readwrite", {}, {"c": 1}, 2 * 32 * 64),
    ("sinf_bf16_32_16", "inputs", "f32*", "read", {}, {}, 32),
    ("shuffle_apply_rope_bf16_64", "outputs", "bf16*", "readwrite", {}, {"offset": 256}, 320),
    ("attn_1_group", "attn_out", "bf16*", "write", {}, {"pos": 5}, 3 * 128 + 6),
    ("simple_rms_bf16", "y", "bf16*", "write", {}, {"N": 2048}, 2048),
]


@pytest.mark.parametrize(("symbol", "name", "type_", "access", "defines", "ints", "expected"),
                         SPOT, ids=[f"{s[0]}.{s[1]}" for s in SPOT])
def test_a_known_fact_of_each_kernel(symbol, name, type_, access, defines, ints, expected):
    k = kernel(symbol)
    p = k.param(name)
    assert (p.type, p.access) == (type_, access)
    assert elements(p, k.resolved(defines), ints) == expected


def test_the_int_arguments_sit_where_the_c_functions_put_them():
    order = {s: [p.name for p in k.params] for s, k in kernels().items()}
    assert order["matvec_vectorized_bf16_bf16"] == ["m", "k", "row_offset", "a_in", "b_in",
                                                    "c_out"]
    assert order["vector_copy_32elems"] == ["offset", "inputs", "outputs"]
    assert order["rope"] == ["input", "lut", "output", "dims"]
    assert order["partial_plus_r_bf16"] == ["partial", "r_full", "offset", "d"]
    assert order["apply_causal_mask"] == ["g", "q_block_idx", "kv_block_idx"]
    assert kernel("op_has_no_registered_library_name").param("a_in").blocks.axes[:2] == (
        "k_block", "m_block")


# --- objects and inline operations ------------------------------------------------------------

def test_each_kernel_lives_in_an_object_upstream_compiles_from_its_file():
    objects = {o["object"]: o for o in load(DATA)["objects"]}
    for k in kernels().values():
        assert objects[k.object]["file"] == k.file, k.symbol
    assert objects["mm.o"]["renamed_as"] == "mm{SYM_SUFFIX}.o"
    for inst in objects["mm.o"]["instances"]:
        assert inst["object"] == f"mm{inst['SYM_SUFFIX']}.o"


def test_the_inline_operations_cite_their_builders():
    inline = load(DATA)["inline"]
    assert {"RMSNorm (prefill rows)", "eltwise add (residual)"} <= {row["op"] for row in inline}
    for row in inline:
        assert row["file"].startswith("programming_examples/") and row["builder"], row


# --- against upstream's source ----------------------------------------------------------------

#: C parameter types as they map to ours. ctype_in / ctype_out are mm_aie2p.cc's combos(X)
#: placeholders, whose default combo is (bfloat16, bf16, float, f32); bf16 is fused_decode's
#: typedef of bfloat16 (kernels/typedef.hpp).
C_TYPES = {"bfloat16": "bf16", "bf16": "bf16", "ctype_in": "bf16", "float": "f32",
           "ctype_out": "f32", "int": "i32", "int32_t": "i32", "uint32_t": "i32",
           "uint8_t": "i8"}


def without_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    source = re.sub(r"//[^\n]*", "", source)
    return source.replace("\\\n", " ")


def extern_c(source: str) -> str:
    """The text inside the file's extern "C" { ... } blocks."""
    text = without_comments(source)
    blocks = []
    for m in re.finditer(r'extern\s+"C"\s*\{', text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        blocks.append(text[m.end():i - 1])
    return "\n".join(blocks)


def c_params(region: str, symbol: str) -> list[tuple[str, str]]:
    """(type, name) of each parameter of `void symbol(...)` (or `void SYM(symbol)(...)`)."""
    m = re.search(rf"\bvoid\s+(?:SYM\(\s*)?{symbol}\s*\)?\s*\(([^)]*)\)", region)
    assert m, f"no void {symbol}(...) in an extern \"C\" block"
    params = []
    for decl in filter(None, (d.strip() for d in m.group(1).split(","))):
        words = re.findall(r"\w+|\*", decl.replace("__restrict", ""))
        base = next(w for w in words if w in C_TYPES)
        params.append((C_TYPES[base] + ("*" if "*" in words else ""), words[-1]))
    return params


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no clone of Xilinx/mlir-air on this machine")
def test_every_entry_is_what_the_source_declares_at_the_recorded_commit():
    mirror = Mirror(MIRROR, load(DATA)["source"]["commit"])
    sources: dict[str, str] = {}
    for symbol, k in kernels().items():
        source = sources.setdefault(k.file, mirror.read(k.file))
        assert c_params(extern_c(source), symbol) == [(p.type, p.name) for p in k.params], symbol
        for name, default in k.defines:
            m = re.search(rf"#define\s+{name}\s+(\S+)", source)
            assert m and m.group(1) == str(default), (symbol, name)
        if k.suffix_define:
            assert f"SYM({symbol})" in source and f"#ifndef {k.suffix_define}" in source
        for builder in k.declared_by:
            text = mirror.read(builder)
            assert f'"{symbol}"' in text and f'"{k.object}"' in text, (symbol, builder)


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no clone of Xilinx/mlir-air on this machine")
def test_the_objects_and_inline_builders_are_upstream_s():
    mirror = Mirror(MIRROR, load(DATA)["source"]["commit"])
    for obj in load(DATA)["objects"]:
        source = mirror.read(obj["file"])
        for copy in obj.get("identical_copies", ()):
            assert mirror.read(copy) == source, copy
        path, function = obj["compiled_by"].split(":")
        if path.endswith("Makefile"):   # a make variable listing the object's source stems
            text = mirror.read(path)
            rule = re.search(rf"^{function}\s*:=([^#\n]*)", text, re.M)
            assert rule and obj["object"].removesuffix(".o") in rule.group(1).split(), obj
            step = text
        else:
            step = re.search(rf"\ndef {function}\(.*?(?=\ndef |\Z)", mirror.read(path), re.S)
            assert step and f'"{obj["object"]}"' in step.group(), obj["object"]
            step = step.group()
        for define in obj["defines"]:
            assert re.search(rf"-D{define}\b", step), (obj["object"], define)
        for instance in obj.get("instances", ()):
            assert f'"{instance["object"]}"' in mirror.read(instance["where"]), instance
    for row in load(DATA)["inline"]:
        text = mirror.read(row["file"])
        for builder in row["builder"].split(", "):
            assert f"def {builder}(" in text, (row["op"], builder)
