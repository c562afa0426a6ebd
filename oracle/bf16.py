"""The bf16 reference: Hugging Face's own run of the model in bf16 on the CPU, the bar a
deployment must not fall behind.

The FP32 oracle is the truth a deployment is compared with; but a model run in bf16 (what
the NPU computes in) is not expected to keep every one of the oracle's greedy tokens: where
two tokens are nearly tied, any bf16 rounding may pick the other one. How far the model's
own framework gets in bf16 is what "as good as the original in bf16" means, so phase 0
records it for every canonical prompt, beside the oracle's runs:

* `tokens`: the greedy tokens of transformers' model loaded in bf16 (its own forward pass
  and cache, argmax, end-of-sequence does not stop it), as many steps as the oracle's;
* `agreed`: the leading tokens it shares with the oracle's run (`topk_check`'s `agreed`,
  the definition the deployment's figure uses);
* `diverged_at`: the first step where it differs from the oracle (None: it never does).

The phase-3 gate (pipeline/gates/model.py) holds the deployment to this bar.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from npu_deploy.events.phases import phase
from npu_deploy.metrics.tokens import Greedy, greedy_step, topk_check
from npu_deploy.models.loading import LoadedModel, load_hf_model

from .prompts import Prompt


def hf_greedy(model: Any, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, list[int],
                                                                      torch.Tensor]:
    """Prefill logits, greedy tokens and the logits each was chosen from (all in FP32, as
    read from the model's output, whatever its dtype), by the Hugging Face model's own
    forward pass and cache."""
    with torch.inference_mode():
        out = model(prompt[None], use_cache=True)
        prefill = out.logits[0].float()
        last, past = prefill[-1], _cache_of(out)
        tokens, chosen_from = [], []
        for step in range(steps):
            chosen_from.append(last)
            tokens.append(int(last.argmax()))
            if step + 1 < steps:
                out = model(torch.tensor([[tokens[-1]]]), use_cache=True,
                            **{_cache_argument(model): past})
                last, past = out.logits[0, -1].float(), _cache_of(out)
    return prefill, tokens, torch.stack(chosen_from)


def _cache_argument(model: Any) -> str:
    """The name under which this model's forward takes the KV cache: `cache` in the
    transformers releases that deprecated `past_key_values` (a warning on every call), which
    older releases take."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"


def _cache_of(out: Any) -> Any:
    """The KV cache a forward returned, under either name."""
    return out["cache"] if "cache" in out else out["past_key_values"]


def hf_teacher_forced(model: Any, prompt: torch.Tensor, tokens: list[int]
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill logits and, for each of `tokens`, the logits it is to be chosen from (all in
    FP32), by the Hugging Face model's own forward pass and cache, teacher-forced: the
    prompt's prefill (step 0 reads its last row, as a greedy run's first step does), then
    tokens[:-1] in one pass over that cache (step i reads the prompt and tokens[:i]). The
    causal arithmetic of a decode step per token, in one pass that reads the weights once
    instead of once per token (up to the order of the FP32 sums inside a matmul)."""
    with torch.inference_mode():
        out = model(prompt[None], use_cache=True)
        prefill = out.logits[0].float()
        steps = [prefill[-1:]]
        if len(tokens) > 1:
            rest = model(torch.tensor([tokens[:-1]]), use_cache=True,
                         **{_cache_argument(model): _cache_of(out)})
            steps.append(rest.logits[0].float())
    return prefill, torch.cat(steps)[:len(tokens)]


@dataclass(frozen=True)
class Bf16Run:
    """The bf16 reference's greedy run of one prompt, against the FP32 oracle's."""

    prompt: str
    tokens: list[int]
    agreed: int                 # leading greedy tokens shared with the oracle
    steps: int                  # the oracle's run's length
    diverged_at: int | None     # the first step that differs (None: none does)

    @property
    def keeps_first_token(self) -> bool:
        """Whether it answers with the oracle's first token (vacuously, a run of 0 steps)."""
        return self.agreed >= 1 or self.steps == 0

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "tokens": self.tokens, "agreed": self.agreed,
                "steps": self.steps, "diverged_at": self.diverged_at}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Bf16Run:
        return cls(str(d["prompt"]), [int(t) for t in d["tokens"]], int(d["agreed"]),
                   int(d["steps"]), None if d["diverged_at"] is None else int(d["diverged_at"]))


def bf16_model(loaded: LoadedModel) -> Any:
    """transformers' model of `loaded`, read from its own directory in bf16 (a checkpoint
    stored in bf16, as most are, is read as it is; an FP32 one is rounded once)."""
    return load_hf_model(loaded.source.directory, dtype=torch.bfloat16)


