"""The token-set check: does a deployed model choose the tokens its reference chooses?

A greedy run (`Greedy`) keeps, at every step, the token it chose and the k tokens it found
most likely (best first, k = `top_k()` unless generated otherwise). `topk_check` compares two
such runs, a candidate ("ours") and its reference, by this rule, the idea of vLLM's
`check_logprobs_close` (vllm-project/vllm, tests/models/utils.py):

1. Walk both runs from step 0 while they chose the same token. Those leading steps are
   `agreed`.
2. At the first step i where they differ, the check passes if and only if the candidate's
   token is among the reference's top-k at step i AND the reference's token is among the
   candidate's top-k at step i. A divergence between two near-tied tokens is what reduced
   precision (bf16 storage, another accumulation order) is expected to cause; a token the
   other side did not even rank in its top k is a wrong model.
3. Nothing after step i is compared: from there the two runs continue from different text.
4. Runs that never differ pass, also when one is shorter than the other (a stop token or
   the step budget ended it): only their common length is compared. `steps` is the
   reference's length.

The top-k of a step is the list the run kept (all of it), or its first `k` entries when
`k` is given; asking for more candidates than a run kept is an error, never a silently
smaller check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from npu_deploy.events.phases import phase


def top_k() -> int:
    """How many candidates a greedy run keeps per step: the phase-3 token-set check's k (the
    phase table, events/phases.py, read at every call)."""
    return int(phase(3).threshold("top_k"))



@dataclass(frozen=True)
class Greedy:
    """A greedy run: the tokens, and the k most likely tokens at each step (best first).
    Stored as JSON (`to_dict`) in the oracle's answers and read back with `from_dict`."""

    tokens: list[int]
    topk: list[list[int]]
    #: the FP32 logits of each step's top-k, in its order (the oracle keeps them: they tell a
    #: tie bf16 cannot represent, `bf16_tie`); None for a run that did not keep them
    topk_logits: list[list[float]] | None = None

    def __post_init__(self) -> None:
        if len(self.topk) != len(self.tokens):
            raise ValueError(f"a greedy run of {len(self.tokens)} tokens needs as many top-k "
                             f"lists, got {len(self.topk)}")
        empty = next((i for i, top in enumerate(self.topk) if not top), None)
        if empty is not None:
            raise ValueError(f"a greedy run's top-k list of step {empty} is empty")
        if self.topk_logits is not None and [len(v) for v in self.topk_logits] != [
                len(top) for top in self.topk]:
            raise ValueError("a greedy run's top-k logits must match its top-k lists, step "
                             "by step")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"tokens": self.tokens, "topk": self.topk}
        if self.topk_logits is not None:
            d["topk_logits"] = self.topk_logits
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Greedy:
        logits = d.get("topk_logits")
        return cls([int(t) for t in d["tokens"]], [[int(t) for t in k] for k in d["topk"]],
                   None if logits is None else [[float(v) for v in k] for k in logits])

    def bf16_tie(self, step: int, token: int) -> bool:
        """Whether `token` is tied with this run's own token at `step` as closely as bf16
        cannot represent: both among the step's kept logits, less than one bf16 step (the
        spacing of bf16 values at the larger one's magnitude: 8 significant bits) apart.
        Rounding alone may then decide either way, in any bf16 implementation. False when
        the run kept no logits, or `token` is not among its top-k."""
        if self.topk_logits is None or token not in self.topk[step]:
            return False
        ranked = dict(zip(self.topk[step], self.topk_logits[step], strict=True))
        a, b = ranked[self.tokens[step]], ranked[token]
        _, exponent = torch.frexp(torch.tensor(max(abs(a), abs(b)), dtype=torch.float32))
        return abs(a - b) < 2.0 ** (int(exponent) - 8)


def greedy_step(logits: torch.Tensor, k: int | None = None) -> tuple[int, list[int]]:
    """The token greedy decoding chooses from one step's logits [vocab], and the step's
    k most likely tokens, best first (k: the phase table's, `top_k()`, unless given)."""
    k = top_k() if k is None else k
    top = torch.topk(logits.float(), k).indices.tolist()
    return int(logits.float().argmax()), [int(t) for t in top]


def parted_at_tie(tc: TokenCheck, reference: Greedy) -> bool:
    """Whether a run leaves `reference` after its first token (step >= 1) at a tie bf16
    cannot represent (`Greedy.bf16_tie`): the phase-3 bar does not hold such a step."""
    return tc.ours is not None and tc.agreed >= 1 and reference.bf16_tie(tc.agreed, tc.ours)


def greedy_with_logits(tokens: list[int], logits: torch.Tensor) -> Greedy:
    """The greedy run of `tokens`, chosen from `logits` [steps, vocab], keeping each step's
    top-k and their FP32 logits."""
    tops = [greedy_step(row)[1] for row in logits]
    return Greedy(tokens, tops, [[float(row.float()[t]) for t in top]
                                 for row, top in zip(logits, tops, strict=True)])


@dataclass(frozen=True)
class TokenCheck:
    """The token-set check of two greedy runs (see the module's rule)."""

    agreed: int                 # leading tokens identical
    steps: int                  # the reference's length
    ours: int | None = None     # the two tokens at the first difference, if any
    theirs: int | None = None
    ours_in_their_topk: bool = True
    theirs_in_our_topk: bool = True

    @property
    def passed(self) -> bool:
        return self.ours_in_their_topk and self.theirs_in_our_topk

    @property
    def diverged_at(self) -> int | None:
        """The first step where the runs differ (None: they never did)."""
        return None if self.ours is None else self.agreed


def topk_check(ours: Greedy, reference: Greedy, k: int | None = None) -> TokenCheck:
    """The token-set check of the greedy run `ours` against `reference`: at the first step
    where they differ, each one's token must be in the other's top-k (the module's rule)."""
    if k is not None and (type(k) is not int or k < 1):
        raise ValueError(f"topk_check: k must be an integer >= 1, got {k!r}")
    steps = len(reference.tokens)
    common = min(len(ours.tokens), steps)
    if k is not None:
        for name, run in (("ours", ours), ("the reference", reference)):
            kept = min((len(top) for top in run.topk[:common]), default=k)
            if kept < k:
                raise ValueError(f"topk_check: {name} kept only {kept} candidates at a step; "
                                 f"a top-{k} check needs {k}")
    for i in range(common):
        a, b = ours.tokens[i], reference.tokens[i]
        if a != b:
            return TokenCheck(i, steps, a, b, a in reference.topk[i][:k],
                              b in ours.topk[i][:k])
    return TokenCheck(common, steps)
