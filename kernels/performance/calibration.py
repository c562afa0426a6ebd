"""The performance model calibrated: every `PerfParams` value derived from the figures of
kernels/data/calibration.json (kernels.performance.calibration_set) and upstream's measured
launches, and the reports that hold the model against those figures.

Step 1 of `calibrate()` fits each family's cost coefficients on every launch upstream
measured on its own (the kernel registry's rows and the tile sweeps of its notes,
`kernels.performance.fitting`); steps 2-6 fit the in-deployment terms (the price of a launch
inside a merged ELF, the dispatch overhead, the derates of matmul and streaming work, the host
rates) to the Llama-3.2-1B deployment alone, priced at the configurations it ran
(`deployed`), on its reference plans (`reference_prefill`, `reference_decode`: the measured
deployment's structure built by the plan transforms). A test checks the model's defaults are
`calibrate()`'s output. `python -m npu_deploy.kernels.performance.calibration` re-runs it and
prints the reports.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

import numpy as np

from npu_deploy.models import CATALOG
from npu_deploy.models.config import ModelArgs

from ..definition.family import InElf
from ..definition.hardware import GB, XDNA2, Hardware
from ..definition.registry import SPECS, family
from ..definition.specs import BF16, Decode, Prefill
from ..plans.plan import baseline_plan
from ..plans.steps import Dispatch, DispatchPlan
from ..plans.transforms import (
    align_layouts,
    decode_attention_on_cpu,
    merge_dispatches,
    reuse_buffers,
)
from .calibration_set import CALIBRATION, Calibration, _frozen
from .fitting import fit_kernels, measured_launches
from .model import PerfParams, dispatch_profile, estimate, in_elf, launch_seconds, launch_work


def reference_prefill(model: str, args: ModelArgs, seq: int, hw: Hardware = XDNA2
                      ) -> DispatchPlan:
    """The measured deployment's prefill structure: layouts aligned, the last-token LM head,
    buffers reused, launches merged (three dispatches per layer, one for the LM head)."""
    plan = baseline_plan(model, args, Prefill(seq), hw)     # its LM head on the last token
    plan = reuse_buffers(align_layouts(plan))
    return merge_dispatches(plan, hw)


def reference_decode(model: str, args: ModelArgs, pos: int, hw: Hardware = XDNA2
                     ) -> DispatchPlan:
    """The measured deployment's decode structure: buffers reused, attention on the CPU,
    each layer's launches merged (two dispatches per layer)."""
    plan = reuse_buffers(baseline_plan(model, args, Decode(pos), hw))
    # the baseline already has attention on the CPU where its program does not fit the NPU
    if any(family(ln.kernel).host_alternative for ln in plan.launches()):
        plan = decode_attention_on_cpu(plan)
    return merge_dispatches(plan, hw)


def deployed(plan: DispatchPlan, c: Calibration | None = None) -> DispatchPlan:
    """`plan` with every launch at the configuration the measured deployment ran it with
    (calibration.json's deployment_configs): what the deployment's figures are priced at."""
    c = c or CALIBRATION
    mode = "prefill" if isinstance(plan.mode, Prefill) else "decode"
    steps = []
    for step in plan.steps:
        if isinstance(step, Dispatch):
            step = Dispatch(step.name, tuple(
                ln.with_config(**c.deployed_config(ln.kernel, ln.shape_dict, mode))
                for ln in step.launches))
        steps.append(step)
    return replace(plan, steps=tuple(steps))


def _first_with_role(plan: DispatchPlan, role: str) -> Dispatch:
    for d in plan.dispatches:
        if any(ln.role == role for ln in d.launches) and d.launches[0].layer in (0, None):
            return d
    raise KeyError(f"no dispatch holds {role!r}")


