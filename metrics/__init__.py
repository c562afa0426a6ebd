"""metrics: how every numerical gate compares a candidate with its reference. `compare` is
one streaming float64 pass (a fused numba scan, a torch scan as its reference) giving every
element-wise and aggregate figure; `topk_agreement` is the token-set check of two greedy
runs."""

from .comparison import Comparison, TopKCheck, compare, topk_agreement

__all__ = ["Comparison", "TopKCheck", "compare", "topk_agreement"]