def bf16_run(model: Any, prompt: Prompt, ids: torch.Tensor, oracle: Greedy) -> Bf16Run:
    """The bf16 model's greedy run of one prompt, as many steps as the oracle's, against it.
    A decode step per token, as transformers' own generation runs: in bf16, reading the
    oracle's tokens in one teacher-forced pass instead rounds differently and can pick the
    other token of a near tie (measured on the tiny test models: logits 0.004 apart)."""
    steps = len(oracle.tokens)
    _, tokens, chosen_from = hf_greedy(model, ids, steps)
    run = Greedy(tokens, [greedy_step(row)[1] for row in chosen_from])
    tc = topk_check(run, oracle)
    return Bf16Run(prompt.name, tokens, tc.agreed, steps, tc.diverged_at)


def bf16_reference(loaded: LoadedModel, prompts: Iterable[tuple[Prompt, torch.Tensor]],
                   answers: dict[str, Any]) -> dict[str, Bf16Run]:
    """The bf16 reference of every prompt (with its token ids) against the oracle's greedy
    runs (`answers`: prompt name -> Greedy dict), by prompt name."""
    model = bf16_model(loaded)
    return {p.name: bf16_run(model, p, ids, Greedy.from_dict(answers[p.name]))
            for p, ids in prompts}


@dataclass(frozen=True)
class BarCheck:
    """A deployment's greedy agreement with the oracle held to the bf16 bar (the phase-3
    rule, events/phases.py `bf16_agreed_margin`): summed over the prompts, it shares at least
    the bf16 reference's count of leading tokens with the oracle, less the margin; and on
    every prompt where the bf16 reference answers with the oracle's first token, it does
    too.

    A prompt the deployment leaves at a later step (never the first) where the oracle's two
    tokens are less than one bf16 step apart (`Greedy.bf16_tie`) counts in the sum as the
    bf16 reference's figure when that is higher: rounding alone decides such a tie, in any
    bf16 implementation, so Hugging Face keeping it there is luck the deployment is not held
    to. The first answer token is held whatever its margin."""

    ours: int                   # the deployment's summed agreement (ties counted as above)
    theirs: int                 # the bf16 reference's
    margin: int
    steps: int                  # the oracle's tokens, summed
    first_tokens: dict[str, tuple[bool, bool]]     # prompt -> (deployment keeps, bf16 keeps)
    ties: tuple[str, ...] = ()  # prompts counted at the bf16 reference's figure

    @property
    def bar(self) -> int:
        return self.theirs - self.margin

    @property
    def summed_holds(self) -> bool:
        return self.ours >= self.bar

    @property
    def first_tokens_lost(self) -> list[str]:
        """The prompts whose first token the bf16 reference keeps and the deployment not."""
        return [p for p, (ours, theirs) in self.first_tokens.items() if theirs and not ours]

    @property
    def passed(self) -> bool:
        return self.summed_holds and not self.first_tokens_lost

    def reason(self) -> str:
        """Why it fails, in words ("" when it holds)."""
        out = []
        if not self.summed_holds:
            out.append(f"the deployment shares {self.ours} greedy tokens with the FP32 oracle, "
                       f"Hugging Face in bf16 {self.theirs}")
        if self.first_tokens_lost:
            out.append("a different first token than the oracle's, which Hugging Face in bf16 "
                       "keeps, on " + ", ".join(self.first_tokens_lost))
        return "; ".join(out)


def against_bar(agreed: dict[str, tuple[int, int]], bf16: dict[str, Bf16Run],
                ties: Iterable[str] = ()) -> BarCheck:
    """The bf16 bar applied to a deployment's runs (`agreed`: prompt -> its leading tokens
    shared with the oracle and the oracle's steps), every prompt with its bf16 run; `ties`:
    the prompts the deployment leaves at a step >= 1 where the oracle's two tokens tie
    below bf16's resolution (see `BarCheck`)."""
    missing = sorted(set(agreed) - set(bf16))
    if missing:
        raise KeyError(f"the bf16 reference has no run of {', '.join(missing)}: run phase 0 "
                       "again")
    tied = tuple(sorted(p for p in set(ties) & set(agreed)
                        if agreed[p][0] >= 1 and bf16[p].agreed > agreed[p][0]))
    return BarCheck(
        ours=sum(bf16[p].agreed if p in tied else a for p, (a, _) in agreed.items()),
        theirs=sum(bf16[p].agreed for p in agreed),
        margin=int(phase(3).threshold("bf16_agreed_margin")),
        steps=sum(s for _, s in agreed.values()),
        first_tokens={p: (a >= 1 or s == 0, bf16[p].keeps_first_token)
                      for p, (a, s) in agreed.items()},
        ties=tied)