def calibrate(c: Calibration = CALIBRATION) -> PerfParams:
    """Derive every parameter from the figures in `c` and upstream's measured launches (see
    the module docstring)."""


    args = CATALOG["llama-3.2-1b"].args
    # 1. Each family's cost coefficients: least squares of ln(modeled / measured) over every
    #    launch upstream measured on its own (kernels.performance.fitting).
    p = fit_kernels(PerfParams(cpu_bw=c.cpu_bw), measured_launches(c))

    # The deployment's plans, priced at the configurations it ran.
    pre = deployed(reference_prefill("llama-3.2-1b", args, c.seq), c)
    dec = deployed(reference_decode("llama-3.2-1b", args, c.decode_pos), c)
    base_pre = deployed(baseline_plan("llama-3.2-1b", args, Prefill(c.seq), lm_head="full"), c)
    base_dec = deployed(baseline_plan("llama-3.2-1b", args, Decode(c.decode_pos)), c)

    # 3. Python scheduling: a + b * rows per step, from the prefill and decode figures.
    n_pre, n_dec = len(pre.steps), len(dec.steps)
    host = np.linalg.solve(np.array([[n_pre, n_pre * c.seq], [n_dec, n_dec * 1.0]]),
                           np.array([c.python_prefill_s, c.other_cpu_decode_s]))
    p = replace(p, host_step_s=float(host[0]), host_step_per_row_s=float(host[1]))

    # 4. Static weights: their one-time write is ~4% of the TTFT.
    static = estimate(pre, params=replace(p, static_write_bw=1.0)).one_time_s   # = bytes
    p = replace(p, static_write_bw=static / (c.static_write_share * c.ttft_s))

    # 5. CPU decode attention: 0.3 ms per layer at the reference position, of which the
    #    Python step and the cache copy are modeled separately.
    kv = 2 * BF16 * args.n_kv_heads * (c.decode_pos + 1) * args.head_dim
    py = p.host_step_s + p.host_step_per_row_s
    p = replace(p, cpu_attention_s=max(0.0, c.cpu_attention_s - py - kv / p.cpu_bw))

    # 2 and 6 depend on each other (a measured dispatch time holds its host transfers, the
    # IRON baseline's time its launches): alternated from 10 GB/s to their fixed point (to
    # 1e-9, as far as the golden-section search resolves the bandwidth).
    p = replace(p, host_sync_bw=10 * GB)
    for _ in range(100):
        q = _host_syncs(_in_elf(p, pre, dec, c), base_pre, base_dec, c)
        if all(math.isclose(getattr(q, f.name), getattr(p, f.name), rel_tol=1e-9)
               for f in fields(p) if isinstance(getattr(p, f.name), float)):
            return q
        p = q
    return p


def _in_elf(p: PerfParams, pre: DispatchPlan, dec: DispatchPlan, c: Calibration
            ) -> PerfParams:
    """2. Inside a merged ELF: the price of a launch (in place of its standalone floor), the
    dispatch overhead and the derates of the work of matmul, attention and streaming
    launches. What a dispatch measured beyond the sum of its launches' standalone times is
    what merging costs; the model of it is linear in these unknowns: weighted least squares
    (relative errors) on the deployment's dispatch times less their host transfers, the
    dispatch overhead kept in its measured range."""
    classes: tuple[InElf, ...] = ("matmul", "attention", "stream")
    rows, rhs = [], []
    for plan, figures in ((pre, c.prefill_dispatches), (dec, c.decode_dispatches)):
        for role, t in figures:
            d = _first_with_role(plan, role)
            work = dict.fromkeys(classes, 0.0)
            for ln in d.launches:
                work[in_elf(ln)] += launch_work(ln, p)[0]
            rows.append([len(d.launches), 1.0, *work.values()])
            rhs.append(t - dispatch_profile(d, p, 0.0, {}).host_transfer_s)
    a, b = np.array(rows), np.array(rhs)
    w = 1.0 / b
    sol = np.linalg.lstsq(a * w[:, None], b * w, rcond=None)[0]
    lo, hi = c.dispatch_overhead_range
    if not lo <= sol[1] <= hi:
        fixed = min(max(sol[1], lo), hi)
        keep = [0, 2, 3, 4]
        sub = np.linalg.lstsq((a[:, keep] * w[:, None]), (b - a[:, 1] * fixed) * w,
                              rcond=None)[0]
        sol = np.array([sub[0], fixed, *sub[1:]])
    return replace(p, launch_overhead_s=float(sol[0]), dispatch_overhead_s=float(sol[1]),
                   matmul_derate=float(sol[2]), attention_derate=float(sol[3]),
                   stream_derate=float(sol[4]))


