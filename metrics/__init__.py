"""metrics: how every numerical gate compares a candidate with its reference. `compare` is
one streaming float64 pass (a fused numba scan, a torch scan as its reference) giving every
element-wise and aggregate figure; `topk_check` (metrics.tokens) is the token-set check of
two greedy runs."""

from .comparison import Comparison, compare
from .tokens import Greedy, TokenCheck, greedy_step, top_k, topk_check

__all__ = ["Comparison", "Greedy", "TokenCheck", "compare", "greedy_step", "top_k",
           "topk_check"]
