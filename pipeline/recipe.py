"""A deployment as data: the `Recipe`.

A recipe is everything the phases decided: the tile configuration of each (kernel, shape)
phase 1 validated, the GEMM datapath phase 3 chose, and the plan transforms phases 4 and 5
kept, in order. It is small JSON, stored as a blob, and it rebuilds the dispatch plan of any
prefill length or decode position (`Recipe.plan`), so that the runner, the gates and the
independent evaluator all run exactly what the phases decided.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from npu_deploy.kernels.definition.hardware import XDNA2, Hardware
from npu_deploy.kernels.definition.specs import Mode, Prefill
from npu_deploy.kernels.plans.plan import DispatchPlan, baseline_plan
from npu_deploy.kernels.plans.transforms import TRANSFORMS
from npu_deploy.models.config import ModelArgs


@dataclass(frozen=True)
class Recipe:
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    gemm_datapath: str = "bfp16"
    prefill_transforms: tuple[str, ...] = ()
    decode_transforms: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        return json.dumps({"configs": self.configs, "gemm_datapath": self.gemm_datapath,
                           "prefill_transforms": list(self.prefill_transforms),
                           "decode_transforms": list(self.decode_transforms)},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Recipe:
        d = json.loads(data)
        return cls(dict(d["configs"]), str(d["gemm_datapath"]),
                   tuple(d["prefill_transforms"]), tuple(d["decode_transforms"]))

    def transforms(self, mode: Mode) -> tuple[str, ...]:
        return self.prefill_transforms if isinstance(mode, Prefill) else self.decode_transforms

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
        """The baseline plan with this recipe's configurations and datapath. Decode runs
        GEMVs, so the datapath only changes prefill."""
        return baseline_plan(model, args, mode, hw, configs=self.configs,
                             gemm_datapath=self.gemm_datapath)

    def plan(self, model: str, args: ModelArgs, mode: Mode, hw: Hardware = XDNA2
             ) -> DispatchPlan:
        plan = self.baseline(model, args, mode, hw)
        for name in self.transforms(mode):
            plan = TRANSFORMS[name].apply(plan)
        return plan
