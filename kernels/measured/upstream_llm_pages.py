"""How upstream's LLM deployments are read: Xilinx/mlir-air programming_examples/llms, one
directory per model, into the records of kernels/data/deployments.json.

Two kinds of fact. What the pages state in a form a parser can take is parsed: the ELFs of
each phase from the per-layer diagrams of upstream's `<model>/ARCHITECTURE.md`
(`[NPU elf:name]`, or `name.elf` in the older pages) with the launch counts written next to
them, the end-to-end figures of each `README.md` performance table, the summary table of
`llms/README.md` (TTFT, tokens/s, ELFs per layer), and the measured per-ELF times of
`llama32_1b/docs/profile.md` and of the SmolLM2 README. What the pages say in prose is read
by hand into `READINGS` below: which of our plan's launches each ELF holds, why upstream
split where it did, what runs on the CPU, and the few measured figures written in a
docstring; every reading names the file it came from. `deployment_records` joins the two
and refuses a reading whose ELF names or launch counts disagree with what the page parses
to, so a hand reading cannot drift from the page it cites.

The launches are named by our plan's roles (kernels.plans.plan): `attn_norm`, `q_proj`,
`q_bias`, `q_norm`, `rope_q`, `attention`, `o_proj`, `attn_residual`, `ffn_norm`,
`gate_proj`, `up_proj`, `silu_mul`, `down_proj`, `ffn_residual`.

Split kinds (`Split.kind`), so that a comparison can say how our checker treats each:
`own_elf` (FlashAttention runs alone), `host_step` (a CPU op sits between the ELFs),
`known_failure` (a launch that computes wrong unless it is the first of its ELF),
`l2` (L2 buffers upstream found could not co-reside), `l1_bds` (upstream's merged ELF
ran out of L1 or buffer descriptors), `decode_cascade` (the limits of upstream's fused
decode cascade), `choice` (a development choice, no limit stated).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

LLMS = "programming_examples/llms"
SUMMARY = f"{LLMS}/README.md"
SPLIT_KINDS = ("own_elf", "host_step", "known_failure", "l2", "l1_bds", "decode_cascade",
               "choice")

Read = Callable[[str], str]          # repository path -> the file's text at the commit


# --- hand readings of the pages' prose --------------------------------------------------------

@dataclass(frozen=True)
class Elf:
    """One ELF of a layer: upstream's name and the launches of our plan it computes."""

    name: str
    launches: tuple[str, ...]


@dataclass(frozen=True)
class Split:
    """Why upstream ends an ELF after `after` (the next ELF starts a new dispatch)."""

    after: str
    kind: str
    why: str
    source: str


@dataclass(frozen=True)
class HostOp:
    op: str
    why: str
    source: str


@dataclass(frozen=True)
class Phase:
    elfs: tuple[Elf, ...]
    splits: tuple[Split, ...]
    cpu: tuple[HostOp, ...]


@dataclass(frozen=True)
class Reading:
    """What we read by hand in one model's pages."""

    upstream: str                           # directory under programming_examples/llms
    summary_name: str                       # its row in llms/README.md's performance table
    prefill: Phase
    decode: Phase
    lm_head: dict[str, Any]
    per_elf: tuple[dict[str, Any], ...] = ()


# A page of upstream's programming_examples/llms/<model>/ (Xilinx/mlir-air).
def _page(model: str, name: str = "ARCHITECTURE.md") -> str:
    return f"{LLMS}/{model}/{name}"


PRE_ATTENTION = ("attn_norm", "q_proj", "k_proj", "v_proj")
ROPE = ("rope_q", "rope_k")
BIAS = ("q_bias", "k_bias", "v_bias")
QK_NORM = ("q_norm", "k_norm")
O_FFN = ("o_proj", "attn_residual", "ffn_norm", "gate_proj", "up_proj", "silu_mul",
         "down_proj", "ffn_residual")
EXPLAIN = _page("llama32_1b", "docs/explain.md")
PROFILE = _page("llama32_1b", "docs/profile.md")


def _attention_alone(names: tuple[str, str]) -> tuple[Split, ...]:
    why = ("FlashAttention's channels block multi-launch merging; it is kept as a separate "
           "kernel (compiler limitations table)")
    return (Split(names[0], "own_elf", why, EXPLAIN), Split("flash_attn", "own_elf", why, EXPLAIN))


