"""Plans the chip can run (issue 23, point 4): the merge rules of kernels.definition.checker,
upstream's deployments as data (kernels/data/deployments.json) and the comparison of our merged
plans with them."""

from __future__ import annotations

import re

import pytest
from paths import MIRROR

from npu_deploy.kernels import XDNA2
from npu_deploy.kernels.definition.checker import check_merge, check_with_usage
from npu_deploy.kernels.definition.registry import SPECS, family
from npu_deploy.kernels.definition.rules import blocking
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import KernelUse
from npu_deploy.kernels.measured.deployments import (
    OUR_READING,
    TARGETS,
    compare_dispatches,
    provenance,
    upstream_deployments,
)
from npu_deploy.kernels.measured.ingest import Mirror, dumps, ingest_deployments
from npu_deploy.kernels.measured.measurements import DATA_DIR
from npu_deploy.kernels.measured.upstream_llm_pages import (
    SPLIT_KINDS,
    architecture_elfs,
    readme_figures,
)
from npu_deploy.kernels.performance.calibration import reference_decode, reference_prefill
from npu_deploy.models import CATALOG

NINE = ("llama-3.2-1b", "llama-3.2-3b", "smollm2-1.7b", "qwen2.5-0.5b", "qwen2.5-1.5b",
        "qwen2.5-3b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b")


def per_layer(plan) -> int:
    return len([d for d in plan.dispatches if d.launches[0].layer == 0])


def launch(kernel: str, shape: dict, **config):
    """A launch at the configuration the selection picks, with `config` over it."""
    spec = SPECS[kernel]
    return spec, shape, {**select(KernelUse(kernel, spec, shape), XDNA2).config, **config}


# --- the merge rules --------------------------------------------------------------------------

def test_unaligned_tails_held_for_the_elf_exhaust_the_shim_descriptors():
    # A GEMV of 500 rows pads M to its 128-row span (16 rows x 8 tiles): each launch fits
    # alone, but every one keeps its tail's descriptors for the whole ELF.
    gemv = launch("gemv", {"M": 500, "K": 2048}, tile_m=16, herd_m=8, partitions=1)
    alone, usage = check_with_usage(*gemv, XDNA2)
    assert not [f for f in alone if f.severity != "warning"]
    assert usage["bd_base"] + usage["bd_tails"] <= XDNA2.shim_bds < \
        usage["bd_base"] + 3 * usage["bd_tails"]
    assert check_merge([gemv], XDNA2) == []
    findings = check_merge([gemv, gemv, gemv], XDNA2)
    (bds,) = [f for f in findings if f.kind == "bds"]
    assert "held for the ELF" in bds.message and "Allocator exhausted" in bds.message
    assert bds.value == usage["bd_base"] + 3 * usage["bd_tails"] and bds.limit == 16


def test_aligned_launches_reuse_their_descriptors_however_many_there_are():
    gemv = launch("gemv", {"M": 2048, "K": 2048})
    rope = launch("rope", {"rows": 32, "width": 64, "seq": 1})
    assert check_merge([gemv, rope] * 6, XDNA2) == []


def test_a_launch_over_the_shim_channels_makes_the_elf_fail_with_its_reason():
    # 16 tiles each streaming two DDR inputs need 32 shim input channels; the array has 16.
    wide = launch("silu_mul", {"rows": 2048, "width": 8192}, herd_m=8, herd_rows=2)
    norm = launch("rmsnorm", {"rows": 2048, "width": 2048})
    findings = check_merge([norm, wide], XDNA2)
    (channels,) = [f for f in findings if f.kind == "shim_streams"]
    assert channels.message.startswith("silu_mul:") and "out of channels" in channels.message
    assert check_merge([norm, launch("silu_mul", {"rows": 2048, "width": 8192})], XDNA2) == []


