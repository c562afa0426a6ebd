"""Which micro-kernel objects a model's programs link, and how each is compiled: the
`KERNELS` recipes (kernels.air_programs.air_parts.KernelSource) of every program
validate-hardware compiles for the model, that is the programs of its prefill and decode
plans, baseline and as the modeled optimizer leaves them, and each (kernel, shape) it
launches run alone (Phase 1), at the configuration the selection gives it.

Only the launches' layouts are built (kernels.air_programs.air.layout_of), not the program
sources: a recipe is the layout's, and two launches of one tile shape share one object.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...models.config import ModelArgs
from ..air_programs.air import layout_of, on_device
from ..air_programs.air_parts import KernelSource
from ..definition.hardware import XDNA2, Hardware
from ..definition.selection import select
from ..definition.specs import SPECS, Decode, KernelUse, prompt_prefill
from ..plans.optimize import optimize
from ..plans.plan import DispatchPlan, Launch, baseline_plan
from .npu_backend import alone


class RecipeConflict(ValueError):
    """Two programs link one object name compiled two ways."""


def plans_of(model: str, args: ModelArgs, seq_len: int, hw: Hardware = XDNA2
             ) -> list[tuple[str, DispatchPlan]]:
    """The plans whose programs a deployment of the model may run: prefill at seq_len and
    decode at that position, each as phase 1 starts it and as the modeled optimizer leaves
    it (merged dispatches are the programs most likely to fail), decode with the LM head
    writing FP32 logits (`lm_head_out="f32"`, the change a numerics retry may make), and
    prefill with FlashAttention on the native bf16 datapath (`attention_datapath="bf16"`:
    its own build of attn_npu2.cc, attn_npu2_bf16_*.o)."""
    plans = []
    for scope, mode in (("prefill", prompt_prefill(seq_len)), ("decode", Decode(seq_len))):
        base = baseline_plan(model, args, mode, hw)
        plans += [(scope, base), (f"{scope} optimized", optimize(base, hw).plan)]
    plans.append(("decode fp32 logits",
                  baseline_plan(model, args, Decode(seq_len), hw, lm_head_out="f32")))
    plans.append(("prefill bf16 attention",
                  baseline_plan(model, args, prompt_prefill(seq_len), hw,
                                attention_datapath="bf16")))
    return plans


def kernel_launches(plans: Iterable[tuple[str, DispatchPlan]], hw: Hardware = XDNA2
                    ) -> list[Launch]:
    """Each (kernel, shape) of the plans' baselines run alone at its selected configuration
    (Phase 1's programs), once each, NPU kernels only."""
    seen: dict[tuple[str, tuple[tuple[str, int], ...]], Launch] = {}
    for scope, plan in plans:
        if scope.endswith("optimized"):
            continue
        for ln in plan.launches():
            key = (ln.kernel, tuple(sorted(ln.shape_dict.items())))
            spec = SPECS[ln.kernel]
            if key in seen or spec.where != "npu":
                continue
            config = select(KernelUse(ln.role, spec, ln.shape_dict), hw).config
            seen[key] = alone(spec, ln.shape_dict, config).launches[0]
    return list(seen.values())


@dataclass(frozen=True)
class NeededObject:
    """One object the programs link: how it is compiled, and which kernels link it."""

    source: KernelSource
    kernels: tuple[str, ...]


def needed_objects(model: str, args: ModelArgs, seq_len: int, hw: Hardware = XDNA2
                   ) -> dict[str, NeededObject]:
    """Object name -> its recipe and the kernels that link it, over every program of the
    model's plans and every kernel alone. Raises RecipeConflict when one name is compiled
    two ways (two tile shapes under one name would clash in one ELF)."""
    plans = plans_of(model, args, seq_len, hw)
    launches = [ln for _, plan in plans for d in on_device(plan, hw)[0] for ln in d.launches]
    launches += kernel_launches(plans, hw)
    found: dict[str, KernelSource] = {}
    users: dict[str, set[str]] = {}
    for ln in launches:
        for k in layout_of(ln, hw).kernels:
            if found.setdefault(k.obj, k) != k:
                raise RecipeConflict(f"{model}: {k.obj} is compiled as {k.recipe()} for "
                                     f"{ln.label} and as {found[k.obj].recipe()} elsewhere")
            users.setdefault(k.obj, set()).add(ln.kernel)
    return {obj: NeededObject(k, tuple(sorted(users[obj]))) for obj, k in sorted(found.items())}


__all__ = ["NeededObject", "RecipeConflict", "kernel_launches", "needed_objects", "plans_of"]