def _prefill_cpu(model: str, head_dim: int) -> tuple[HostOp, ...]:
    ops = [HostOp("embedding lookup", "single-row dispatch > compute", _page(model)),
           HostOp("final RMSNorm of the last row", "autoregressive generation needs one row; "
                  "the LM head runs as the decode GEMV", _page(model)),
           HostOp("KV-cache store", "the layer's K and V kept for decode", _page(model))]
    if head_dim == 128:
        ops.append(HostOp("seq<->head transposes around head-first FlashAttention",
                          "BF16 DMA needs stride 1 in the innermost dim, and seq-first "
                          "FlashAttention with dk_chunks > 1 hangs upstream", _page(model)))
    return tuple(ops)


def _decode_cpu(model: str, glue: bool) -> tuple[HostOp, ...]:
    ops = [HostOp("decode attention against the KV cache", "one query row: the launch "
                  "overhead is larger than the compute", _page(model)),
           HostOp("embedding lookup, KV-cache write, final RMSNorm", "single-row dispatch > "
                  "compute", _page(model))]
    if glue:
        ops.append(HostOp("residual adds, FFN RMSNorm, SwiGLU (M=1)", "dispatch > compute "
                          "(~0.13 ms/layer)", _page(model)))
    return tuple(ops)


def _three_elf_prefill(first: str, first_launches: tuple[str, ...], last: str,
                       cpu: tuple[HostOp, ...]) -> Phase:
    """The lean prefill: everything before attention, FlashAttention, O + FFN."""
    return Phase((Elf(first, first_launches), Elf("flash_attn", ("attention",)), Elf(last, O_FFN)),
                 _attention_alone((first, "flash_attn")), cpu)


def _two_elf_decode(model: str, first: str, first_launches: tuple[str, ...]) -> Phase:
    return Phase(
        (Elf(first, first_launches), Elf("o_gemv_ffn", O_FFN)),
        (Split(first, "host_step", "decode attention runs on the CPU between the two ELFs",
               _page(model)),),
        _decode_cpu(model, glue=False))


def _five_elf_decode(model: str, first: str, first_launches: tuple[str, ...],
                     cascade: Split) -> Phase:
    return Phase(
        (Elf(first, first_launches), Elf("o_gemv", ("o_proj",)), Elf("gate_gemv", ("gate_proj",)),
         Elf("up_gemv", ("up_proj",)), Elf("down_gemv", ("down_proj",))),
        (Split(first, "host_step", "decode attention runs on the CPU", _page(model)),
         Split("o_gemv", "host_step", "the residual add and the FFN RMSNorm run on the CPU",
               _page(model)),
         cascade,
         Split("up_gemv", "host_step", "SwiGLU runs on the CPU", _page(model))),
        _decode_cpu(model, glue=True))


def _cascade_k512(source: str, choice: bool = False) -> Split:
    why = ("the fused o_gemv_ffn cascade's matvec_2tile_add is numerically correct only at K "
           "divisible by 512, which this model's FFN width is not, so O, Gate, Up and Down run "
           "as standalone GEMV ELFs")
    if choice:
        why += (" rather than re-deriving the cascade's tiles (\"trades a few extra XRT "
                "dispatches for guaranteed correctness; Phase 5 can fuse later\")")
    return Split("gate_gemv", "decode_cascade", why, source)


def _cascade_rows(source: str) -> Split:
    return Split("gate_gemv", "decode_cascade", "the fused o_gemv_ffn cascade needs one core "
                 "row per cascade stage; emb >= 2560 needs >= 5 stages and the array has 4 "
                 "core rows; each projection GEMV alone is not blocked, so they run as "
                 "standalone ELFs", source)


def _down_first(model: str, k: int, source: str, after: str) -> Split:
    return Split(after, "known_failure", f"the Down GEMM (K={k}, not 512-aligned) gives all-NaN "
                 "unless it is launch 0 of its ELF, so down_add is an ELF of its own", source)


def _qwen3_lean(model: str, summary_name: str) -> Reading:
    """Qwen3 at emb < 2560 with an FFN width divisible by 512: the lean 3 + 2 ELFs."""
    first = PRE_ATTENTION + QK_NORM + ROPE
    return Reading(model, summary_name,
                   _three_elf_prefill("rms_qkv_qknorm_rope", first, "o_ffn_qwen",
                                      _prefill_cpu(model, 128)),
                   _two_elf_decode(model, "rms_qkv_qknorm_rope_gemv", first), LM_HEAD_152K)