def test_a_launch_over_l2_makes_the_elf_fail_but_launches_do_not_add_up_in_l2():
    shape = {"M": 2048, "K": 2048, "N": 2048}
    huge = launch("gemm_bf16", shape, tile_m=256, tile_k_l2=2048, tile_n=256)
    _, usage = check_with_usage(*huge, XDNA2)
    assert usage["l2_bytes"] > XDNA2.l2_bytes
    findings = check_merge([launch("rmsnorm", {"rows": 2048, "width": 2048}), huge], XDNA2)
    assert any(f.kind == "l2" and f.message.startswith("gemm_bf16:")
               and "L2 capacity exceeded" in f.message for f in findings)
    # Each launch configures the memory tiles anew: four GEMMs that each take more than a
    # quarter of L2 share an ELF (as the four of Llama-3.2-1B's o_ffn do).
    spec = SPECS["gemm_bf16"]
    candidates = family("gemm_bf16").candidates
    assert candidates is not None
    for config in candidates(spec, shape, XDNA2):
        gemm = (spec, shape, {**spec.tunables, **config})
        found, usage = check_with_usage(*gemm, XDNA2)
        if not blocking(found) and 4 * usage["l2_bytes"] > XDNA2.l2_bytes:
            break
    else:
        pytest.fail("no GEMM configuration takes more than a quarter of L2")
    assert check_merge([gemm] * 4, XDNA2) == []


def test_a_wide_unaligned_reduction_runs_only_as_the_first_launch():
    down = launch("gemm_bf16", {"M": 2048, "K": 4864, "N": 896})
    add = launch("add", {"rows": 2048, "width": 896})
    assert check_merge([down, add], XDNA2) == []
    (bad,) = check_merge([add, down], XDNA2)
    assert bad.kind == "known_failure" and "K=4864" in bad.message and "first launch" in bad.message
    # K=896 runs later in upstream's ELFs; K=9728 is 512-aligned
    for k in (896, 9728):
        assert check_merge([add, launch("gemm_bf16", {"M": 2048, "K": k, "N": 896})],
                           XDNA2) == []


# --- our plans ------------------------------------------------------------------------------

def test_llama_keeps_upstreams_three_prefill_and_two_decode_dispatches():
    args = CATALOG["llama-3.2-1b"].args
    up = upstream_deployments()["llama-3.2-1b"]
    assert per_layer(reference_prefill("llama-3.2-1b", args, 2048)) == up.prefill.per_layer == 3
    assert per_layer(reference_decode("llama-3.2-1b", args, 2047)) == up.decode.per_layer == 2


def test_unaligned_widths_need_more_prefill_dispatches_than_llama():
    qwen, llama = CATALOG["qwen2.5-0.5b"].args, CATALOG["llama-3.2-1b"].args
    assert (qwen.hidden, qwen.ffn) == (896, 4864)
    plan = reference_prefill("qwen2.5-0.5b", qwen, 2048)
    assert per_layer(plan) > per_layer(reference_prefill("llama-3.2-1b", llama, 2048))
    # the Down projection starts its own dispatch, as upstream's down_add
    (down,) = [d for d in plan.dispatches if d.launches[0].layer == 0
               and any(ln.role == "down_proj" for ln in d.launches)]
    assert [ln.role for ln in down.launches] == ["down_proj", "ffn_residual"]


def test_the_comparison_explains_every_difference_from_upstream():
    rows = compare_dispatches()
    assert [(r.model, r.mode) for r in rows] == [(m, mode) for m in NINE
                                                 for mode in ("prefill", "decode")]
    for r in rows:
        assert r.ours == len(r.our_dispatches) >= 2 and r.upstream == len(r.upstream_elfs)
        assert len(r.our_splits) == r.ours - 1
        if r.agrees:
            continue
        # every split of upstream's we do not make is named with its kind and our reading
        up = upstream_deployments()[r.model].phase(r.mode)
        ours = {s.split(":")[0] for s in r.our_splits}
        for a, b in zip(up.elfs, up.elfs[1:], strict=False):
            cut = f"{a.launches[-1]} | {b.launches[0]}"
            if cut not in ours:
                split = up.split_after(a.name)
                assert split is not None and cut in r.explanation
                assert f"({split.kind})" in r.explanation
    llama = [r for r in rows if r.model == "llama-3.2-1b"]
    assert all(r.agrees and r.explanation.startswith("same split") for r in llama)


# --- the data file ---------------------------------------------------------------------------

