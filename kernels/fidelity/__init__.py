"""Fidelity studies: how close the emulated numerics come to upstream's measured errors
(`numerics_fidelity`), the performance model to upstream's measured times
(`perf_fidelity`), and the selection to upstream's measured choices (`selection_fidelity`).

Importing this package imports none of its modules: each public name below is imported the
first time it is asked for (kernels._public_face)."""

from typing import TYPE_CHECKING

from .._public_face import public_face

if TYPE_CHECKING:
    from .numerics_fidelity import compare_rows, summarize
    from .perf_fidelity import held_out_elfs, kfold
    from .selection_fidelity import registry_acceptance, selection_agreement

__all__ = ["compare_rows", "held_out_elfs", "kfold", "registry_acceptance", "selection_agreement",
           "summarize"]

__getattr__, __dir__ = public_face(__name__, __file__)
