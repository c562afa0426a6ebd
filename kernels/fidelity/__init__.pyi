"""The public face of this area, for type checkers and for lazy_loader (`__init__.py`)."""

from .numerics_fidelity import compare_rows as compare_rows
from .numerics_fidelity import summarize as summarize
from .perf_fidelity import held_out_elfs as held_out_elfs
from .perf_fidelity import kfold as kfold
from .selection_fidelity import registry_acceptance as registry_acceptance
from .selection_fidelity import selection_agreement as selection_agreement
