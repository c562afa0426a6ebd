"""The replay scrubber: the run's events along one line, with a band per phase, a mark at
every gate failure and decision, and the cursor. A click seeks."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from ..legend import SCRUBBER_CURSOR, SCRUBBER_MARKS, TONE_CLASSES, tone_styles
from ..messages import Seek
from ..timeline import RunTimeline

MARK_PRIORITY = tuple(SCRUBBER_MARKS)


class Scrubber(Widget):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "scrubber--band-even", "scrubber--band-odd", *TONE_CLASSES}

    def __init__(self, timeline: RunTimeline, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.timeline = timeline
        self.cursor = 0
        self._still: tuple[tuple[int, int, int], list[Strip]] | None = None
        self._tones: dict[str, Style] = {}

    def show(self, cursor: int) -> None:
        """Move the cursor: only the cursor's line is drawn again (the bands and marks change
        only when the run grows)."""
        if cursor != self.cursor:
            self.cursor = cursor
            self.refresh(Region(0, 2, self.size.width, 1))
        if self._still is not None and self._still[0] != self._still_key():
            self.refresh()

    def notify_style_update(self) -> None:
        self._still = None            # a theme change
        self._tones = {}
        super().notify_style_update()

    def _column(self, version: int, width: int) -> int:
        head = max(1, self.timeline.head)
        return min(width - 1, max(0, (version - 1) * width // head))

    def _style(self, name: str) -> Style:
        """A band's style, or a tone's (legend.py) with the cursor in bold."""
        if name.startswith("band-"):
            return self.get_component_rich_style(f"scrubber--{name}")
        if not self._tones:
            self._tones = tone_styles(self)
        return self._tones[name] + Style(bold=True) if name == SCRUBBER_CURSOR.tone \
            else self._tones[name]

    def _still_key(self) -> tuple[int, int, int]:
        return (self.size.width, self.timeline.head, len(self.timeline.marks))

    def render_line(self, y: int) -> Strip:
        width = max(8, self.size.width)
        if y == 2:
            return self._cursor_line(width)
        key = self._still_key()
        if self._still is None or self._still[0] != key:
            self._still = (key, [self._bands_line(width), self._marks_line(width)])
        return self._still[1][y] if y < 2 else Strip.blank(width, self.visual_style.rich_style)

    def _strip(self, text: Text, width: int) -> Strip:
        style = self.visual_style.rich_style     # under the tones, which colour text only
        return Strip(text.render(self.app.console)).apply_style(style) \
            .extend_cell_length(width, style)

    def _bands_line(self, width: int) -> Strip:
        bands = Text(" " * width, style=self._style("muted"))
        for band in self.timeline.bands():
            a, b = self._column(band.first, width), self._column(band.last, width)
            style = self._style("band-even" if band.phase % 2 == 0 else "band-odd")
            bands.stylize(style, a, b + 1)
            label = str(band.phase)
            if b + 1 - a >= len(label):
                bands = bands[:a] + Text(label, style=style) + bands[a + len(label):]
        return self._strip(bands, width)

    def _marks_line(self, width: int) -> Strip:
        marks: list[str | None] = [None] * width          # the kind shown at each column
        for m in self.timeline.marks:
            if m.kind not in SCRUBBER_MARKS:
                continue
            col = self._column(m.version, width)
            shown = marks[col]
            if shown is None or MARK_PRIORITY.index(m.kind) < MARK_PRIORITY.index(shown):
                marks[col] = m.kind
        line = Text()
        for kind in marks:
            if kind is None:
                line.append(" ", style=self._style("muted"))
            else:
                mark = SCRUBBER_MARKS[kind]
                line.append(mark.glyph, style=self._style(mark.tone))
        return self._strip(line, width)

    def _cursor_line(self, width: int) -> Strip:
        head = self.timeline.head
        line = Text(" " * width)
        if head:
            col = self._column(self.cursor, width)
            cursor = self._style(SCRUBBER_CURSOR.tone)
            line = Text(" " * col + SCRUBBER_CURSOR.glyph, style=cursor)
            info = f" v{self.cursor}/{head}"
            if col + 1 + len(info) <= width:
                line.append(info, style=self._style("muted"))
            else:
                line = Text(" " * max(0, col - len(info)) + info.strip() + " " +
                            SCRUBBER_CURSOR.glyph, style=cursor)
        return self._strip(line, width)

    def on_click(self, event: events.Click) -> None:
        width = max(8, self.size.width)
        head = self.timeline.head
        if head:
            self.post_message(Seek(1 + event.x * head // width))
