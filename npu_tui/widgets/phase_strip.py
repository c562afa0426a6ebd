"""The phase strip: phases 0-7 with their state, attempts and own time (the wall less a
person's waiting and pauses); its tooltip splits each phase's time."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from npu_deploy.events import PHASE_NAMES, DeploymentState
from npu_deploy.events.describe import time_split

from ..legend import TONE_CLASSES, phase_glyph, tone_styles

SHORT = ("oracle", "kernels", "block", "model", "prefill", "decode", "finalize", "evaluator")


def phase_cells(state: DeploymentState) -> list[tuple[str, str, str]]:
    """Per phase: its label, its detail line, and a style name."""
    out = []
    for ph in state.phases:
        glyph = phase_glyph(ph.status)
        style = glyph.tone
        if state.current_phase == ph.phase and style == "muted":
            style = "active"
        own = ph.work_time_s          # a person's reading time never makes a phase look slow
        detail = f"{glyph.glyph} a{ph.attempts}" + (f" {own:.1f}s" if own else "")
        out.append((f"{ph.phase} {SHORT[ph.phase]}", detail if ph.attempts else "·", style))
    return out


class PhaseStrip(Static):
    """Receives a folded state; draws one cell per phase."""

    DEFAULT_CLASSES = "phase-strip"

    _shown: tuple[object, ...] = ()

    def notify_style_update(self) -> None:
        self._shown = ()              # a theme change: draw with the new colours next time
        super().notify_style_update()

    def show(self, state: DeploymentState) -> None:
        cells = phase_cells(state)
        if (cells, state.current_phase) == self._shown:
            return                    # a seek within the same phase: nothing to draw
        self._shown = (cells, state.current_phase)
        table = Table.grid(expand=True, padding=(0, 1))
        for _ in cells:
            table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        styles = tone_styles(self)
        table.add_row(*(Text(label, style=styles[s] + _bold(state, i))
                        for i, (label, _, s) in enumerate(cells)))
        table.add_row(*(Text(detail, style=styles[s]) for _, detail, s in cells))
        self.update(table, layout=False)     # two lines, always (app.tcss)
        self.tooltip = "\n".join(
            f"{i} {n}" + (f" — {time_split(*state.phases[i].times)}"
                          if state.phases[i].attempts else "")
            for i, n in enumerate(PHASE_NAMES))

    COMPONENT_CLASSES: ClassVar[set[str]] = set(TONE_CLASSES)


def _bold(state: DeploymentState, phase: int) -> Style:
    return Style(bold=True, underline=True) if state.current_phase == phase else Style()
