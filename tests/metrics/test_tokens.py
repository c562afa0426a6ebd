"""metrics.tokens: the token-set check the phase-3 gate, the evaluator and the toolbox use
(vLLM's check_logprobs_close idea), its edge cases, and the greedy runs it reads as the
oracle stored them."""

from __future__ import annotations

import json

import pytest
import torch

from npu_deploy.metrics.tokens import Greedy, TokenCheck, greedy_step, top_k, topk_check

REF = Greedy([1, 2, 3, 4], [[1, 9, 8], [2, 7, 6], [3, 5, 0], [4, 0, 0]])


def logits_ranking(*order: int, vocab: int = 10) -> torch.Tensor:
    """Logits whose argmax is order[0], second order[1], ..."""
    row = torch.zeros(vocab)
    for rank, token in enumerate(order):
        row[token] = 100.0 - rank
    return row


def test_identical_runs_pass_with_every_token_agreed():
    tc = topk_check(REF, REF)
    assert tc == TokenCheck(agreed=4, steps=4) and tc.passed and tc.diverged_at is None


@pytest.mark.parametrize("ours, passed", [
    (Greedy([1, 7, 0, 0], [[1], [7, 2], [0], [0]]), True),     # each in the other's top-k
    (Greedy([1, 5], [[1], [5, 2]]), False),      # ours (5) is not in the reference's top-k
    (Greedy([1, 7], [[1], [7, 9]]), False),      # the reference's (2) is not in ours
    (Greedy([1, 9], [[1], [9, 8]]), False),      # neither
])
def test_at_the_first_difference_each_token_must_be_in_the_others_top_k(ours, passed):
    tc = topk_check(ours, REF)
    assert (tc.passed, tc.agreed, tc.diverged_at, tc.steps) == (passed, 1, 1, 4)
    assert (tc.ours, tc.theirs) == (ours.tokens[1], 2)


def test_k_takes_the_first_k_candidates_of_each_step():
    ours = Greedy([1, 6], [[1, 2, 3], [6, 5, 2]])
    assert topk_check(ours, REF).passed                          # 6 ranks third in REF's step 1
    assert topk_check(ours, REF, k=3).passed
    tc = topk_check(ours, REF, k=2)
    assert not tc.passed and not tc.ours_in_their_topk and not tc.theirs_in_our_topk
    assert topk_check(Greedy([9], [[9, 1]]), REF, k=2).passed    # both rank second


def test_nothing_after_the_first_difference_is_compared():
    # the runs differ at step 0 acceptably; what follows is free
    tc = topk_check(Greedy([9, 0, 0, 0], [[9, 1], [0], [0], [0]]), REF)
    assert tc.passed and tc.agreed == 0 and tc.diverged_at == 0


def test_runs_of_different_lengths_compare_their_common_prefix():
    shorter = Greedy([1, 2], [[1], [2]])                         # a stop token ended ours
    tc = topk_check(shorter, REF)
    assert (tc.passed, tc.agreed, tc.steps, tc.diverged_at) == (True, 2, 4, None)
    tc = topk_check(REF, shorter)                                # the reference is shorter
    assert (tc.passed, tc.agreed, tc.steps) == (True, 2, 2)
    assert topk_check(Greedy([], []), REF) == TokenCheck(agreed=0, steps=4)


@pytest.mark.parametrize("k", [0, -1, True, 2.0])
def test_k_must_be_a_positive_integer(k):
    with pytest.raises(ValueError, match="k must be"):
        topk_check(REF, REF, k=k)


def test_k_above_what_a_run_kept_is_an_error_not_a_smaller_check():
    with pytest.raises(ValueError, match="ours kept only 1 candidates"):
        topk_check(Greedy([1, 7], [[1], [7, 2]]), REF, k=2)
    with pytest.raises(ValueError, match="the reference kept only 3 .* top-4"):
        topk_check(Greedy([1], [[1, 2, 3, 4, 5]]), REF, k=4)


@pytest.mark.parametrize("tokens, topk, message", [
    ([1, 2], [[1]], "2 tokens needs as many top-k lists, got 1"),
    ([1], [[1], [2]], "1 tokens needs as many"),
    ([1, 2], [[1], []], "step 1 is empty")])
def test_a_malformed_greedy_run_is_refused(tokens, topk, message):
    with pytest.raises(ValueError, match=message):
        Greedy(tokens, topk)


def test_a_stored_greedy_run_reads_back_unchanged():
    stored = '{"tokens":[1,2],"topk":[[1,9,8,7,6],[2,7,6,5,4]]}'
    run = Greedy.from_dict(json.loads(stored))
    assert run == Greedy([1, 2], [[1, 9, 8, 7, 6], [2, 7, 6, 5, 4]])
    assert json.dumps(run.to_dict(), separators=(",", ":")) == stored


def test_a_greedy_step_chooses_the_argmax_and_keeps_the_top_k_best_first():
    token, top = greedy_step(logits_ranking(4, 7, 1, 0, 9, 3))
    assert (token, top) == (4, [4, 7, 1, 0, 9]) and len(top) == top_k()
    assert greedy_step(logits_ranking(2, 8), k=2) == (2, [2, 8])


def test_a_tie_below_one_bf16_step_is_told_from_one_bf16_separates():
    """bf16 keeps 8 significant bits: between 0.5 and 1 its values are 2**-8 apart, between
    32 and 64 0.25 apart. The oracle's logits of tiny-llama at 16 tokens (step 18: 0.0022
    apart at 0.85) are a tie; a gap of 0.08 is one at 40, and not at 0.6."""
    run = Greedy([4, 4], [[4, 7, 1], [4, 7, 1]], [[0.8530, 0.8508, 0.1], [0.68, 0.6, 0.1]])
    assert run.bf16_tie(0, 7)                       # 0.0022 < 2**-8
    assert not run.bf16_tie(0, 1)                   # far apart
    assert not run.bf16_tie(1, 7)                   # 0.08 > 2**-8
    assert not run.bf16_tie(0, 9)                   # not among the kept candidates
    assert Greedy([4], [[4, 7]], [[40.05, 39.97]]).bf16_tie(0, 7)        # < 0.25
    assert not Greedy([4], [[4, 7]], [[40.3, 39.97]]).bf16_tie(0, 7)
    assert not Greedy([4], [[4, 7]]).bf16_tie(0, 7)                      # no logits kept
    with pytest.raises(ValueError, match="top-k logits must match"):
        Greedy([4], [[4, 7]], [[40.0]])


def test_a_run_with_logits_reads_back_unchanged_and_an_old_one_without():
    run = Greedy([1], [[1, 9]], [[2.5, 2.25]])
    assert Greedy.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    assert "topk_logits" not in Greedy([1], [[1, 9]]).to_dict()
