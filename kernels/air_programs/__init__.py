"""MLIR-AIR programs: the parts every family's program is written with (`air_parts`), the
emitter of a plan's dispatches (`air`), and their verification without mlir-air: a recording
stand-in of mlir-air's builder (`recording_builder`, with `recording_values`,
`recording_trace`, `recording_dialects`) and the verifier that checks what it recorded
(`air_verify`, with its checks in `verify_*`).

Importing this package imports none of its modules: each public name below is imported the
first time it is asked for (kernels._public_face)."""

from typing import TYPE_CHECKING

from .._public_face import public_face

if TYPE_CHECKING:
    from .air import Program, emit_dispatch, emit_plan, write_programs
    from .air_parts import EmitError
    from .air_verify import Violation, check_programs, verify
    from .recording_builder import build
    from .recording_values import BuildError

__all__ = ["BuildError", "EmitError", "Program", "Violation", "build", "check_programs",
           "emit_dispatch", "emit_plan", "verify", "write_programs"]

__getattr__, __dir__ = public_face(__name__, __file__)
