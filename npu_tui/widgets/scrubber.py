"""The replay scrubber: the run's events along one line, with a band per phase, a mark at
every gate failure and decision, and the cursor. A click seeks."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events
from textual.widget import Widget

from ..messages import Seek
from ..timeline import RunTimeline

MARK_GLYPH = {"gate_fail": "✗", "decision": "◆", "checkpoint": "?", "debug": "⚑",
              "finished": "■", "error": "!"}
MARK_PRIORITY = ("gate_fail", "error", "decision", "debug", "checkpoint", "finished")


class Scrubber(Widget):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "scrubber--band-even", "scrubber--band-odd", "scrubber--fail", "scrubber--decision",
        "scrubber--cursor", "scrubber--muted"}

    def __init__(self, timeline: RunTimeline, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.timeline = timeline
        self.cursor = 0

    def show(self, cursor: int) -> None:
        self.cursor = cursor
        self.refresh()

    def _column(self, version: int, width: int) -> int:
        head = max(1, self.timeline.head)
        return min(width - 1, max(0, (version - 1) * width // head))

    def render(self) -> Text:
        width = max(8, self.size.width)
        head = self.timeline.head
        style = {n: self.get_component_rich_style(f"scrubber--{n}")
                 for n in ("band-even", "band-odd", "fail", "decision", "cursor", "muted")}
        bands = Text(" " * width, style=style["muted"])
        for band in self.timeline.bands():
            a, b = self._column(band.first, width), self._column(band.last, width)
            name = "band-even" if band.phase % 2 == 0 else "band-odd"
            bands.stylize(style[name], a, b + 1)
            label = str(band.phase)
            if b + 1 - a >= len(label):
                bands = bands[:a] + Text(label, style=style[name]) + bands[a + len(label):]
        marks = [" "] * width
        rank = [len(MARK_PRIORITY)] * width
        for m in self.timeline.marks:
            if m.kind not in MARK_GLYPH:
                continue
            col, r = self._column(m.version, width), MARK_PRIORITY.index(m.kind)
            if r < rank[col]:
                marks[col], rank[col] = MARK_GLYPH[m.kind], r
        mark_line = Text()
        for ch in marks:
            tone = "fail" if ch in "✗!" else "decision" if ch != " " else "muted"
            mark_line.append(ch, style=style[tone])
        cursor_line = Text(" " * width)
        if head:
            col = self._column(self.cursor, width)
            cursor_line = Text(" " * col + "▲", style=style["cursor"])
            info = f" v{self.cursor}/{head}"
            if col + 1 + len(info) <= width:
                cursor_line.append(info, style=style["muted"])
            else:
                cursor_line = Text(" " * max(0, col - len(info)) + info.strip() + " ▲",
                                   style=style["cursor"])
        return Text("\n").join([bands, mark_line, cursor_line])

    def on_click(self, event: events.Click) -> None:
        width = max(8, self.size.width)
        head = self.timeline.head
        if head:
            self.post_message(Seek(1 + event.x * head // width))
