"""Which dispatch decides a wrong greedy token, and the supported change that fixes it.

When a deployment's greedy token first differs from the FP32 oracle's, `localize` replays
that step on the emulator with one step's output at a time replaced, and watches whether the
argmax comes back to the oracle's token:

* **oracle**: the step's output is the oracle's tensor (the golden of its (layer, op),
  oracle.reference), rounded to the dtype the device holds it in. Everything before it is
  then right; what remains is this step and the ones after it. The first step (in plan
  order) whose swap brings the token back is where the deployment goes wrong, if a step
  does: found by bisection (a swap later in the plan removes at least the error an earlier
  one does), each trial resuming the plan after the swapped step.
* **fp32**: the step computed on its own inputs in FP32 (its family's reference) with no
  rounding of the output where nothing on the device reads it after (the logits), else
  rounded to the device dtype: is it this kernel's rounding that decides? Tried from the
  step the oracle search named, then from the plan's end backwards, until one brings the
  token back ("until the argmax flips back").

The dispatch whose FP32 form brings the token back is named, and what the hardware can do
instead is proposed with its modeled price (kernels.performance.model.estimate): a GEMV LM
head writes FP32 logits (`Recipe.lm_head_out`, kernels.families.gemv_fp32); a GEMM on the
BFP16 datapath takes the bf16 one. Where no swap brings the token back, or no supported
change exists for the dispatch named, `Localization.proposal` is None and the run stops for
a person with this evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import torch

from npu_deploy.kernels.definition.registry import family
from npu_deploy.kernels.definition.specs import Decode, Mode, prompt_prefill
from npu_deploy.kernels.performance.model import estimate
from npu_deploy.kernels.plans.plan import Dispatch, DispatchPlan, HostStep, Step
from npu_deploy.oracle.reference import golden_name
from npu_deploy.pipeline.deployed import DeployedModel
from npu_deploy.pipeline.recipe import Recipe

Tensors = dict[str, torch.Tensor]
Swap = Literal["oracle", "fp32"]

#: a plan role (its partition suffix dropped) -> the op of the oracle's goldens it computes
#: (roles, not kernels: some roles share their kernel's name)
ROLE_OPS: dict[str, str] = dict((
    ("embed", "embed"), ("attn_norm", "attn_norm"), ("q_proj", "q"), ("k_proj", "k"),
    ("v_proj", "v"), ("q_bias", "q"), ("k_bias", "k"), ("v_bias", "v"), ("q_norm", "q_norm"),
    ("k_norm", "k_norm"), ("rope_q", "q_rope"), ("rope_k", "k_rope"), ("attention", "attn"),
    ("o_proj", "o"), ("attn_residual", "attn_residual"), ("ffn_norm", "ffn_norm"),
    ("gate_proj", "gate"), ("up_proj", "up"), ("silu_mul", "silu_mul"), ("down_proj", "down"),
    ("ffn_residual", "ffn_residual"), ("final_norm", "final_norm"), ("lm_head", "logits")))
#: with QKV biases the projections write the sum before the bias: no golden holds it
_PRE_BIAS = ("q_proj", "k_proj", "v_proj")


@dataclass(frozen=True)
class Trial:
    """One replay: `step` (a dispatch's name or a host step's label) with its output
    swapped; the token it gave and the oracle token's margin over the best other token
    (negative: another token wins)."""

    step: str
    swap: Swap
    token: int
    margin: float
    restores: bool
    note: str = ""


@dataclass(frozen=True)
class Proposal:
    """A change the hardware supports for the dispatch named, and its modeled price: the
    seconds of the prompt's prefill plus one decode step, before and after."""

    change: str
    recipe: Recipe
    why: str
    before_s: float
    after_s: float

    def line(self) -> str:
        return (f"{self.change}: {self.why}; modeled prefill + one decode step "
                f"{self.before_s * 1e3:.3f} ms -> {self.after_s * 1e3:.3f} ms "
                f"({(self.after_s - self.before_s) * 1e6:+.1f} us)")


