"""A deployment as data: the `Recipe`.

A recipe is everything the phases decided: the tile configuration of each (kernel, shape)
phase 1 validated, the GEMM datapath phase 3 chose, the dtype of the logits the LM head
writes (bf16 as upstream's GEMV writes them, or FP32: a numerics retry's change), the
datapath of FlashAttention's matmuls (upstream's BFP16 build, or our native-bf16 one), and the
plan transforms phases 4 and 5 kept, in order. It is small JSON, stored as a blob, and it
rebuilds the dispatch plan of any prefill length or decode position (`Recipe.plan`), so
that the runner, the gates and the independent evaluator all run exactly what the phases
decided.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from npu_deploy.kernels.definition.hardware import XDNA2, Hardware
from npu_deploy.kernels.definition.specs import Mode, Prefill
from npu_deploy.kernels.plans.plan import (
    ATTENTION_DATAPATHS,
    LM_HEAD_OUT,
    AttentionDatapath,
    DispatchPlan,
    LogitsDtype,
    baseline_plan,
)
from npu_deploy.kernels.plans.transforms import TRANSFORMS
from npu_deploy.models.config import ModelArgs


@dataclass(frozen=True)
class Recipe:
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    gemm_datapath: str = "bfp16"
    prefill_transforms: tuple[str, ...] = ()
    decode_transforms: tuple[str, ...] = ()
    #: the GEMV LM head's logits, prefill and decode: "bf16" or "f32" (kernels.plans.plan
    #: LM_HEAD_OUT)
    lm_head_out: LogitsDtype = "bf16"
    #: the matmul datapath of prefill's FlashAttention: "bfp16" (upstream's build) or "bf16"
    #: (native 4x8x8, ours; kernels.plans.plan ATTENTION_DATAPATHS)
    attention_datapath: AttentionDatapath = "bfp16"
    #: how a 4-bit decode's proj_qmm rounds its bf16 casts: "floor" (upstream's build) or
    #: "conv_even" (ours; kernels.families.proj_qmm QMM_ROUNDINGS)
    qmm_rounding: str = "floor"

    def __post_init__(self) -> None:
        if self.lm_head_out not in LM_HEAD_OUT:
            raise ValueError(f"recipe: lm_head_out must be one of {tuple(LM_HEAD_OUT)}, got "
                             f"{self.lm_head_out!r}")
        if self.attention_datapath not in ATTENTION_DATAPATHS:
            raise ValueError(f"recipe: attention_datapath must be one of "
                             f"{ATTENTION_DATAPATHS}, got {self.attention_datapath!r}")

    def to_json(self) -> bytes:
        d: dict[str, Any] = {"configs": self.configs, "gemm_datapath": self.gemm_datapath,
                             "prefill_transforms": list(self.prefill_transforms),
                             "decode_transforms": list(self.decode_transforms)}
        if self.lm_head_out != "bf16":      # a bf16 head's recipe reads as it always did
            d["lm_head_out"] = self.lm_head_out
        if self.attention_datapath != "bfp16":      # likewise upstream's attention build
            d["attention_datapath"] = self.attention_datapath
        if self.qmm_rounding != "floor":            # and upstream's proj_qmm build
            d["qmm_rounding"] = self.qmm_rounding
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Recipe:
        d = json.loads(data)
        return cls(dict(d["configs"]), str(d["gemm_datapath"]),
                   tuple(d["prefill_transforms"]), tuple(d["decode_transforms"]),
                   d.get("lm_head_out", "bf16"), d.get("attention_datapath", "bfp16"),
                   d.get("qmm_rounding", "floor"))

    def with_settings(self, settings: dict[str, str]) -> Recipe:
        """The recipe with numerics settings (gemm_datapath, attention_datapath,
        lm_head_out, qmm_rounding) changed: a numerics retry's change (pipeline.divergence)."""
        unknown = set(settings) - {"gemm_datapath", "attention_datapath", "lm_head_out",
                                   "qmm_rounding"}
        if unknown:
            raise ValueError(f"recipe: no numerics setting {sorted(unknown)}")
        return replace(self, **settings)  # type: ignore[arg-type]

    def plan_key(self, mode: Mode) -> bytes:
        """What `plan(..., mode, ...)` depends on: this recipe without the other mode's
        transforms."""
        if isinstance(mode, Prefill):
            return replace(self, decode_transforms=()).to_json()
        return replace(self, prefill_transforms=()).to_json()

    def transforms(self, mode: Mode) -> tuple[str, ...]:
        return self.prefill_transforms if isinstance(mode, Prefill) else self.decode_transforms

    def with_transforms(self, mode: Mode, names: tuple[str, ...]) -> Recipe:
        """The recipe with its `mode` plan's transforms replaced by `names`."""
        if isinstance(mode, Prefill):
            return replace(self, prefill_transforms=tuple(names))
        return replace(self, decode_transforms=tuple(names))

    def with_transform(self, mode: Mode, name: str) -> Recipe:
        if isinstance(mode, Prefill):
            return replace(self, prefill_transforms=(*self.prefill_transforms, name))
        return replace(self, decode_transforms=(*self.decode_transforms, name))

    def without_transform(self, mode: Mode, name: str) -> Recipe:
        """The recipe with `name` taken out of its `mode` plan's transforms (a retry's undo)."""
        if isinstance(mode, Prefill):
            return replace(self, prefill_transforms=tuple(
                t for t in self.prefill_transforms if t != name))
        return replace(self, decode_transforms=tuple(
            t for t in self.decode_transforms if t != name))

    def baseline(self, model: str, args: ModelArgs, mode: Mode, hw: Hardware = XDNA2
                 ) -> DispatchPlan:
        """The baseline plan with this recipe's configurations, datapaths and LM head output.
        Decode runs GEMVs and its own attention, so the datapaths only change prefill."""
        return baseline_plan(model, args, mode, hw, configs=self.configs,
                             gemm_datapath=self.gemm_datapath, lm_head_out=self.lm_head_out,
                             attention_datapath=self.attention_datapath,
                             qmm_rounding=self.qmm_rounding)

    def plan(self, model: str, args: ModelArgs, mode: Mode, hw: Hardware = XDNA2
             ) -> DispatchPlan:
        plan = self.baseline(model, args, mode, hw)
        for name in self.transforms(mode):
            plan = TRANSFORMS[name].apply(plan)
        return plan
