"""The Agent tab: the agent's transcript up to the cursor, one hanging-indented row per
event, and the run's totals."""

from __future__ import annotations

from functools import partial
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from npu_deploy.events import DeploymentState, Event
from npu_deploy.events.describe import describe, tone_of

from .base import Line, Panel, Part, Tones


class AgentPanel(Panel):
    """The agent's transcript up to the cursor: messages, tool calls, model calls, and the
    run's totals. Its last line is the agent's newest event at the cursor, kept in view."""

    KEEP_END = True

    def show(self, state: DeploymentState, transcript: list[Event]) -> None:
        t = state.totals
        totals = Text.assemble(
            ("agent ", "bold"), f"{state.agent or '?'}  ",
            ("model calls ", "bold"), f"{t.model_calls}  ",
            ("tokens ", "bold"), f"in {t.input_tokens:,} out {t.output_tokens:,} "
                                 f"cache read {t.cache_read_tokens:,} write "
                                 f"{t.cache_write_tokens:,}  ",
            ("cost ", "bold"), f"${t.cost_usd:.4f}  ",
            ("tool calls ", "bold"), f"{t.tool_calls}  ", ("errors ", "bold"), f"{t.errors}")
        tones = self.tones
        rows: list[Part] = [(("agent", e.run_version),
                             partial(transcript_lines, e, tones, self.app.console,
                                     self.rich_style))
                            for e in transcript]
        self.put(totals, *(rows or [Text("nothing yet", style=tones["muted"])]))


TRANSCRIPT_INDENT = 8 + 16           # the version and the type


def transcript_row(e: Event, tones: Tones) -> Text:
    """One event of the transcript: its version and type, then what it says, wrapped under
    itself, in the event's tone as the event stream draws it. Plain text, cheaper to lay
    out than a table row."""
    style = tones[tone_of(e)]
    return Text.assemble((f"{e.run_version:>7} ", tones["muted"]), (f"{e.type:<16}", style),
                         (describe(e, 300), style), no_wrap=False)


def transcript_lines(e: Event, tones: Tones, console: Any, style: Style, width: int
                     ) -> list[Line]:
    return hanging_lines(transcript_row(e, tones), TRANSCRIPT_INDENT, console, style, width)


def hanging_lines(row: Text, indent: int, console: Any, style: Style, width: int
                  ) -> list[Line]:
    """`row` as lines of `width` cells whose wrapped lines start under the text, after a
    prefix of `indent` cells: wrapped and turned into segments without a Rich layout pass,
    over the panel's `style` (its background, and the colour of untoned text)."""
    head, body = row[:indent], row[indent:]
    pad = Text(" " * indent)
    return [Segment.adjust_line_length(list(Segment.apply_style(
                [*(head if i == 0 else pad).render(console), *line.render(console)], style)),
                width, style)
            for i, line in enumerate(body.wrap(console, max(8, width - indent)))]