@dataclass(frozen=True)
class Localization:
    """The evidence of one localization (see the module docstring)."""

    greedy_step: int
    oracle_token: int
    our_token: int
    margin_before: float
    trials: tuple[Trial, ...]
    #: the first step whose oracle swap brings the token back (None: none does)
    oracle_from: str | None
    #: the dispatch whose FP32 form brings the token back (None: none does)
    named: str | None
    proposal: Proposal | None

    def lines(self) -> list[str]:
        out = [f"greedy step {self.greedy_step}: ours {self.our_token}, the oracle's "
               f"{self.oracle_token} (its margin {self.margin_before:+.4f})"]
        out += [f"  {t.swap:6} {t.step}: token {t.token}, margin {t.margin:+.4f}"
                f"{' (back to the oracle)' if t.restores else ''}{' ' + t.note if t.note else ''}"
                for t in self.trials]
        if self.named is None:
            out.append("no dispatch's FP32 form brings the oracle's token back: stop for a "
                       "person")
        else:
            out.append(f"named: {self.named}")
            out.append(self.proposal.line() if self.proposal else
                       "no supported change is known for it: stop for a person")
        return out


# --- the replay ----------------------------------------------------------------------------

@dataclass
class _Replay:
    """The divergent step as a plan run: the plan, its tokens and cache, the tensors after
    each step of the clean run, the goldens' rows of the positions it computes."""

    deployed: DeployedModel
    plan: DispatchPlan
    tokens: torch.Tensor
    cache: Tensors | None
    snapshots: list[Tensors]
    goldens: Tensors
    rows: slice
    oracle_token: int

    def run(self, first: int, state: Tensors) -> torch.Tensor:
        """The last position's logits of the plan resumed at step `first` on `state`."""
        out = self.deployed.runner.run(self.plan, self.tokens, self.cache,
                                       resume=(first, state))
        return out.logits[-1].float()

    def before(self, i: int) -> Tensors:
        """A copy of the tensors as step i found them."""
        return _copy(self.snapshots[i], self._in_place)

    def trial(self, i: int, swap: Swap) -> Trial:
        step = self.plan.steps[i]
        state = self.before(i) if swap == "fp32" else _copy(self.snapshots[i + 1],
                                                               self._in_place)
        note = ""
        try:
            changed = (_oracle(self, step, state) if swap == "oracle"
                       else _widen(self, i, step, state))
        except (KeyError, ValueError, RuntimeError) as e:
            changed, note = False, f"(not swapped: {e})"
        if not changed:
            logits = self.run(i + 1, _copy(self.snapshots[i + 1], self._in_place))
            note = note or "(nothing to swap)"
        else:
            logits = self.run(i + 1, state)
        token = int(logits.argmax())
        return Trial(_label(step), swap, token, _margin(logits, self.oracle_token),
                     changed and token == self.oracle_token, note)

    @property
    def _in_place(self) -> set[str]:
        return self.deployed.runner.written_in_place(self.plan)


def _copy(tensors: Tensors, in_place: set[str]) -> Tensors:
    """The tensors dict, the ones written in place cloned (the rest are replaced whole)."""
    return {k: (v.clone() if k in in_place else v) for k, v in tensors.items()}


def _label(step: Step) -> str:
    return step.name if isinstance(step, Dispatch) else step.label


def _margin(logits: torch.Tensor, token: int) -> float:
    others = logits.clone()
    others[token] = float("-inf")
    return float(logits[token] - others.max())


def _setup(deployed: DeployedModel, reference: Any, ids: torch.Tensor,
           oracle_tokens: list[int], step: int, steps: int) -> _Replay:
    """The plan and inputs of greedy step `step` (0: the prefill; k: the decode step that
    reads the oracle's token k - 1, the deployment having followed the oracle so far)."""
    n = int(ids.shape[0])
    cache: Tensors | None = None
    if step == 0:
        plan, tokens, rows = deployed.prefill_plan(n), ids, slice(0, n)
    else:
        _, cache = deployed.prefill(ids)
        context = n + max(steps, step + 1)
        for k in range(step - 1):
            _, cache = deployed.decode(oracle_tokens[k], n + k, cache, context)
        plan = deployed.plan(Decode(n + step - 1, context))
        tokens, rows = torch.tensor([oracle_tokens[step - 1]]), slice(n + step - 1, n + step)
    seq = torch.cat((ids, torch.tensor(oracle_tokens[:step], dtype=ids.dtype)))
    goldens = reference.capture(seq)
    snapshots: list[Tensors] = []
    in_place = deployed.runner.written_in_place(plan)

    def keep(i: int, s: Step | None, tensors: Tensors) -> None:
        snapshots.append(_copy(tensors, in_place))     # [0]: the start; [i + 1]: after i

    deployed.runner.run(plan, tokens, cache, after_step=keep)
    return _Replay(deployed, plan, tokens, cache, snapshots, goldens, rows,
                   oracle_tokens[step])


# --- the two swaps -------------------------------------------------------------------------

