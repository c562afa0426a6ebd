"""Upstream's LLM deployments as data, and how our dispatch plans compare with them.

`kernels/data/deployments.json` holds, for the nine target models, what Xilinx/mlir-air's
bf16 deployments (programming_examples/llms) run per layer: the ELFs of prefill and decode
with the launches of our plans each holds, why upstream split where it did, what stays on
the CPU, and the end-to-end and per-ELF figures its pages report, every row with the file
it came from (`python -m npu_deploy.kernels.measured.ingest MIRROR` regenerates it;
kernels.measured.upstream_llm_pages reads the pages). The figures are for judging our model;
only Llama-3.2-1B's are fitted (kernels.performance.calibration, from calibration.json).

`compare_dispatches()` puts the dispatches per layer of our merged plans (the reference
plans of kernels.performance.calibration: layouts aligned, buffers reused, last-token LM
head, decode attention on the CPU, launches merged as far as kernels.definition.checker
allows) next to upstream's ELFs per layer, and says in words where and why the two split
differently: each boundary of ours with the checker's reason, each of upstream's with its
stated reason and how our checker treats that kind of reason (`OUR_READING`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

from npu_deploy.models import CATALOG

from ..definition.checker import check_merge
from ..definition.hardware import XDNA2, Hardware
from ..performance.calibration import reference_decode, reference_prefill
from ..plans.plan import Dispatch, DispatchPlan, HostStep
from .measurements import load

Mode = Literal["prefill", "decode"]


# --- the data ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class UpstreamElf:
    name: str
    launches: tuple[str, ...]        # our plan's roles
    source: str


@dataclass(frozen=True)
class UpstreamSplit:
    after: str                       # the ELF the split ends
    kind: str                        # kernels.measured.upstream_llm_pages.SPLIT_KINDS
    why: str
    source: str


@dataclass(frozen=True)
class UpstreamPhase:
    elfs: tuple[UpstreamElf, ...]
    stated: tuple[tuple[int, str], ...]      # (ELFs per layer, the page that says so)
    splits: tuple[UpstreamSplit, ...]
    cpu: tuple[tuple[str, str, str], ...]   # (op, why, source)

    @property
    def per_layer(self) -> int:
        """ELFs per layer as the per-layer diagram lists them."""
        return len(self.elfs)

    def split_after(self, elf: str) -> UpstreamSplit | None:
        return next((s for s in self.splits if s.after == elf), None)


@dataclass(frozen=True)
class Figure:
    figure: str                  # ttft | prefill_npu | decode | decode_latency
    value: float
    unit: str                    # s | tok/s | ms/token
    what: str
    source: str
    seq: int | None = None
    approx: bool = False


@dataclass(frozen=True)
class UpstreamDeployment:
    model: str                   # our catalog name
    upstream: str                # its directory in Xilinx/mlir-air
    seq: int
    measured: str | None
    prefill: UpstreamPhase
    decode: UpstreamPhase
    lm_head: dict[str, Any]
    figures: tuple[Figure, ...]
    per_elf: tuple[dict[str, Any], ...]

    def phase(self, mode: Mode) -> UpstreamPhase:
        return self.prefill if mode == "prefill" else self.decode

    def figure(self, name: str) -> Figure:
        """The figure `name` as the model's own README states it (the summary table's
        when the README has none)."""
        rows = [f for f in self.figures if f.figure == name]
        if not rows:
            raise KeyError(f"{self.model}: upstream states no {name!r}; it states "
                           f"{sorted({f.figure for f in self.figures})}")
        own = [f for f in rows if f.source.startswith(self.upstream + "/")]
        return (own or rows)[0]


def _phase(row: dict[str, Any]) -> UpstreamPhase:
    return UpstreamPhase(
        tuple(UpstreamElf(e["name"], tuple(e["launches"]), e["from"]) for e in row["elfs"]),
        tuple((s["value"], s["from"]) for s in row["stated_per_layer"]),
        tuple(UpstreamSplit(s["after"], s["kind"], s["why"], s["from"]) for s in row["splits"]),
        tuple((c["op"], c["why"], c["from"]) for c in row["cpu"]))


@functools.cache
def upstream_deployments() -> dict[str, UpstreamDeployment]:
    """Every target model's upstream deployment, by our catalog name."""
    out = {}
    for model, row in load("deployments")["models"].items():
        out[model] = UpstreamDeployment(
            model, row["upstream"], row["seq"], row["measured"], _phase(row["prefill"]),
            _phase(row["decode"]), row["lm_head"],
            tuple(Figure(f["figure"], f["value"], f["unit"], f["what"], f["from"],
                         f.get("seq"), f.get("approx", False)) for f in row["figures"]),
            tuple(row["per_elf"]))
    return out