LM_HEAD_128K = {"partitions": 8, "rows": 16384, "from": PROFILE}
LM_HEAD_152K = {"partitions": 19, "rows": 8192, "from": _page("qwen25_0_5b")}

READINGS: dict[str, Reading] = {
    "llama-3.2-1b": Reading(
        "llama32_1b", "Llama-3.2-1B (bf16)",
        _three_elf_prefill("rms_gemms_rope", PRE_ATTENTION + ROPE, "o_ffn", (HostOp(
            "embedding lookup, KV-cache extract, final RMSNorm of the last row",
            "cheap single-row work (CPU host ops ~37 ms per prefill)", PROFILE),)),
        Phase((Elf("rms_gemv_rope", PRE_ATTENTION + ROPE), Elf("o_gemv_ffn", O_FFN)),
              (Split("rms_gemv_rope", "host_step", "decode attention runs on the CPU (0.3 "
                     "ms/layer): one query against the KV cache costs less than a dispatch",
                     PROFILE),),
              (HostOp("decode attention and the KV-cache update", "0.3 ms/layer", PROFILE),
               HostOp("final RMSNorm", "one 2048-element row", PROFILE))),
        LM_HEAD_128K,
        per_elf=(
            {"phase": "decode", "elf": "cpu_attention", "ms": 0.3, "per": "layer",
             "from": PROFILE},)),
    "llama-3.2-3b": Reading(
        "llama32_3b", "Llama-3.2-3B",
        _three_elf_prefill("rms_gemms_rope", PRE_ATTENTION + ROPE, "o_ffn",
                           _prefill_cpu("llama32_3b", 128)),
        _five_elf_decode("llama32_3b", "rms_gemv_rope", PRE_ATTENTION + ROPE, Split(
            "gate_gemv", "decode_cascade", "the fused o_gemv_ffn cascade's SwiGLU stage holds "
            "K=emb_dim in L1 and at emb_dim=3072 its aie.dma_bd exceeds the BD size limit "
            "('Size may not exceed 1023'); it also needs >= 5 cascade stages on 4 core rows. "
            "Each projection GEMV alone is not blocked, so they run as standalone ELFs",
            _page("llama32_3b", "llama32_3b_decode.py"))),
        LM_HEAD_128K,
        per_elf=tuple(
            {"phase": "decode", "elf": elf, "ms": ms, "per": "layer",
             "note": "NPU run time, make profile N_TOKENS=8",
             "from": _page("llama32_3b", "llama32_3b_decode.py")}
            for elf, ms in (("o_gemv", 0.72), ("gate_gemv", 1.38), ("up_gemv", 1.36),
                            ("down_gemv", 1.42)))),
    "smollm2-1.7b": Reading(
        "smollm2_1_7b", "SmolLM2-1.7B (bf16)",
        _three_elf_prefill("rms_gemms_rope", PRE_ATTENTION + ROPE, "o_ffn", (HostOp(
            "embedding lookup, final RMSNorm", "the llama32_1b runner, reused",
            _page("smollm2_1_7b")),)),
        _two_elf_decode("smollm2_1_7b", "rms_gemv_rope", PRE_ATTENTION + ROPE),
        {"partitions": None, "rows": 49152, "from": _page("smollm2_1_7b")}),
    "qwen2.5-0.5b": Reading(
        "qwen25_0_5b", "Qwen2.5-0.5B",
        Phase((Elf("rms_qkv_bias_rope", PRE_ATTENTION + BIAS + ROPE),
               Elf("flash_attn", ("attention",)),
               Elf("o_ffn_head", O_FFN[:6]), Elf("down_add", O_FFN[6:])),
              (*_attention_alone(("rms_qkv_bias_rope", "flash_attn")),
               _down_first("qwen25_0_5b", 4864, _page("qwen25_0_5b"), "o_ffn_head")),
              _prefill_cpu("qwen25_0_5b", 64)),
        _five_elf_decode("qwen25_0_5b", "rms_qkv_bias_rope_gemv", PRE_ATTENTION + BIAS + ROPE,
                         _cascade_k512(_page("qwen25_0_5b"))),
        LM_HEAD_152K),
    "qwen2.5-1.5b": Reading(
        "qwen25_1_5b", "Qwen2.5-1.5B",
        Phase((Elf("rms_qkv_bias_rope", PRE_ATTENTION + BIAS + ROPE),
               Elf("flash_attn", ("attention",)), Elf("o_res_norm", O_FFN[:3]),
               Elf("gate_up", O_FFN[3:5]), Elf("swiglu", ("silu_mul",)),
               Elf("down_add", O_FFN[6:])),
              (*_attention_alone(("rms_qkv_bias_rope", "flash_attn")),
               Split("o_res_norm", "l2", "at hidden=8960 the O GEMM's fused-cast f32 C-scratch "
                     "and the two direct Gate/Up GEMMs' f32 L2 staging (1x4x64x128 f32 = 128 KB "
                     "per column each) cannot co-reside in the memory tiles",
                     _page("qwen25_1_5b", "qwen25_1_5b_prefill.py")),
               Split("gate_up", "l2", "a direct GEMM at N=8960 already saturates the memory "
                     "tiles with its f32 staging, so SwiGLU cannot join it; SwiGLU compiles "
                     "standalone once tile_n sits in the L1/BD band (~3584-5120)",
                     _page("qwen25_3b", "qwen25_3b_prefill.py")),
               _down_first("qwen25_1_5b", 8960, _page("qwen25_1_5b"), "swiglu")),
              _prefill_cpu("qwen25_1_5b", 128)),
        _five_elf_decode("qwen25_1_5b", "rms_qkv_bias_rope_gemv", PRE_ATTENTION + BIAS + ROPE,
                         _cascade_k512(_page("qwen25_1_5b"))),
        LM_HEAD_152K),
    "qwen2.5-3b": Reading(
        "qwen25_3b", "Qwen2.5-3B",
        Phase((Elf("rms_qkv_bias_rope", PRE_ATTENTION + BIAS + ROPE),
               Elf("flash_attn", ("attention",)), Elf("o_res_norm", O_FFN[:3]),
               Elf("gate", ("gate_proj",)), Elf("up", ("up_proj",)),
               Elf("swiglu", ("silu_mul",)), Elf("down_add", O_FFN[6:])),
              (*_attention_alone(("rms_qkv_bias_rope", "flash_attn")),
               Split("o_res_norm", "l2", "the fused-cast O f32 C-scratch and the direct "
                     "Gate/Up f32 L2 staging cannot co-reside in the memory tiles",
                     _page("qwen25_3b", "qwen25_3b_prefill.py")),
               Split("gate", "l2", "two direct GEMMs each stage their f32 output in L2 (128 KB "
                     "per column) and together overflow the memory tiles",
                     _page("qwen25_3b", "qwen25_3b_prefill.py")),
               Split("up", "l2", "one direct GEMM already saturates the memory tiles, so even "
                     "Up + SwiGLU overflow; SwiGLU is its own ELF",
                     _page("qwen25_3b", "qwen25_3b_prefill.py")),
               _down_first("qwen25_3b", 11008, _page("qwen25_3b", "qwen25_3b_prefill.py"),
                           "swiglu")),
              _prefill_cpu("qwen25_3b", 128)),
        _five_elf_decode("qwen25_3b", "rms_qkv_bias_rope_gemv", PRE_ATTENTION + BIAS + ROPE,
                         _cascade_k512(_page("qwen25_3b", "qwen25_3b_decode.py"), choice=True)),
        LM_HEAD_152K),
    "qwen3-0.6b": _qwen3_lean("qwen3_0_6b", "Qwen3-0.6B"),
    "qwen3-1.7b": _qwen3_lean("qwen3_1_7b", "Qwen3-1.7B"),
    "qwen3-4b": Reading(
        "qwen3_4b", "Qwen3-4B",
        Phase((Elf("rms_qkv_qknorm_rope", PRE_ATTENTION + QK_NORM + ROPE),
               Elf("flash_attn", ("attention",)), Elf("o_res_norm", O_FFN[:3]),
               Elf("gate", ("gate_proj",)), Elf("up", ("up_proj",)),
               Elf("swiglu", ("silu_mul",)), Elf("down_add", O_FFN[6:])),
              (*_attention_alone(("rms_qkv_qknorm_rope", "flash_attn")),
               *(Split(after, "l1_bds", "the merged 8-launch o_ffn ELF cannot compile at "
                       "hidden=9728 ('exhausts the merged ELF L1/BD budget'), so the O+FFN "
                       "tail stays split into five ELFs",
                       _page("qwen3_4b", "qwen3_4b_prefill.py"))
                 for after in ("o_res_norm", "gate", "up", "swiglu"))),
              _prefill_cpu("qwen3_4b", 128)),
        _five_elf_decode("qwen3_4b", "rms_qkv_qknorm_rope_gemv", PRE_ATTENTION + QK_NORM + ROPE,
                         _cascade_rows(_page("qwen3_4b"))),
        LM_HEAD_152K),
}