def _outputs(step: Step) -> list[Any]:
    """The bindings a step writes."""
    if isinstance(step, HostStep):
        return [b for b in step.bindings if b.kind == "output"]
    out = []
    for ln in step.launches:
        roles = {op.name: op.role for op in ln.spec.operands(ln.shape_dict)}
        out += [b for b in ln.bindings if roles[b.operand] == "output"]
    return out


def _golden_of(replay: _Replay, step: Step, role: str, layer: int | None) -> torch.Tensor | None:
    """The oracle's rows (seq-first [rows, features]) of what a step of `role` writes."""
    base = role.split(".")[0]
    args = replay.plan.args
    if base in _PRE_BIAS and args.qkv_bias or base not in ROLE_OPS:
        return None
    where = (-1 if base == "embed" else args.n_layers) if layer is None else layer
    g = replay.goldens.get(golden_name(where, ROLE_OPS[base]))
    if g is None:
        return None
    if g.dim() == 3:                               # [heads, seq, head_dim]
        g = g.transpose(0, 1).reshape(g.shape[1], -1)
    return g[replay.rows]


def _put(t: torch.Tensor, b: Any, g: torch.Tensor, head_dim: int) -> torch.Tensor:
    """`t` (the tensor binding `b` writes) with the golden rows `g` in the positions it
    holds, in its layout and dtype."""
    if b.rows is not None:                         # an LM head partition of the logits
        new = t.clone()
        new[b.rows[0]:b.rows[1]] = g[-1, b.rows[0]:b.rows[1]].to(t.dtype)
        return new
    if t.numel() == g[-1].numel():                 # one position: decode, the last row
        return g[-1].reshape(t.shape).to(t.dtype)
    r = g.shape[0]
    if b.layout == "head-first":
        view = t.reshape(g.shape[1] // head_dim, -1, head_dim).clone()
        view[:, :r] = g.reshape(r, -1, head_dim).transpose(0, 1).to(t.dtype)
    else:
        view = t.reshape(t.shape[0], -1).clone()
        view[:r] = g.reshape(r, -1).to(t.dtype)
    return view.reshape(t.shape)


def _oracle(replay: _Replay, step: Step, state: Tensors) -> bool:
    """Replace what the step wrote in `state` by the oracle's; False if it has no golden."""
    owners = step.launches if isinstance(step, Dispatch) else (step,)
    changed = False
    for owner in owners:
        g = _golden_of(replay, step, owner.role, owner.layer)
        if g is None:
            continue
        for b in _outputs(step):
            if b in owner.bindings and b.tensor in state:
                state[b.tensor] = _put(state[b.tensor], b, g, replay.plan.args.head_dim)
                changed = True
    return changed


def _widen(replay: _Replay, i: int, step: Step, state: Tensors) -> bool:
    """Run dispatch `i` on `state` as its families' FP32 references; an output nothing later
    reads (the logits) stays FP32. False for a host step (the host computes in FP32)."""
    if not isinstance(step, Dispatch):
        return False
    runner = replay.deployed.runner
    later = {b.tensor for s in replay.plan.steps[i + 1:] for b in _reads(s)}
    for ln in step.launches:
        numerics = family(ln.kernel).numerics
        if numerics is None:
            return False
        config, inputs, outputs = runner.operands(ln, state)
        ref = numerics.reference(ln.shape_dict, {**ln.spec.tunables, **config}, inputs)
        for op, out in outputs.items():
            b = ln.binding(op)
            value = ref[op].reshape(out.shape)
            if b.tensor in later:
                out.copy_(value)                   # rounded to the device dtype
                continue
            whole = state[b.tensor].float()
            if b.rows is None:
                state[b.tensor] = value.float().reshape(whole.shape)
            else:
                whole[b.rows[0]:b.rows[1]] = value.float()
                state[b.tensor] = whole
    return True


# --- the search ----------------------------------------------------------------------------

def _oracle_search(replay: _Replay, trials: list[Trial]) -> int | None:
    """The first step whose oracle swap brings the token back, by bisection over the steps
    with a golden; None when even the last does not."""
    steps = [i for i, s in enumerate(replay.plan.steps)
             if any(_golden_of(replay, s, o.role, o.layer) is not None
                    for o in (s.launches if isinstance(s, Dispatch) else (s,)))]
    found, lo, hi = None, 0, len(steps) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        t = replay.trial(steps[mid], "oracle")
        trials.append(t)
        if t.restores:
            found, hi = steps[mid], mid - 1
        else:
            lo = mid + 1
    return found


def _widen_search(replay: _Replay, oracle_from: int | None, trials: list[Trial]
                  ) -> int | None:
    """The dispatch whose FP32 form brings the token back, None when none does. Tried in
    this order: the dispatches that write the plan's result (the LM head: the cheapest
    replays, and the rounding nearest the argmax), the step the oracle search named, then
    the rest from the plan's end backwards."""
    steps = replay.plan.steps
    order = [i for i in range(len(steps) - 1, -1, -1) if isinstance(steps[i], Dispatch)]
    read = {b.tensor for s in steps for b in _reads(s)}
    result = [i for i in order if not any(b.tensor in read for b in _outputs(steps[i]))]
    rest = [i for i in order if i not in result and i != oracle_from]
    if oracle_from in order and oracle_from not in result:
        rest.insert(0, oracle_from)
    for i in result + rest:
        t = replay.trial(i, "fp32")
        trials.append(t)
        if t.restores:
            return i
    return None


def _reads(step: Step) -> list[Any]:
    """The bindings a step reads."""
    bindings = step.bindings if isinstance(step, HostStep) else [
        b for ln in step.launches for b in ln.bindings]
    written = _outputs(step)
    return [b for b in bindings if b not in written]


def localize(deployed: DeployedModel, reference: Any, ids: torch.Tensor,
             oracle_tokens: list[int], step: int = 0, *, steps: int | None = None
             ) -> Localization:
    """Localize greedy step `step`, the first at which the deployment's token differs from
    `oracle_tokens[step]` (the FP32 oracle's greedy run of `ids`); `steps`: the generation's
    length, whose context the decode plans are built for (default: up to this step)."""
    if not 0 <= step < len(oracle_tokens):
        raise ValueError(f"greedy step {step} is outside the oracle's {len(oracle_tokens)} "
                         "tokens: give the step at which the deployment first differs")
    replay = _setup(deployed, reference, ids, oracle_tokens, step, steps or step + 1)
    clean = replay.run(len(replay.plan.steps), replay.snapshots[-1])
    ours = int(clean.argmax())
    before = _margin(clean, replay.oracle_token)
    if ours == replay.oracle_token:
        raise ValueError(f"greedy step {step}: the deployment picks the oracle's token "
                         f"{ours} there; nothing to localize")
    trials: list[Trial] = []
    first = _oracle_search(replay, trials)
    named = _widen_search(replay, first, trials)
    named_step = None if named is None else replay.plan.steps[named]
    proposal = None if named_step is None else propose(deployed, named_step, int(ids.shape[0]))
    return Localization(step, replay.oracle_token, ours, before, tuple(trials),
                        None if first is None else _label(replay.plan.steps[first]),
                        None if named_step is None else _label(named_step), proposal)


# --- the change ----------------------------------------------------------------------------

def propose(deployed: DeployedModel, step: Step, prompt: int) -> Proposal | None:
    """The supported change for a dispatch whose rounding decides the token, priced: an LM
    head whose family has an FP32-output form writes FP32 logits; a GEMM on the BFP16
    datapath runs on the bf16 one. None: no change is known for it."""
    if not isinstance(step, Dispatch):
        return None
    recipe = deployed.recipe
    for ln in step.launches:
        if ln.role.split(".")[0] == "lm_head" and family(ln.kernel).fp32_out \
                and recipe.lm_head_out != "f32":
            return _priced(deployed, replace(recipe, lm_head_out="f32"), prompt,
                           "lm_head_out=f32", "the LM head writes FP32 logits (our GEMV "
                           "without mv.cc's bf16 cast: kernels.families.gemv_fp32)")
        if ln.config_dict.get("datapath") == "bfp16":
            return _priced(deployed, replace(recipe, gemm_datapath="bf16"), prompt,
                           "gemm_datapath=bf16", f"{ln.label} multiplies on the bf16 "
                           "datapath, without rounding its operands to BFP16 blocks")
    return None


def _priced(deployed: DeployedModel, after: Recipe, prompt: int, change: str, why: str
            ) -> Proposal:
    def seconds(recipe: Recipe) -> float:
        modes: tuple[Mode, ...] = (prompt_prefill(prompt), Decode(prompt))
        return sum(estimate(recipe.plan(deployed.name, deployed.args, m, deployed.hw),
                            deployed.hw).total_s for m in modes)
    return Proposal(change, after, why, seconds(deployed.recipe), seconds(after))


__all__ = ["ROLE_OPS", "Localization", "Proposal", "Trial", "localize", "propose"]