def test_the_data_file_says_where_every_row_comes_from():
    source = provenance()
    assert source["repository"] == "Xilinx/mlir-air" and source["path"].startswith(
        "programming_examples/llms")
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source["commit_date"]) and source["measured"]
    deployments = upstream_deployments()
    assert tuple(deployments) == TARGETS == NINE
    for model, d in deployments.items():
        assert d.upstream.startswith("programming_examples/llms/") and d.seq == 2048
        rows = [*(e.source for p in (d.prefill, d.decode) for e in p.elfs),
                *(s.source for p in (d.prefill, d.decode) for s in p.splits),
                *(c[2] for p in (d.prefill, d.decode) for c in p.cpu),
                *(f.source for f in d.figures), *(r["from"] for r in d.per_elf),
                *(src for p in (d.prefill, d.decode) for _, src in p.stated),
                d.lm_head["from"]]
        assert all(r.startswith("programming_examples/llms/") for r in rows), model
        assert d.figure("ttft").unit == "s" and d.figure("ttft").seq == 2048
        assert d.figure("decode").unit == "tok/s"
        for phase in (d.prefill, d.decode):
            assert {s.kind for s in phase.splits} <= set(SPLIT_KINDS) <= set(OUR_READING)
            assert phase.stated and phase.cpu


def test_upstreams_launches_are_the_roles_of_our_plans():
    for model, d in upstream_deployments().items():
        args = CATALOG[model].args
        for phase, plan in ((d.prefill, reference_prefill(model, args, 2048)),
                            (d.decode, reference_decode(model, args, 2047))):
            ours = {ln.role for ln in plan.launches() if ln.layer == 0}
            theirs = [r for e in phase.elfs for r in e.launches]
            assert len(theirs) == len(set(theirs)) and set(theirs) <= ours, (model, theirs)


def test_llama_per_elf_figures_are_the_calibrated_ones():
    rows = {(r["phase"], r["elf"]): r["ms"] for r in upstream_deployments()["llama-3.2-1b"].per_elf}
    assert rows[("prefill", "o_ffn")] == 41.0 and rows[("prefill", "flash_attn")] == 21.6
    assert rows[("prefill", "rms_gemms_rope")] == 7.3
    assert rows[("decode", "o_gemv_ffn")] == 3.6 and rows[("decode", "rms_gemv_rope")] == 0.9


def test_the_page_readers_take_the_diagrams_and_tables():
    qwen = """**Prefill — 4 NPU ELFs/layer:**

```
x ─[NPU elf:rms_qkv_bias_rope]   FUSED, 9 launches, 1 ELF
  ─[NPU elf:gate]{Gate GEMM} → [NPU elf:up]{Up GEMM}
once: (HOST) final RMSNorm → [NPU elf:lm_head_gemv]
```
**Decode — 5 NPU ELFs/layer (+ lm_head once/token):**
"""
    assert architecture_elfs(qwen, "Prefill") == [("rms_qkv_bias_rope", 9), ("gate", None),
                                                  ("up", None)]
    llama = ("```\nPrefill (per layer, 3 XRT calls):\n  a.elf (6 launches) → b.elf (1 launch)\n\n"
             "Decode (per token per layer, 3 XRT calls):\n  c.elf → CPU attention → d.elf\n```\n"
             "- Prefill: `a.elf`\n")
    assert architecture_elfs(llama, "Prefill") == [("a", 6), ("b", 1)]
    assert architecture_elfs(llama, "Decode") == [("c", None), ("d", None)]
    readme = ("| Phase | Measured | Notes |\n|---|---|---|\n"
              "| Prefill / TTFT (2048 tokens) | **0.99 s wall** | NPU-kernel time ~0.80 s |\n"
              "| Decode / TPOT (steady-state) | 92ms/token (10.8 tok/s) | x |\n")
    got = {(f["figure"], f["value"], f["unit"]) for f in readme_figures(readme, "p", 2048)}
    assert got == {("ttft", 0.99, "s"), ("prefill_npu", 0.8, "s"),
                   ("decode_latency", 92.0, "ms/token"), ("decode", 10.8, "tok/s")}


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no clone of Xilinx/mlir-air on this machine")
def test_the_ingest_regenerates_deployments_json_from_upstream():
    mirror = Mirror(MIRROR, provenance()["commit"])
    assert dumps(ingest_deployments(mirror)) == (DATA_DIR / "deployments.json").read_text()
