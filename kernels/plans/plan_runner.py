"""Run a dispatch plan: every launch on a backend, every host step on the CPU.

The runner keeps each tensor in the layout its binding gives it (a head-first tensor is
[heads, L, head_dim], a seq-first one [L, heads * head_dim]) and hands a kernel its
operands together with their layouts (`config["layouts"]`), as the DMA patterns of the
compiled program would read them. Whether a binding is static, intermediate, input or
output changes what a step costs (see kernels.performance.model), never what it computes: a plan and
every transform of it that runs the same kernels give the same bits.

A backend with `run_dispatch` (the NPU, kernels.npu_runtime.npu_backend) takes a whole dispatch at
once, as one submission; the emulator takes launch by launch. With `trace` set, the runner appends
each step's wall time, measured on the host around the step.

A prefill plan is built for a length (`Prefill.seq`); a prompt of fewer tokens runs it padded
after its last token (`kernels.definition.specs.prompt_prefill` says to which length), as the
chip runs it. Causal attention masks the padding; it reaches the prompt only where PV reads V
in BFP16 blocks of 8 positions, the padding's first positions sharing an exponent with the
prompt's last: a rounding-level change of at most those 7 rows
(docs/real-npu.md#prompts-run-padded). The last-token LM head reads the prompt's last row,
and the tensors and the KV cache are cut back to the prompt's positions.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from npu_deploy.models.adapters import Weights
from npu_deploy.models.config import ModelArgs
from npu_deploy.oracle import reference as ref_ops

from ..definition.registry import HOST_KERNELS, family
from ..definition.specs import Operand, Prefill
from ..emulation.numerics import to_bf16
from ..families.rope import lut as rope_lut
from .plan import Binding, Dispatch, DispatchPlan, HostStep, Launch, lut_name

Tensors = dict[str, torch.Tensor]
#: (step index, step, the run's tensors so far) -> None: `PlanRunner.run`'s after_step
AfterStep = Callable[[int, "Dispatch | HostStep | None", Tensors], None]


@dataclass
class PlanResult:
    #: [L, vocab] FP32 (full LM head) or [1, vocab]: bf16, FP32 with the FP32-logits head
    logits: torch.Tensor
    cache: Tensors                 # "L{i}.k_cache" / "L{i}.v_cache": [kv_heads, T, head_dim]
    tensors: Tensors               # every tensor the plan produced, by name
    #: the positions this run computed for: a prompt's tokens, of the `Prefill.seq` the plan
    #: ran (the rest padding; L and T above count the prompt's); a decode step: 1
    tokens: int = 1


@dataclass(frozen=True)
class StepTime:
    """One step of a plan run: its wall on the host (the backend's clock around the call:
    the host's perf_counter but on a simulated device that keeps its own)."""

    name: str
    where: str                     # npu (a dispatch) | cpu (a host step)
    seconds: float


def _device_weights(args: ModelArgs, weights: Weights) -> Tensors:
    """The model's weights as the device holds them (bf16), under the plan's names."""
    w: Tensors = {"w.embed": weights.embed, "w.final_norm": weights.final_norm,
                  "w.lm_head": weights.lm_head}
    for i, lw in enumerate(weights.layers):
        names = {"attn_norm": lw.attn_norm, "ffn_norm": lw.ffn_norm, "q_proj": lw.wq,
                 "k_proj": lw.wk, "v_proj": lw.wv, "o_proj": lw.wo, "gate_proj": lw.w_gate,
                 "up_proj": lw.w_up, "down_proj": lw.w_down, "q_bias": lw.bq, "k_bias": lw.bk,
                 "v_bias": lw.bv, "q_norm": lw.q_norm, "k_norm": lw.k_norm,
                 "post_attn_norm": lw.post_attn_norm, "post_ffn_norm": lw.post_ffn_norm}
        for name, t in names.items():
            if t is not None:
                w[f"w.L{i}.{name}"] = t
    return {name: to_bf16(t) for name, t in w.items()}


class PlanRunner:
    """Executes plans of one model on `backend` (kernels) and the CPU (host steps)."""

    def __init__(self, args: ModelArgs, weights: Weights, backend: Any, *,
                 exact_tiles: bool = False) -> None:
        self.args, self.backend = args, backend
        # Whole-model runs let BLAS order the FP32 sums (see numerics.gemm_bfp16).
        self.exact_tiles = exact_tiles
        self.weights = _device_weights(args, weights)
        self._gemm_b: Tensors = {}      # GEMM B operands: the weight transposed to [K, N]
        #: a 4-bit deployment's blocks (`Weights.packed`), read by its decode's 4-bit kernels
        self.packed = dict(weights.packed or {})
        self._packed: dict[tuple[str, tuple[int, int] | None, str], Tensors] = {}
        self.trace: list[StepTime] | None = None

    def on(self, backend: Any) -> PlanRunner:
        """This runner on another backend (a replay with other numerics), sharing the
        device weights and the GEMM operands prepared from them: a static weight's block
        format (gemm_numerics) is keyed by its tensor, so it is converted once for all."""
        other = copy.copy(self)
        other.backend, other.trace = backend, None
        return other

    # --- the plan ---------------------------------------------------------------------

    @torch.inference_mode()
    def run(self, plan: DispatchPlan, tokens: torch.Tensor, cache: Tensors | None = None, *,
            after_step: AfterStep | None = None, resume: tuple[int, Tensors] | None = None
            ) -> PlanResult:
        """Prefill `tokens` ([n], n up to the plan's L: padded to L), or decode one token
        ([1]) at the plan's position with `cache` (from the prefill or the previous step; not
        modified).

        `after_step(i, step, tensors)` is called with the tensors so far: first with i = -1
        and no step (what the run starts from), then after each step (a replay may replace
        a step's outputs there: pipeline.localize); `resume=(i, tensors)` runs the plan from
        step i on those tensors (as an earlier run of the same plan and tokens left them
        after step i - 1) instead of from the start."""
        a = self.args
        n = int(tokens.shape[0])
        if isinstance(plan.mode, Prefill):
            if not 0 < n <= plan.mode.seq:
                raise ValueError(f"plan is for L={plan.mode.seq}, got {n} tokens: a prompt "
                                 f"of 1 to {plan.mode.seq} tokens runs it")
            # the padding's ids: any, causal attention keeps them out of the prompt's rows
            # (upstream pads with EOS, programming_examples/llms/llama32_1b/
            # llama32_1b_inference.py); 0 is an id of every vocabulary
            tokens = torch.cat((tokens, tokens.new_zeros(plan.mode.seq - n)))
            positions = torch.arange(plan.mode.seq)
            seq_len = n         # LongRoPE's table is the prompt's, not the padding's
        else:
            if int(tokens.shape[0]) != 1 or cache is None:
                raise ValueError("a decode plan takes one token and the KV cache")
            positions = torch.tensor([plan.mode.pos])
            seq_len = plan.mode.pos + 1
        first = 0
        if resume is not None:
            first, tensors = resume[0], dict(resume[1])
        else:
            tensors = {"tokens": tokens, **rope_luts(a, positions, seq_len)}
            if cache is not None:
                tensors.update(cache)
        self._row_sizes = _row_sizes(plan)
        self._last = n - 1 if isinstance(plan.mode, Prefill) else 0
        whole = getattr(self.backend, "run_dispatch", None)
        prepare = getattr(self.backend, "prepare", None)
        if prepare is not None:
            prepare(plan)       # a device backend sizes the plan's buffers once (padding)
        clock = getattr(self.backend, "clock", time.perf_counter)
        if after_step is not None and resume is None:
            after_step(-1, None, tensors)
        for i, step in enumerate(plan.steps[first:], start=first):
            t0 = clock()
            if isinstance(step, Dispatch):
                if whole is not None:
                    whole(step, [self._operands(ln, tensors) for ln in step.launches],
                          a.head_dim)
                else:
                    for launch in step.launches:
                        self.backend.run(launch.spec, launch.shape_dict,
                                         *self._operands(launch, tensors))
            else:
                self._host(step, tensors)
            if self.trace is not None:
                self.trace.append(StepTime(step.name if isinstance(step, Dispatch)
                                           else step.label,
                                           "npu" if isinstance(step, Dispatch) else "cpu",
                                           clock() - t0))
            if after_step is not None:
                after_step(i, step, tensors)
        if isinstance(plan.mode, Prefill) and n < plan.mode.seq:
            tensors = _prompt_rows(plan, tensors, n)
        new_cache = {k: v for k, v in tensors.items() if k.endswith(("k_cache", "v_cache"))}
        logits = tensors["logits"]
        if logits.dim() == 1:
            logits = logits[None]
        return PlanResult(logits, new_cache, tensors, n if isinstance(plan.mode, Prefill) else 1)

    def written_in_place(self, plan: DispatchPlan) -> set[str]:
        """The tensors the plan's launches write in row ranges (the LM head's partitions
        write the logits so): a copy of a run's tensors between steps must clone these."""
        return set(_row_sizes(plan))

    # --- launches ---------------------------------------------------------------------

    def operands(self, launch: Launch, tensors: Tensors
                 ) -> tuple[dict[str, Any], Tensors, Tensors]:
        """The launch's config and its input and output tensors as a kernel reads them,
        its outputs allocated in `tensors` (a replay computes a launch its own way)."""
        return self._operands(launch, tensors)

    def _operands(self, launch: Launch, tensors: Tensors
                  ) -> tuple[dict[str, Any], Tensors, Tensors]:
        """The launch's config (with its operands' layouts) and its input and output
        tensors by operand, as the kernel reads them."""
        spec, shape = launch.spec, launch.shape_dict
        config = dict(launch.config_dict)
        config["layouts"] = {b.operand: b.layout for b in launch.bindings}
        config["head_dim"] = self.args.head_dim
        kernel = family(spec.name)
        if kernel.exact_tiles:
            config["exact_tiles"] = self.exact_tiles
        if kernel.transposed_weight is not None:     # a weight converted once (static_b)
            config["static_b"] = launch.binding(kernel.transposed_weight).tensor.startswith("w.")
        inputs, outputs = {}, {}
        packed = kernel.numerics.packed_weight if kernel.numerics is not None else None
        for op in spec.operands(shape):
            b = launch.binding(op.name)
            dims = _physical(op, b, self.args.head_dim)
            if op.role == "weight" and packed is not None:
                inputs.update(self._packed_weight(launch, b, packed))
            elif op.role == "output":
                outputs[op.name] = self._output(b, op, dims, tensors)
            else:
                inputs[op.name] = self._input(launch, b, dims, tensors)
        return config, inputs, outputs

    def _input(self, launch: Launch, b: Binding, dims: tuple[int, ...],
               tensors: Tensors) -> torch.Tensor:
        if b.tensor.startswith("w."):
            transposed = b.operand == family(launch.kernel).transposed_weight
            t = self._weight(b.tensor, gemm_b=transposed)
        elif b.tensor in tensors:
            t = tensors[b.tensor]
        else:
            raise KeyError(f"{launch.label}: reads {b.tensor!r} before any step wrote it")
        if b.rows is not None:
            t = t[b.rows[0]:b.rows[1]]
        if b.width is not None:                 # zeros past the tensor's own values
            if t.numel() != b.width:
                raise ValueError(f"{launch.label}: {b.tensor} holds {t.numel()} values, the "
                                 f"plan binds {b.width}")
            t = torch.nn.functional.pad(t.reshape(-1), (0, math.prod(dims) - b.width))
        if tuple(t.shape) != dims:
            if t.dim() == 3 and len(dims) == 3 and t.shape[1] >= dims[1]:
                t = t[:, :dims[1]]          # the first Lk positions of a KV cache
            else:
                t = t.reshape(dims)
        return t

    def _output(self, b: Binding, op: Operand, dims: tuple[int, ...],
                tensors: Tensors) -> torch.Tensor:
        dtype = torch.float32 if op.elem_bytes == 4 else torch.bfloat16
        if b.rows is None:
            tensors[b.tensor] = torch.empty(dims, dtype=dtype)
            return tensors[b.tensor]
        if b.tensor not in tensors:
            tensors[b.tensor] = torch.empty(self._row_sizes[b.tensor], *dims[1:], dtype=dtype)
        return tensors[b.tensor][b.rows[0]:b.rows[1]]

    def _packed_weight(self, launch: Launch, b: Binding, packed: Any) -> Tensors:
        """A 4-bit kernel's weight operand: the model's blocks of `b`'s tensor (the rows of
        its partition), as the kernel's family binds them, converted once per launch
        configuration (the int4 GEMV's tiles depend on it)."""
        name = b.tensor.removeprefix("w.")
        key = (name, b.rows, repr(sorted(launch.config_dict.items())))
        if key not in self._packed:
            m = self.packed.get(name)
            if m is None:
                raise KeyError(f"{launch.label}: {launch.kernel} reads 4-bit blocks of {name!r}, "
                               "which this model does not have (deploy it with --weights "
                               "q4nx, or plan it without a weight format)")
            if b.rows is not None:
                m = m.rows(*b.rows)
            self._packed[key] = packed(launch.shape_dict,
                                       {**launch.spec.tunables, **launch.config_dict}, m)
        return self._packed[key]

    def _weight(self, name: str, gemm_b: bool) -> torch.Tensor:
        if name not in self.weights:
            raise KeyError(f"the plan reads weight {name!r}, which this model does not have")
        if not gemm_b:
            return self.weights[name]
        if name not in self._gemm_b:        # [out, in] -> [K, N], written once
            with torch.inference_mode(False):   # a normal tensor: the emulator keys on it
                self._gemm_b[name] = self.weights[name].t().contiguous()
        return self._gemm_b[name]

    # --- host steps -------------------------------------------------------------------

    def _host(self, step: HostStep, tensors: Tensors) -> None:
        a, s, p = self.args, step.shape_dict, step.params_dict

        def get(operand: str) -> torch.Tensor:
            name = step.binding(operand).tensor
            return self.weights[name] if name.startswith("w.") else tensors[name]

        def put(operand: str, value: torch.Tensor) -> None:
            tensors[step.binding(operand).tensor] = value

        kernel = HOST_KERNELS.get(step.op)
        if kernel is not None and kernel.host is not None:     # a kernel family on the host
            kernel.host.run(s, p, get, put)
        elif step.op == "transpose":
            x, hd = get("x"), s["head_dim"]
            if p["to"] == "head-first":
                put("y", x.reshape(s["rows"], s["heads"], hd).transpose(0, 1).contiguous())
            else:
                put("y", x.transpose(0, 1).reshape(s["rows"], s["heads"] * hd).contiguous())
        elif step.op == "kv_store":
            for name in ("k", "v"):
                t = get(name)
                if step.binding(name).layout == "seq-first":
                    t = t.reshape(s["Lk"], s["kv_heads"], s["head_dim"]).transpose(0, 1)
                put(f"{name}_cache", t.reshape(s["kv_heads"], s["Lk"], s["head_dim"]).clone())
        elif step.op == "kv_append":
            pos, kvh, hd = int(p["pos"]), s["kv_heads"], s["head_dim"]
            for name in ("k", "v"):
                old = get(f"{name}_cache")
                if old.shape[1] != pos:
                    raise ValueError(f"{step.label}: the cache holds {old.shape[1]} positions, "
                                     f"the plan decodes position {pos}")
                row = get(name).reshape(kvh, 1, hd)
                put(f"{name}_cache", torch.cat((old, row), dim=1))
        elif step.op == "final_norm_last_row":
            # The rmsnorm kernel's numerics on one row (the prompt's last): FP32, one cast
            x = get("x")[self._last:self._last + 1]
            put("y", to_bf16(ref_ops.rms_norm(x.to(torch.float32),
                                              get("weight").to(torch.float32), a.norm_eps)))
        else:
            raise ValueError(f"{step.label}: no host implementation of {step.op!r}")


def rope_luts(args: ModelArgs, positions: torch.Tensor, seq_len: int) -> Tensors:
    """The RoPE kernel's tables the plan's layers read (`lut_name`: one, or Gemma 3's local
    and global), each a bf16 [cos | sin] LUT row per position (rope_halfsplit.cc), head_dim
    wide (padded past a partial rotary's dims, as rope_partial reads it). `seq_len`: the
    length LongRoPE picks its factors by (a padded prefill's prompt)."""
    tables: Tensors = {}
    for layer in range(args.n_layers):
        name = lut_name(args, layer)
        if name not in tables:
            cos, sin = ref_ops.rope_table(args, positions, layer, seq_len=seq_len)
            tables[name] = to_bf16(rope_lut(cos, sin, args.head_dim))
    return tables


def _physical(op: Operand, b: Binding, head_dim: int) -> tuple[int, ...]:
    """The stored shape of operand `op` bound with layout `b.layout`. Attention operands are
    [heads, L, head_dim] in the spec; GEMM outputs [M, N]."""
    dims = op.dims
    if len(dims) == 3 and b.layout == "seq-first":
        return (dims[1], dims[0] * dims[2])
    if len(dims) == 2 and b.layout == "head-first" and op.role == "output" \
            and dims[1] % head_dim == 0 and op.name == "c":
        return (dims[1] // head_dim, dims[0], head_dim)
    if b.rows is not None:
        return (b.rows[1] - b.rows[0], *dims[1:])
    return dims


def _prompt_rows(plan: DispatchPlan, tensors: Tensors, n: int) -> Tensors:
    """A padded prefill's tensors cut back to the prompt's `n` positions where the
    sequence is an axis of its own: the first of a seq-first [L] or [L, X] tensor, the
    second of a head-first [heads, L, head_dim] one and of the KV cache. A tensor that
    folds the sequence into another axis (RoPE's rows of [L * heads, head_dim]) keeps its
    padded rows, as do the last-token LM head's row and the weights."""
    seq = plan.mode.seq if isinstance(plan.mode, Prefill) else 1
    head_first = {b.tensor for step in plan.steps for b in _bindings(step)
                  if b.layout == "head-first"} | {k for k in tensors
                                                   if k.endswith(("k_cache", "v_cache"))}
    out = {}
    for name, t in tensors.items():
        if name in head_first:
            if t.dim() == 3 and t.shape[1] == seq:
                t = t[:, :n]
        elif t.dim() <= 2 and t.shape[0] == seq:
            t = t[:n]
        out[name] = t
    return out


def _bindings(step: Any) -> tuple[Binding, ...]:
    if isinstance(step, Dispatch):
        return tuple(b for ln in step.launches for b in ln.bindings)
    return step.bindings


def _row_sizes(plan: DispatchPlan) -> dict[str, int]:
    """For tensors written in row ranges (LM head partitions), their total rows."""
    sizes: dict[str, int] = {}
    for step in plan.steps:
        launches = step.launches if isinstance(step, Dispatch) else ()
        for launch in launches:
            for b in launch.bindings:
                if b.rows is not None:
                    sizes[b.tensor] = max(sizes.get(b.tensor, 0), b.rows[1])
    return sizes


__all__ = ["AfterStep", "PlanResult", "PlanRunner", "StepTime"]