#: Statements of the pages that hold for every model (for the data file's notes).
NOTES = (
    {"note": "The lean 3-ELF prefill / 2-ELF decode form needs aligned dims, emb < 2560 and "
             "hidden divisible by 512; bigger models split the FFN and run a 5-ELF decode (the "
             "fused o_gemv_ffn cascade is capped at 4 cascade core rows and needs hidden "
             "divisible by 512)", "from": SUMMARY},
    {"note": "Large or non-aligned hidden (8960/9728/11008) splits O+FFN: a per-launch L1/BD "
             "limit, not a launch-count limit", "from": SUMMARY},
    {"note": "Compiler limits of multi-launch ELFs: FlashAttention's channels block merging; "
             "omit_pingpong is global per module; air-opt-shim-dma-bds compiles 9+ launches "
             "with FlashAttention in > 10 min; AIRDependencyCanonicalize overflows the stack at "
             "9+ launches (not an issue for the 6-8 launch modules)", "from": EXPLAIN},
)


# --- parsing the pages ------------------------------------------------------------------------

_PHASE_START = re.compile(r"^\W*(Prefill|Decode)\b")
_ELF = re.compile(r"\[NPU elf:(\w+)\]|\b(\w+)\.elf\b")
_LAUNCHES = re.compile(r"(\d+) launch")