def provenance() -> dict[str, str]:
    """Where the data file comes from: repository, path, commit, commit date, measured."""
    source: dict[str, str] = load("deployments")["source"]
    return source


TARGETS: tuple[str, ...] = tuple(load("deployments")["models"])


# --- how our checker reads each kind of upstream split ----------------------------------------

#: For each kind of reason upstream gives for a split, how our merge rules treat it: the
#: sentence the comparison uses where upstream splits and our plan does not.
OUR_READING = {
    "own_elf": "our checker keeps FlashAttention alone too (its family's own_elf)",
    "known_failure": "our checker has the same rule (the GEMM family's first_launch_only)",
    "host_step": "upstream runs {cpu} on the CPU there, between standalone ELFs; our plan "
                 "keeps that M=1 work as NPU launches inside the merged ELF, where each costs "
                 "a launch, not a dispatch",
    "l2": "upstream found the f32 L2 staging of its direct (low-precision) Gate/Up GEMMs could "
          "not co-reside with the launches around them; MLIR-AIR at e972f29 gives every launch "
          "its own aie.device, configured in turn, so our checker counts L2 per launch "
          "(a launch that overflows it alone is rejected) and these launches each fit",
    "l1_bds": "upstream's merged o_ffn ELF failed to compile at this FFN width with the tile "
              "configurations of its smaller sibling ('exhausts the merged ELF L1/BD budget'); "
              "our checker counts L1 per launch with configurations selected for these shapes, "
              "and no launch here keeps shim descriptors for the ELF (no unaligned tails), so "
              "nothing in our model forces the split",
    "decode_cascade": "upstream's 2-ELF decode is a fused 3-stage cascade (o_gemv_ffn) whose "
                      "own limits (4 core rows for its stages, K divisible by 512, a BD size "
                      "<= 1023 with K=emb held whole) do not apply to our plan, which merges "
                      "standalone GEMV and element-wise launches; upstream notes each "
                      "projection GEMV alone is not blocked (llama32_3b_decode.py)",
    "choice": "upstream states no hardware limit there",
}


# --- the comparison ----------------------------------------------------------------------------

@dataclass(frozen=True)
class DispatchComparison:
    """One model and mode: our dispatches per layer next to upstream's, and why they differ."""

    model: str
    mode: Mode
    ours: int                                   # dispatches per layer in our merged plan
    upstream: int                               # ELFs per layer in upstream's diagram
    upstream_stated: tuple[int, ...]            # the counts upstream's pages state
    our_dispatches: tuple[tuple[str, ...], ...]   # the roles of each of our dispatches
    upstream_elfs: tuple[tuple[str, tuple[str, ...]], ...]
    our_splits: tuple[str, ...]                 # why each of our boundaries is there
    explanation: str

    @property
    def agrees(self) -> bool:
        return self.ours == self.upstream


Cut = tuple[str, str]            # (the last launch before a boundary, the first after it)


def _our_layer(plan: DispatchPlan, layer: int) -> list[Dispatch | HostStep]:
    return [s for s in plan.steps
            if (s.launches[0].layer if isinstance(s, Dispatch) else s.layer) == layer]


