"""The parts of `validate-hardware` that decide what to compile and what a failure means:
the quick mode's choice (one program per kernel family), the
modeled compile time behind the progress bar's first ETA, what a failed compile leaves for
the report (aircc's log, the program and its air.mlir), and the verdict the control gives.

Modeled compile time: upstream measured three of SmolLM2-1.7B's ELFs compiling live in
24.3 s (rms_gemms_rope), 51.3 s (o_ffn) and 38.3 s (flash_attn)
(programming_examples/llms/smollm2_1_7b/docs/evaluation_report.md); Llama-3.2-1B's six
ELFs take "~3 min" (programming_examples/llms/llama32_1b/README.md), about 30 s each. A
program is modeled at their mean, 38 s, until this machine's own compile times come in
(docs/hardware-facts.md#the-toolchain-on-the-machine).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from npu_deploy.kernels.air_programs.air import Program
from npu_deploy.kernels.definition.specs import SPECS

#: upstream's measured compile times of three SmolLM2-1.7B ELFs on NPU2 (seconds)
UPSTREAM_ELF_COMPILE_S = {"rms_gemms_rope": 24.3, "o_ffn": 51.3, "flash_attn": 38.3}
#: what one program is modeled to take to compile, before any is measured here
MODELED_COMPILE_S = statistics.fmean(UPSTREAM_ELF_COMPILE_S.values())
#: how much of a failed program's IR a report keeps (characters per text)
IR_CHARS = 200_000

def quick_choice(uses: Mapping[str, dict[str, Any]]) -> dict[str, str]:
    """Kernel -> the one (kernel, shape) key of it the quick mode runs: every NPU kernel
    family the model launches, at one of the model's own shapes: its largest prefill one
    (the most work of it a deployment does at once), else its largest decode one."""
    def order(kv: tuple[str, dict[str, Any]]) -> tuple[bool, float, str]:
        key, use = kv
        return use["mode"] != "prefill", -SPECS[use["kernel"]].flops(use["shape"]), key

    chosen: dict[str, str] = {}
    for key, use in sorted(uses.items(), key=order):
        if SPECS[use["kernel"]].where == "npu":
            chosen.setdefault(use["kernel"], key)
    return dict(sorted(chosen.items()))


# --- progress ----------------------------------------------------------------------------------

@dataclass
class Eta:
    """The time left of a stage of `total` compiles: `total` times the modeled compile time
    until one is measured here, then the measured mean."""

    total: int
    modeled_each_s: float = MODELED_COMPILE_S
    measured: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.measured.append(seconds)

    def remaining(self) -> tuple[float, str]:
        """(seconds left, "modeled" or "measured")."""
        left = max(0, self.total - len(self.measured))
        if self.measured:
            return left * statistics.fmean(self.measured), "measured"
        return left * self.modeled_each_s, "modeled"


class Steps(Protocol):
    """What a session tells its progress display: a stage of `total` compiles begins, one
    compile took `seconds`, the stage ends."""

    def begin(self, stage: str, total: int) -> None: ...

    def advance(self, seconds: float) -> None: ...

    def end(self) -> None: ...


class NoSteps:
    """No progress display (the library's default)."""

    def begin(self, stage: str, total: int) -> None:
        pass

    def advance(self, seconds: float) -> None:
        pass

    def end(self) -> None:
        pass


# --- what a failed compile leaves --------------------------------------------------------------

def error_chain(error: BaseException) -> str:
    """The error and every error behind it, whole (aircc's log is in mlir-air's)."""
    parts, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _cut(text: str) -> str:
    return text if len(text) <= IR_CHARS else text[:IR_CHARS] + "\n... (cut)"


def failed_ir(program: Program, build_dir: Path | None) -> dict[str, Any]:
    """A failed program's IR for the report: its source (what was handed to mlir-air's
    builder), and the air.mlir mlir-air wrote for aircc, when the build got that far."""
    air_mlir = None
    if build_dir is not None and (build_dir / "air.mlir").is_file():
        air_mlir = _cut((build_dir / "air.mlir").read_text(errors="replace"))
    return {"program": _cut(program.source), "air_mlir": air_mlir}


# --- what a failure means ----------------------------------------------------------------------

def diagnose(control: dict[str, Any] | None, failures: list[dict[str, str]]) -> dict[str, str]:
    """The verdict: "setup" when upstream's own example failed here too, "ours" when it
    passed and ours failed, "none" when nothing failed, "unknown" when ours failed and no
    control ran."""
    ours = [f for f in failures if f["stage"] != "control"]
    if control is None:
        return {"verdict": "unknown" if ours else "none", "text": (
            f"{len(ours)} failure(s) and no control ran (give --mlir-air-source DIR): "
            "whether the setup or our programs are at fault is not known") if ours else
            "nothing failed (no control ran)"}
    if not control["passed"]:
        return {"verdict": "setup", "text": (
            f"your setup: upstream's own {control['example']} failed on this machine too, "
            "so the driver, firmware, XRT, mlir-air, Peano or the headers are at fault before "
            "any program of ours; fix that first (`npu-deploy doctor`, the control's log "
            "in the report)")}
    if ours:
        return {"verdict": "ours", "text": (
            f"our program(s): upstream's {control['example']} passed on this machine and "
            f"{len(ours)} of ours failed; the report has each one's stage, aircc's log and "
            "its IR")}
    return {"verdict": "none", "text": f"nothing failed; upstream's {control['example']} "
                                       "passed too"}


__all__ = ["IR_CHARS", "MODELED_COMPILE_S", "UPSTREAM_ELF_COMPILE_S", "Eta", "NoSteps",
           "Steps", "diagnose", "error_chain", "failed_ir", "quick_choice"]