def architecture_elfs(text: str, phase: str) -> list[tuple[str, int | None]]:
    """The per-layer ELFs of `phase` ("Prefill" or "Decode") in an upstream ARCHITECTURE.md
    diagram, in order, each with the launch count written beside it (None when not stated). The
    phase's diagram starts at a line that begins with the phase's name and ends at the next
    phase, a heading, a code fence after its first ELF, or the once-per-run line (`once:`,
    `Final:`, the LM head)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if (m := _PHASE_START.match(line)) and m.group(1) == phase), None)
    if start is None:
        raise ValueError(f"no {phase} diagram")
    out: list[tuple[str, int | None]] = []
    for line in lines[start + 1:]:
        stripped = line.strip()
        if _PHASE_START.match(line) or line.startswith("## ") or "once:" in stripped \
                or stripped.startswith("Final:") or (stripped.startswith("```") and out):
            break
        matches = list(_ELF.finditer(line))
        for k, m in enumerate(matches):
            end = matches[k + 1].start() if k + 1 < len(matches) else len(line)
            count = _LAUNCHES.search(line, m.end(), end)
            out.append((m.group(1) or m.group(2), int(count.group(1)) if count else None))
    return out


def _figure(text: str) -> tuple[float, str, bool] | None:
    """'**0.99 s wall**' -> (0.99, 's', False); '~124 ms/token' -> (124, 'ms/token', True)."""
    m = re.search(r"(~?)\s*(\d+(?:\.\d+)?)\s*(s|ms/token|tok/s|tokens/sec)\b", text)
    if not m:
        return None
    unit = "tok/s" if m.group(3) == "tokens/sec" else m.group(3)
    return float(Decimal(m.group(2))), unit, bool(m.group(1))


def _rows(text: str, *headers: str) -> list[list[str]]:
    """The body rows of the first pipe table whose header cells start with `headers`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and tuple(cells[:len(headers)]) == headers:
            rows = []
            for body in lines[i + 2:]:
                if not body.startswith("|"):
                    break
                rows.append([c.strip().replace("**", "") for c in body.strip().strip("|")
                             .split("|")])
            return rows
    raise ValueError(f"no table with the headers {headers}")


