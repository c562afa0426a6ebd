"""The public face of this area, for type checkers and for lazy_loader (`__init__.py`)."""

from .air import Program as Program
from .air import emit_dispatch as emit_dispatch
from .air import emit_plan as emit_plan
from .air import write_programs as write_programs
from .air_parts import EmitError as EmitError
from .air_verify import Violation as Violation
from .air_verify import check_programs as check_programs
from .air_verify import verify as verify
from .recording_builder import build as build
from .recording_values import BuildError as BuildError
