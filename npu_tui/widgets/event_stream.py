"""The event stream: one line per event, drawn with Textual's Line API from pages read out
of SQLite, so a run of 100k events paints as fast as one of a hundred."""

from __future__ import annotations

from collections import OrderedDict
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from npu_deploy.events.describe import TONES

from ..messages import CursorMoved, ShowEvent
from ..timeline import EventLine, RunTimeline

PREFIX_WIDTH = 8 + 9 + 2 + 6 + 21     # version, time, glyph, phase.attempt, type
DRAWN_KEPT = 256                      # event lines kept drawn (a few screens)


class EventStream(ScrollView, can_focus=True):
    """Lines of a `RunTimeline`; the cursor is the replay position (an event version)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "event-stream--cursor", "event-stream--version", "event-stream--time",
        *(f"event-stream--{t}" for t in TONES)}

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Back", show=False, id="stream.up"),
        Binding("down", "move(1)", "Forward", show=False, id="stream.down"),
        Binding("pageup", "move(-20)", show=False, id="stream.pageup"),
        Binding("pagedown", "move(20)", show=False, id="stream.pagedown"),
        Binding("home", "move_to(1)", "First", show=False, id="stream.home"),
        Binding("enter", "details", "Details", id="stream.details"),
    ]

    def __init__(self, timeline: RunTimeline, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.timeline = timeline
        self.cursor = 0
        self._styles: dict[str, Style] = {}
        # lines drawn lately, as segments (a kept Strip brings seven caches for the collector)
        self._drawn: OrderedDict[tuple[int, int], list[Segment]] = OrderedDict()

    def on_mount(self) -> None:
        self.sync_head()

    def on_resize(self) -> None:
        # The first layout (and every later one) may come after the cursor was set.
        self.virtual_size = Size(self.size.width, self.timeline.head)
        self._scroll_to_cursor()

    def notify_style_update(self) -> None:
        self._styles.clear()          # a theme change: read the component styles again
        self._drawn.clear()
        super().notify_style_update()

    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(f"event-stream--{name}")
        return style

    # --- the model -------------------------------------------------------------------------

    def sync_head(self) -> None:
        """The run grew (or was opened): size the virtual canvas to its events."""
        self.virtual_size = Size(self.size.width, self.timeline.head)
        self.refresh()

    def set_cursor(self, version: int, *, announce: bool = False) -> None:
        version = max(1 if self.timeline.head else 0, min(version, self.timeline.head))
        if version == self.cursor:
            return
        old, self.cursor = self.cursor, version
        self._refresh_version(old)
        self._refresh_version(version)
        self._scroll_to_cursor()
        if announce:
            self.post_message(CursorMoved(version))

    def _refresh_version(self, version: int) -> None:
        y = version - 1 - self.scroll_offset.y
        if 0 <= y < self.size.height:
            self.refresh_line(y)

    def _scroll_to_cursor(self) -> None:
        top, height = self.scroll_offset.y, max(1, self.size.height)
        y = self.cursor - 1
        if y < top:
            self.scroll_to(y=y, animate=False, immediate=True)
        elif y >= top + height:
            self.scroll_to(y=y - height + 1, animate=False, immediate=True)

    # --- actions ---------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        self.set_cursor(self.cursor + delta, announce=True)

    def action_move_to(self, version: int) -> None:
        self.set_cursor(version, announce=True)

    def action_details(self) -> None:
        if self.cursor:
            self.post_message(ShowEvent(self.cursor))

    def on_click(self, event: object) -> None:
        y = getattr(event, "y", None)
        if isinstance(y, int):
            self.set_cursor(self.scroll_offset.y + y + 1, announce=True)

    # --- drawing ---------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        version = self.scroll_offset.y + y + 1
        width = self.size.width
        segments = self._drawn.get((version, width))
        if segments is None:
            line = self.timeline.line(version)
            if line is None:
                return Strip.blank(width, self.visual_style.rich_style)
            segments = self._drawn[(version, width)] = self._segments(line)
            if len(self._drawn) > DRAWN_KEPT:
                self._drawn.popitem(last=False)
        strip = Strip(segments)
        if version == self.cursor:
            strip = strip.apply_style(self._style("cursor"))
        return strip.crop_extend(self.scroll_offset.x, self.scroll_offset.x + width,
                                 self.visual_style.rich_style)

    def _segments(self, line: EventLine) -> list[Segment]:
        where = "" if line.phase is None else f"p{line.phase}.{line.attempt or 0}"
        tone = self._style(line.tone)
        room = max(8, self.scrollable_content_region.width - PREFIX_WIDTH)
        summary = line.summary if len(line.summary) <= room else line.summary[:room - 1] + "…"
        return [
            Segment(f"{line.version:>7} ", self._style("version")),
            Segment(f"{line.ts[11:19]} ", self._style("time")),
            Segment(f"{line.glyph} ", tone),
            Segment(f"{where:<6}", self._style("muted")),
            Segment(f"{line.type:<21}", tone),
            Segment(summary),
        ]