def readme_figures(text: str, path: str, seq: int) -> list[dict[str, Any]]:
    """The end-to-end figures of a model README's performance table: TTFT at `seq`, the
    NPU-kernel prefill time where a note states it, decode ms/token and tokens/s."""
    first = "Metric" if re.search(r"^\| Metric \|", text, re.M) else "Phase"
    out: list[dict[str, Any]] = []

    def add(figure: str, value: float, unit: str, approx: bool, what: str) -> None:
        row = {"figure": figure, "value": value, "unit": unit, "what": what, "from": path}
        if figure in ("ttft", "prefill_npu"):
            row["seq"] = seq
        if approx:
            row["approx"] = True
        out.append(row)

    for cells in _rows(text, first):
        label, rest = cells[0], " | ".join(cells[1:])
        if label.startswith(("Prefill / TTFT", "TTFT")):
            got = _figure(cells[1])
            assert got is not None, f"{path}: no TTFT in {cells[1]!r}"
            add("ttft", *got, "time to first token, wall (tokenize + prefill + LM head)")
            npu = re.search(r"NPU-kernel time[^~\d]*~?\s*(\d+(?:\.\d+)?)\s*s", rest)
            if npu:
                add("prefill_npu", float(Decimal(npu.group(1))), "s", True,
                    "NPU-kernel part of the prefill")
        elif label.startswith("Prefill kernel"):
            got = _figure(cells[1])
            assert got is not None
            add("prefill_npu", *got, "NPU-kernel part of the prefill")
        elif label.startswith("Decode"):
            for m in re.finditer(r"(~?)\s*(\d+(?:\.\d+)?)\s*(ms/token|tok/s|tokens/sec)",
                                 cells[1]):
                unit = "tok/s" if m.group(3) != "ms/token" else "ms/token"
                add("decode" if unit == "tok/s" else "decode_latency",
                    float(Decimal(m.group(2))), unit, bool(m.group(1)),
                    "steady-state decode" + (" latency per token" if unit == "ms/token" else ""))
    return out


def measured_on(text: str) -> str | None:
    """'2026-06-28' from 'Measured on NPU2 (AIE2P), `make profile N_TOKENS=32`, 2026-06-28.'"""
    m = re.search(r"Measured on NPU2[^\n]*?(\d{4}-\d{2}(?:-\d{2})?)", text)
    return m.group(1) if m else None


def summary_rows(text: str) -> dict[str, dict[str, Any]]:
    """llms/README.md's performance table: TTFT, decode tokens/s and ELFs per layer (prefill /
    decode), by the model's name in the table."""
    out = {}
    for cells in _rows(text, "Model", "Prefill (TTFT)"):
        ttft, tps = _figure(cells[1]), _figure(cells[2])
        prefill, decode = (int(x) for x in cells[3].split("/"))
        out[cells[0]] = {"ttft": ttft, "decode": tps, "elfs_per_layer": (prefill, decode)}
    return out


def profile_per_elf(text: str, path: str) -> list[dict[str, Any]]:
    """llama32_1b/docs/profile.md: the prefill's per-kernel table (ms per call) and the
    decode's per-component table ('o_gemv_ffn (NPU, 3.6ms x 16 layers)')."""
    out = []
    for cells in _rows(text, "Kernel", "Launches"):
        name = cells[0].strip("* ")
        ms = re.match(r"([\d.]+)ms", cells[2])
        assert ms, cells
        per = "layer" if cells[3] != "1" else "prefill"
        out.append({"phase": "prefill", "elf": name, "ms": float(Decimal(ms.group(1))),
                    "per": per, "launches": cells[1], "from": path})
    for cells in _rows(text, "Component", "Per-token"):
        m = re.match(r"(\w+) \(NPU, ([\d.]+)ms", cells[0].strip("* ").replace("**", ""))
        if m:
            out.append({"phase": "decode", "elf": m.group(1), "ms": float(Decimal(m.group(2))),
                        "per": "layer", "from": path})
        elif cells[0].startswith("lm_head_gemv"):
            ms = re.match(r"([\d.]+)ms", cells[1])
            assert ms, cells
            out.append({"phase": "decode", "elf": "lm_head_gemv",
                        "ms": float(Decimal(ms.group(1))), "per": "token", "from": path})
    return out


