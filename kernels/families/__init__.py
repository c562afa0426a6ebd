"""The kernel families, one module each (a module may declare closely related variants: the
two GEMMs, RMSNorm and the QK norm, the add and the bias add, decode attention on the NPU
and on the host). `kernels.definition.registry` lists them.

To add a family: copy the module closest to it (`gelu.py` for an element-wise kernel),
declare its spec, checker rule, search space, numerics, cost and program top to bottom,
give it a data file (its upstream page as a `Source`, then `python -m
npu_deploy.kernels.measured.ingest MIRROR`), add it to the registry, and run `make docs`.
`streaming.py` holds what the row and element-wise families share.
"""