def _host_syncs(p: PerfParams, base_pre: DispatchPlan, base_dec: DispatchPlan,
                c: Calibration) -> PerfParams:
    """6. Host syncs of the IRON baseline: one bandwidth, least squares in log space over
    its prefill and decode times (a golden-section search on log(bandwidth); a plan's
    time is its time without transfers plus its synced bytes over the bandwidth)."""
    parts = []
    for plan, measured in ((base_pre, c.iron_prefill_s), (base_dec, c.iron_decode_s)):
        prof = estimate(plan, params=p)
        moved = sum(s.host_bytes for s in prof.steps)
        parts.append((prof.total_s - sum(s.host_transfer_s for s in prof.steps), moved,
                      measured))

    def loss(log_bw: float) -> float:
        bw = math.exp(log_bw)
        return sum(math.log((rest + moved / bw) / measured) ** 2
                   for rest, moved, measured in parts)

    lo_bw, hi_bw = math.log(0.5 * GB), math.log(100 * GB)
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        m1, m2 = hi_bw - g * (hi_bw - lo_bw), lo_bw + g * (hi_bw - lo_bw)
        if loss(m1) < loss(m2):
            hi_bw = m2
        else:
            lo_bw = m1
    return replace(p, host_sync_bw=float(math.exp((lo_bw + hi_bw) / 2)))


def params_text(p: PerfParams) -> str:
    """The parameters, one per line (for `python -m npu_deploy.kernels.performance.calibration`)."""
    return "\n".join(f"{f.name} = {getattr(p, f.name)!r}" for f in fields(p))


def calibration_report(p: PerfParams | None = None) -> list[tuple[str, float, float]]:
    """(figure, measured on NPU2, modeled) for every Llama-3.2-1B figure of
    docs/hardware-facts.md#reference-deployment, the plans priced at the configurations the
    deployment ran."""
    c, args = CALIBRATION, CATALOG["llama-3.2-1b"].args
    pre = deployed(reference_prefill("llama-3.2-1b", args, c.seq))
    dec = deployed(reference_decode("llama-3.2-1b", args, c.decode_pos))
    ppro, dpro = estimate(pre, params=p), estimate(dec, params=p)
    rows = [("TTFT (3-dispatch prefill plan)", c.ttft_s, ppro.total_s),
            ("decode per token (2-dispatch plan)", c.decode_s, dpro.total_s)]
    for plan, prof, figures, what in ((pre, ppro, c.prefill_dispatches, "prefill"),
                                      (dec, dpro, c.decode_dispatches, "decode")):
        for role, measured in figures:
            step = prof.by_name(_first_with_role(plan, role).name)
            rows.append((f"{what} dispatch holding {role}", measured, step.device_s))
    for mode, measured, what in ((Prefill(c.seq), c.iron_prefill_s, "prefill"),
                                 (Decode(c.decode_pos), c.iron_decode_s, "decode")):
        base = deployed(baseline_plan("llama-3.2-1b", args, mode, lm_head="full"))
        rows.append((f"IRON baseline {what}", measured, estimate(base, params=p).total_s))
    return rows


def calibration_set_report(p: PerfParams | None = None) -> list[tuple[str, float, float]]:
    """(figure, measured on NPU2, modeled on its own) for docs/hardware-facts.md#calibration-set:
    the Llama-3.2-1B projections as GEMMs (bf16 out at the fastest method, fp32 out) and
    as GEMVs, each modeled at the configuration of the registry row it is."""
    c = CALIBRATION
    rows = measured_launches(c, sweeps=False)
    figures = [(k, {"M": m, "K": kk, "N": n}, SPECS[k].flops({"M": m, "K": kk, "N": n}) / r)
               for k, points in (("gemm_bf16", c.gemm_bf16), ("gemm_fp32", c.gemm_fp32))
               for m, kk, n, r in points]
    figures += [("gemv", {"M": m, "K": kk}, 2.0 * m * kk / r) for m, kk, r in c.gemv]
    out = []
    for kernel, shape, measured in figures:
        row = min((t for t in rows if (t.kernel, t.shape) == (kernel, _frozen(shape))),
                  key=lambda t: abs(t.seconds - measured))
        config = row.config_dict
        what = f" ({config['method']})" if "method" in config else ""
        out.append((f"{kernel} {'x'.join(map(str, shape.values()))}{what}", measured,
                    launch_seconds(SPECS[kernel], shape, config, p)))
    return out


if __name__ == "__main__":
    fitted = calibrate()
    print(params_text(fitted))
    for title, rows in (("Llama-3.2-1B: measured on NPU2 (docs/hardware-facts.md) against modeled",
                         calibration_report(fitted)),
                        ("its calibration set, each launch on its own",
                         calibration_set_report(fitted))):
        print(f"\n{title}")
        for figure, measured, modeled in rows:
            print(f"  {figure:42s} {measured * 1e3:9.2f} ms  {modeled * 1e3:9.2f} ms  "
                  f"{modeled / measured - 1:+6.1%}")