def smollm2_per_elf(text: str, path: str) -> list[dict[str, Any]]:
    """'~1.70 s (rms_gemms_rope 11.5 + flash_attn 22.0 + o_ffn 37.2 ms/layer)'."""
    m = re.search(r"\(([^()]*) ms/layer\)", text)
    if not m:
        raise ValueError(f"{path}: no per-layer ELF times")
    return [{"phase": "prefill", "elf": name, "ms": float(Decimal(ms)), "per": "layer",
             "from": path}
            for name, ms in re.findall(r"(\w+) ([\d.]+)", m.group(1))]


# --- the records --------------------------------------------------------------------------------

def _phase_record(model: str, reading: Reading, phase: str, text: str,
                  stated: list[dict[str, Any]]) -> dict[str, Any]:
    ours: Phase = getattr(reading, phase)
    parsed = architecture_elfs(text, phase.capitalize())
    path = _page(reading.upstream)
    names = [e.name for e in ours.elfs]
    if names != [n for n, _ in parsed]:
        raise ValueError(f"{model} {phase}: the reading lists ELFs {names}, {path} shows "
                         f"{[n for n, _ in parsed]}")
    for elf, (_, count) in zip(ours.elfs, parsed, strict=True):
        if count is not None and count != len(elf.launches):
            raise ValueError(f"{model} {phase}: {path} gives {elf.name} {count} launches, the "
                             f"reading {len(elf.launches)}")
    for split in ours.splits:
        if split.kind not in SPLIT_KINDS or split.after not in names[:-1]:
            raise ValueError(f"{model} {phase}: bad split {split}")
    heading = re.search(rf"\*\*{phase.capitalize()} — (\d+) NPU ELFs/layer", text)
    if heading:
        stated = [*stated, {"value": int(heading.group(1)), "from": path}]
    return {
        "elfs": [{"name": e.name, "launches": list(e.launches), **(
                  {"stated_launches": c} if c is not None else {}), "from": path}
                 for e, (_, c) in zip(ours.elfs, parsed, strict=True)],
        "stated_per_layer": stated,
        "splits": [{"after": s.after, "kind": s.kind, "why": s.why, "from": s.source}
                   for s in ours.splits],
        "cpu": [{"op": h.op, "why": h.why, "from": h.source} for h in ours.cpu],
    }


def deployment_records(read: Read, seq: int = 2048) -> dict[str, dict[str, Any]]:
    """Every target model's record: its ELFs per layer and why they split, what runs on the
    CPU, its end-to-end figures and measured per-ELF times, each with the file it is from."""
    summary = summary_rows(read(SUMMARY))
    out: dict[str, dict[str, Any]] = {}
    for model, reading in READINGS.items():
        arch = read(_page(reading.upstream))
        readme_path = _page(reading.upstream, "README.md")
        readme = read(readme_path)
        row = summary[reading.summary_name]
        figures = readme_figures(readme, readme_path, seq)
        for figure, got in (("ttft", row["ttft"]), ("decode", row["decode"])):
            value, unit, approx = got
            figures.append({"figure": figure, "value": value, "unit": unit,
                            "what": "the summary table of every model's make profile run",
                            "from": SUMMARY,
                            **({"seq": seq} if figure == "ttft" else {}),
                            **({"approx": True} if approx else {})})
        per_elf = list(reading.per_elf)
        if reading.upstream == "llama32_1b":
            per_elf = profile_per_elf(read(PROFILE), PROFILE) + per_elf
        elif reading.upstream == "smollm2_1_7b":
            per_elf = smollm2_per_elf(readme, readme_path) + per_elf
        for row_ in per_elf:
            text = read(row_["from"])
            if str(row_["ms"]) not in text and f"{row_['ms']:g}" not in text:
                raise ValueError(f"{model}: {row_['ms']} ms is not written in {row_['from']}")
        prefill, decode = row["elfs_per_layer"]
        out[model] = {
            "upstream": f"{LLMS}/{reading.upstream}",
            "seq": seq,
            "measured": measured_on(readme),          # the README's date, where it says
            "prefill": _phase_record(model, reading, "prefill", arch,
                                     [{"value": prefill, "from": SUMMARY}]),
            "decode": _phase_record(model, reading, "decode", arch,
                                    [{"value": decode, "from": SUMMARY}]),
            "lm_head": reading.lm_head,
            "figures": figures,
            "per_elf": per_elf,
        }
    return out


__all__ = ["LLMS", "NOTES", "READINGS", "SPLIT_KINDS", "SUMMARY", "architecture_elfs",
           "deployment_records", "readme_figures", "summary_rows"]