def _our_cuts(plan: DispatchPlan, layer: int, hw: Hardware) -> list[tuple[Cut, str]]:
    """Each boundary between two dispatches of the layer, and why our plan has it: the host
    steps between them, or the checker's findings against merging the next launch in."""
    steps = _our_layer(plan, layer)
    out: list[tuple[Cut, str]] = []
    last: Dispatch | None = None
    host: list[str] = []
    for step in steps:
        if isinstance(step, HostStep):
            host.append(step.role)
            continue
        if last is not None:
            cut = (last.launches[-1].role, step.launches[0].role)
            if host:
                why = f"host step between ({', '.join(host)})"
            else:
                launches = [(ln.spec, ln.shape_dict, ln.config_dict)
                            for ln in (*last.launches, step.launches[0])]
                findings = check_merge(launches, hw)
                why = findings[0].message if findings else "no finding (merge not tried)"
            out.append((cut, why))
        last, host = step, []
    return out


def _upstream_cuts(phase: UpstreamPhase) -> list[tuple[Cut, UpstreamSplit | None]]:
    return [((a.launches[-1], b.launches[0]), phase.split_after(a.name))
            for a, b in zip(phase.elfs, phase.elfs[1:], strict=False)]


def _explain(ours: list[tuple[Cut, str]], theirs: list[tuple[Cut, UpstreamSplit | None]],
             phase: UpstreamPhase, n_ours: int) -> str:
    our_cuts = {c for c, _ in ours}
    their_cuts = {c for c, _ in theirs}
    parts: list[str] = []
    missing: dict[str, list[str]] = {}
    for (a, b), split in theirs:
        if (a, b) in our_cuts:
            continue
        kind = split.kind if split else "choice"
        missing.setdefault(kind, []).append(f"{a} | {b}")
    for kind, where in missing.items():
        cpu = ", ".join(op for op, _, _ in phase.cpu if "residual" in op or "SwiGLU" in op) \
            or "the glue"
        parts.append(f"upstream splits at {'; '.join(where)} ({kind}): "
                     + OUR_READING[kind].format(cpu=cpu))
    for (a, b), why in ours:
        if (a, b) not in their_cuts:
            parts.append(f"ours splits at {a} | {b}, upstream does not: {why}")
    stated = sorted({v for v, _ in phase.stated})
    if stated and stated != [phase.per_layer]:
        parts.append(f"upstream's pages state {'/'.join(map(str, stated))} ELFs per layer but "
                     f"its per-layer diagram lists {phase.per_layer}; we compare with the "
                     "diagram")
    if not parts:
        same = "; ".join(f"{a} | {b}" for a, b in sorted(our_cuts))
        return f"same split ({same})" if same else "same split"
    head = "same count, " if n_ours == phase.per_layer else ""
    return head + "; ".join(parts)


def compare_dispatches(models: tuple[str, ...] = TARGETS, hw: Hardware = XDNA2,
                       seq: int = 2048, pos: int = 2047) -> list[DispatchComparison]:
    """For each model, prefill (at `seq`) and decode (at position `pos`): our merged plan's
    dispatches per layer next to upstream's ELFs per layer, with the differences explained."""
    rows = []
    for model in models:
        args = CATALOG[model].args
        up = upstream_deployments()[model]
        plans: dict[Mode, DispatchPlan] = {
            "prefill": reference_prefill(model, args, seq, hw),
            "decode": reference_decode(model, args, pos, hw)}
        for mode, plan in plans.items():
            phase = up.phase(mode)
            ours_d = [s for s in _our_layer(plan, 0) if isinstance(s, Dispatch)]
            ours = _our_cuts(plan, 0, hw)
            theirs = _upstream_cuts(phase)
            rows.append(DispatchComparison(
                model, mode, len(ours_d), phase.per_layer,
                tuple(sorted({v for v, _ in phase.stated})),
                tuple(tuple(ln.role for ln in d.launches) for d in ours_d),
                tuple((e.name, e.launches) for e in phase.elfs),
                tuple(f"{a} | {b}: {why}" for (a, b), why in ours),
                _explain(ours, theirs, phase, len(ours_d))))
    return rows


__all__ = ["OUR_READING", "TARGETS", "DispatchComparison", "Figure", "UpstreamDeployment",
           "UpstreamElf", "UpstreamPhase", "UpstreamSplit", "compare_dispatches", "provenance",
           "upstream_deployments"]
