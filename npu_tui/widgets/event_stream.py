"""The event stream: one line per event, drawn with Textual's Line API from pages read out
of SQLite, so a run of 100k events paints as fast as one of a hundred. A tool step's
request and result are one line (expandable); the stream can be narrowed to a kind of
event, searched, and the event under the cursor copied as JSON."""

from __future__ import annotations

import bisect
import json
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input
from textual.worker import get_current_worker

from npu_deploy.events.describe import one_line
from npu_deploy.store import EventStore

from ..legend import STEP_MARKS, TONE_CLASSES, tone_styles
from ..messages import CursorMoved, ShowEvent
from ..stream_view import KINDS, SearchQuery, StepResult, StreamView, find
from ..timeline import EventLine, RunTimeline

#: From this many columns a row shows the whole type name, and from TIMED_ROW its time;
#: narrower, the summary (what identifies the row: the kernel, the gate, the decision) gets
#: that room.
WIDE_ROW = 96
TIMED_ROW = 72
#: The type column, wide and narrow (narrow, a type shows by its short name, SHORT_TYPES)
TYPE_WIDTH = (21, 11)
#: The type column of a narrow row: a word or two, the glyph beside it says the rest
SHORT_TYPES = {
    "run.started": "started", "run.forked": "forked", "run.resumed": "resumed",
    "run.finished": "finished", "phase.entered": "phase in", "phase.exited": "phase out",
    "agent.message": "message", "model.called": "model call", "tool.requested": "tool call",
    "tool.completed": "tool done", "tool.abandoned": "tool lost", "gate.evaluated": "gate",
    "profile.recorded": "profile", "checkpoint.requested": "checkpoint",
    "human.decision": "decision", "debug.proposed": "debug", "skill.loaded": "skill",
    "lesson.recorded": "lesson", "lesson.approved": "lesson ok",
    "experience.recorded": "experience", "error": "error"}


def row_layout(width: int, head: int) -> tuple[int, bool, int]:
    """The version column's width (the run's largest version), whether the time shows, and
    the type column's width, for rows `width` columns wide."""
    return max(3, len(str(head))), width >= TIMED_ROW, TYPE_WIDTH[0 if width >= WIDE_ROW else 1]
#: A run's first frame shows the OPENED_EVENTS events either side of its cursor folded (a
#: few screens), the rest from a worker; a run of up to SHORT_RUN events is folded whole
#: before it (about 2 ms a thousand events; benchmarks/tui_bench.py --latency).
OPENED_EVENTS = 500
SHORT_RUN = 4000
DRAWN_KEPT = 256                      # event lines kept drawn (a few screens)
#: How a folded tool step shows in the glyph column: collapsed, expanded.
STEP_GLYPHS = (STEP_MARKS["folded"].glyph, STEP_MARKS["expanded"].glyph)


def copies_dir() -> Path:
    """Where a copied event is also written: the fallback for terminals without OSC 52."""
    return Path(tempfile.gettempdir()) / "npu-deploy-copies"


def step_label(result: StepResult | None, *, short: bool = False, stopped: bool = False
               ) -> str:
    """The type column of a folded step: how it ended and how long it took (`short`, in a
    narrow row: without the word "tool", which the step's glyph says). A step with no
    result runs, unless nothing writes the run any more (`stopped`): then it was cut."""
    tool = "" if short else "tool "
    if result is None:
        if stopped:
            return f"{tool}{STEP_MARKS['abandoned'].glyph} cut" + ("" if short else " short")
        return f"{tool}{STEP_MARKS['running'].glyph} running"
    if result.type == "tool.abandoned":
        return f"{tool}{STEP_MARKS['abandoned'].glyph} abandoned"
    mark = STEP_MARKS["ok" if result.ok else "failed"].glyph
    d = result.duration_s
    if d is None:
        return f"{tool}{mark}"
    return f"{tool}{mark} {d:.2f} s" if d < 10 else f"{tool}{mark} {d:.1f} s"


class EventStream(ScrollView, can_focus=True):
    """Rows of a `StreamView` over a `RunTimeline`; the cursor is the replay position (an
    event version), shown on the row of that event or, when the row is folded or filtered
    out, the last row before it."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"event-stream--cursor", *TONE_CLASSES}

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Back", show=False, id="stream.up"),
        Binding("down", "move(1)", "Forward", show=False, id="stream.down"),
        Binding("pageup", "move(-20)", show=False, id="stream.pageup"),
        Binding("pagedown", "move(20)", show=False, id="stream.pagedown"),
        Binding("home", "move_to(1)", "First", show=False, id="stream.home"),
        Binding("enter", "details", "Details", id="stream.details"),
        Binding("e", "toggle_step", "Expand step", show=False, id="stream.expand"),
        Binding("v", "cycle_filter", "Filter", id="stream.filter"),
        Binding("c", "copy", "Copy JSON", show=False, id="stream.copy"),
    ]

    def __init__(self, timeline: RunTimeline, *, opened_at: int = 0,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.timeline = timeline
        self.opened_at = opened_at              # where the screen puts the cursor first
        self.view = StreamView.unpaired(timeline.head)
        self.building: str | None = None        # the kind whose view a worker builds
        self.cursor = 0
        self.stopped = False                    # nothing writes the run (crashed, paused)
        self.search_query = SearchQuery("")
        self.searching = False                  # a worker is reading the matches
        self._jump_when_found = False           # enter was pressed while it read
        self._hits: list[int] = []              # versions of events that match the query
        self._searched_upto = 0
        self.matches: list[int] = []            # the rows they show on, oldest first
        self._styles: dict[str, Style] = {}
        # lines drawn lately, as segments (a kept Strip brings seven caches for the collector)
        #: (version, width, digits of the head) -> the row's segments, and its plain row drawn
        self._drawn: OrderedDict[tuple[int, int, int], tuple[list[Segment], Strip]] = OrderedDict()

    def on_mount(self) -> None:
        head, store, run_id = self.timeline.head, self.timeline.store, self.timeline.run_id
        if head <= SHORT_RUN:          # a short run: folded before the first frame
            self.view = StreamView.build(store, run_id, "all", head)
        else:
            # The first frame shows the events around where the screen opens (its first or
            # newest) folded, read from those events alone; the whole view, the same rows,
            # follows from a worker. (A row is one or two events, a step's: two screens'
            # worth of events either side cover whatever the stream scrolls to first.)
            self.view = StreamView.around(store, run_id, head, self.opened_at,
                                          max(OPENED_EVENTS, 2 * self.app.size.height))
            self._build("all", head)
        self.sync_head()
        if len(self.view) > self.app.size.height:
            # More rows than the screen has: the scrollbar shows in the first layout, not in
            # a second one after the first frame (Textual decides it once the stream is sized).
            self.show_vertical_scrollbar = True
            self.vertical_scrollbar.display = True

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size,
                      layout: bool = True) -> bool:
        # Sized in the layout itself, so the first frame has the canvas and the scroll at
        # the cursor (a Resize event comes after that frame, and another layout with it).
        if size.width != self.virtual_size.width:
            self.set_reactive(EventStream.virtual_size, Size(size.width, len(self.view)))
        resized = super()._size_updated(size, virtual_size, container_size, layout)
        if resized:
            self._scroll_to_cursor()
        return resized

    def on_resize(self) -> None:
        # The first layout (and every later one) may come after the cursor was set.
        self.virtual_size = Size(self.size.width, len(self.view))
        self._scroll_to_cursor()

    def notify_style_update(self) -> None:
        self._styles.clear()          # a theme change: read the component styles again
        self._drawn.clear()
        super().notify_style_update()

    def _style(self, name: str) -> Style:
        """A tone's style (legend.py) over the widget's own (its background, and the colour
        of untoned text), so a drawn row needs no style applied after; or "cursor" (the
        whole row, over the tones), or "match" (a background only, over the row)."""
        if not self._styles:
            base = self.visual_style.rich_style
            tones = tone_styles(self)
            self._styles = {**{t: base + style for t, style in tones.items()},
                            "match": tones["match"],
                            "cursor": self.get_component_rich_style("event-stream--cursor")}
        return self._styles[name]

    # --- the model -------------------------------------------------------------------------

    def sync_head(self) -> None:
        """The run grew (or was opened): place its new events and size the canvas."""
        head = self.timeline.head
        changed = self.view.grow(self.timeline.store, self.timeline.run_id, head)
        for version in changed:
            self._forget(version)
        if not self.search_query.empty and not self.searching and head > self._searched_upto:
            self._add_hits(find(self.timeline.store, self.timeline.run_id, self.search_query,
                                self._searched_upto, head), head)
        self.virtual_size = Size(self.size.width, len(self.view))
        self.refresh()

    def set_stopped(self, stopped: bool) -> None:
        """Nothing writes the run (or something does again): its unfinished step is drawn
        as cut short (or running)."""
        if stopped != self.stopped:
            self.stopped = stopped
            self._drawn.clear()
            self.refresh()

    def set_cursor(self, version: int, *, announce: bool = False) -> None:
        version = max(1 if self.timeline.head else 0, min(version, self.timeline.head))
        if version == self.cursor:
            return
        old, self.cursor = self.cursor, version
        self._refresh_version(old)
        self._refresh_version(version)
        self._scroll_to_cursor()
        self._show_status()
        if announce:
            self.post_message(CursorMoved(version))

    @property
    def cursor_row(self) -> int:
        return self.view.row_of(self.cursor)

    @property
    def selected(self) -> int:
        """The version of the row under the cursor (0 when the stream is empty)."""
        return self.view.rows[self.cursor_row] if len(self.view) else 0

    def _refresh_version(self, version: int) -> None:
        y = self.view.row_of(version) - self.scroll_offset.y
        if 0 <= y < self.size.height:
            self.refresh_line(y)

    def _scroll_to_cursor(self) -> None:
        top, height = self.scroll_offset.y, max(1, self.size.height)
        y = self.cursor_row
        if y < top:
            self.scroll_to(y=y, animate=False, immediate=True)
        elif y >= top + height:
            self.scroll_to(y=y - height + 1, animate=False, immediate=True)

    def _forget(self, version: int) -> None:
        for key in [k for k in self._drawn if k[0] == version]:
            del self._drawn[key]

    def _replace_view(self, view: StreamView) -> None:
        # The cursor keeps its line on screen: where the new view lands must not depend on
        # whether the old one was scrolled yet (the folded view is built by a worker).
        at = self.cursor_row - self.scroll_offset.y
        self.view = view
        self._drawn.clear()
        self.matches = self._rows_of(self._hits)
        self.virtual_size = Size(self.size.width, len(view))
        if 0 <= at < self.size.height:
            self.scroll_to(y=max(0, self.cursor_row - at), animate=False, immediate=True)
        else:
            self._scroll_to_cursor()
        self._show_status()
        self.refresh()

    # --- kinds -----------------------------------------------------------------------------

    def show_kind(self, kind: str) -> None:
        """Narrow the stream to one kind of event ("all" for every one); the view is built
        in a worker and replaces the current one when ready."""
        self.building = kind
        self._show_status()
        self._build(kind, self.timeline.head)

    @work(thread=True, exclusive=True, group="stream-view")
    def _build(self, kind: str, head: int) -> None:
        worker = get_current_worker()
        store = EventStore.open(self.timeline.store.path, readonly=True)
        try:
            view = StreamView.build(store, self.timeline.run_id, kind, head)
        finally:
            store.close()
        if not worker.is_cancelled:
            self.app.call_from_thread(self._built, view)

    def _built(self, view: StreamView) -> None:
        if self.view.partial and self.building is None and view.kind == self.view.kind:
            for request in self.view.expanded:         # the whole view of a `tail` one
                view.toggle(request)
        elif view.kind != self.building:
            return
        self.building = None
        view.grow(self.timeline.store, self.timeline.run_id, self.timeline.head)
        self._replace_view(view)

    def action_cycle_filter(self) -> None:
        kinds = list(KINDS)
        current = self.building or self.view.kind
        self.show_kind(kinds[(kinds.index(current) + 1) % len(kinds)])

    # --- search ----------------------------------------------------------------------------

    def search(self, typed: str) -> None:
        """Look for `typed` (a plain substring, `phase:N` words) in a worker."""
        self.search_query = SearchQuery.parse(typed)
        self._hits, self.matches, self._searched_upto = [], [], 0
        self.searching = not self.search_query.empty
        self._jump_when_found = False
        self._show_status()
        self.refresh()
        if self.searching:
            self._find(self.search_query, self.timeline.head)

    @work(thread=True, exclusive=True, group="stream-search")
    def _find(self, query: SearchQuery, head: int) -> None:
        worker = get_current_worker()
        store = EventStore.open(self.timeline.store.path, readonly=True)
        try:
            hits = find(store, self.timeline.run_id, query, 0, head)
        finally:
            store.close()
        if not worker.is_cancelled:
            self.app.call_from_thread(self._found, query, hits, head)

    def _found(self, query: SearchQuery, hits: list[int], upto: int) -> None:
        if query != self.search_query:
            return
        self.searching = False
        self._add_hits(hits, upto)
        self.sync_head()                 # what arrived while the worker read
        if self._jump_when_found:
            self._jump_when_found = False
            self.next_match(1)

    def _add_hits(self, hits: list[int], upto: int) -> None:
        self._hits.extend(hits)
        self._searched_upto = upto
        self.matches = self._rows_of(self._hits)
        self._drawn.clear()
        self._show_status()
        self.refresh()

    def _rows_of(self, hits: list[int]) -> list[int]:
        rows = {self.view.shown_as(v) for v in hits}
        rows.discard(None)
        return sorted(r for r in rows if r is not None)

    def next_match(self, direction: int) -> bool:
        """Move the cursor to the next (or previous) match, round the end; False if none."""
        if self.searching:
            self._jump_when_found = direction > 0
            return False
        if not self.matches:
            if not self.search_query.empty:
                self.notify(f"no event matches {self.query_text()!r}", severity="warning")
            return False
        here = self.selected
        if direction > 0:
            i = bisect.bisect_right(self.matches, here)
            target = self.matches[i % len(self.matches)]
        else:
            i = bisect.bisect_left(self.matches, here) - 1
            target = self.matches[i]           # -1: round to the last
        self.set_cursor(target, announce=True)
        self._show_status()
        return True

    def clear_search(self) -> None:
        self.search("")

    def query_text(self) -> str:
        return " ".join([*(f"phase:{k}" for k in self.search_query.phases), self.search_query.text])

    # --- the status line -----------------------------------------------------------------

    def status(self) -> str:
        """What the stream shows: its kind, and the search with the match under the cursor."""
        parts = []
        kind = self.building or self.view.kind
        if kind != "all" or self.building:
            parts.append(f"filter {kind}" + (" (reading…)" if self.building else ""))
        if not self.search_query.empty:
            n = len(self.matches)
            if self.searching:
                found = "searching…"
            elif n and self.selected in self.matches:
                found = f"match {bisect.bisect_left(self.matches, self.selected) + 1} of {n}"
            else:
                found = f"{n} match{'es' if n != 1 else ''}"
            parts.append(f"/{self.query_text()}  {found}")
        return "  ·  ".join(parts)

    def _show_status(self) -> None:
        self.border_subtitle = Text(one_line(self.status(), 120))    # the query is data

    # --- actions ---------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        if not len(self.view):
            return
        row = self.cursor_row
        if delta < 0 and self.view.rows[row] != self.cursor:
            row += 1                  # the cursor is past this row's event: it is one back
        row = max(0, min(len(self.view) - 1, row + delta))
        self.set_cursor(self.view.rows[row], announce=True)

    def action_move_to(self, version: int) -> None:
        self.set_cursor(version, announce=True)

    def action_details(self) -> None:
        if self.cursor:
            self.post_message(ShowEvent(self.selected))

    def action_toggle_step(self) -> None:
        """Show the tool step under the cursor as its two events, or fold it back."""
        request = self.selected
        if request in self.view.request_of:         # on the result row of an open step
            request = self.view.request_of[request]
        if not self.view.toggle(request):
            self.notify("not a tool step with a result", severity="warning", timeout=2)
            return
        self._forget(request)
        self.matches = self._rows_of(self._hits)
        self.virtual_size = Size(self.size.width, len(self.view))
        self.set_cursor(request, announce=self.cursor != request)
        self.refresh()

    def copied_json(self) -> str:
        """The JSON of the row under the cursor, as `show --json` prints events: one event,
        or a folded step's request and result."""
        version = self.selected
        versions = [version]
        result = self.view.results.get(version)
        if result is not None and version not in self.view.expanded:
            versions.append(result.version)
        events = [e.to_dict() for v in versions if (e := self.timeline.event(v)) is not None]
        value = events[0] if len(events) == 1 else events
        return json.dumps(value, indent=2, sort_keys=True, default=str)

    def action_copy(self) -> None:
        if not self.cursor:
            return
        text = self.copied_json()
        self.app.copy_to_clipboard(text)      # OSC 52: the terminal's clipboard, if it lets us
        folder = copies_dir()
        path = folder / f"{self.timeline.run_id}-v{self.selected}.json"
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            path.write_text(text + "\n")
        except OSError as e:
            self.notify(f"copied event {self.selected} (OSC 52); could not write {path}: {e}",
                        severity="warning")
            return
        self.notify(f"copied event {self.selected} as JSON (OSC 52) and wrote it to {path}",
                    timeout=6)

    def on_click(self, event: object) -> None:
        y = getattr(event, "y", None)
        row = self.scroll_offset.y + y if isinstance(y, int) else -1
        if 0 <= row < len(self.view):
            self.set_cursor(self.view.rows[row], announce=True)

    # --- drawing ---------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        row = self.scroll_offset.y + y
        width = self.size.width
        version = self.view.rows[row] if row < len(self.view) else 0
        base = self.visual_style.rich_style
        key = (version, width, len(str(self.timeline.head)))
        drawn = self._drawn.get(key)
        if drawn is None:
            line = self.timeline.line(version)
            if line is None:
                return Strip.blank(width, base)
            segments = self._segments(line)       # in the widget's style and the tones
            plain = Strip(segments).crop_extend(0, width, base)
            drawn = self._drawn[key] = (segments, plain)
            if len(self._drawn) > DRAWN_KEPT:
                self._drawn.popitem(last=False)
        segments, plain = drawn
        if row == self.cursor_row:
            strip = Strip(Segment.apply_style(segments, post_style=self._style("cursor")))
        elif self.matches and self._is_match(version):
            strip = Strip(Segment.apply_style(segments, post_style=self._style("match")))
        else:
            return plain
        return strip.crop_extend(0, width, base)

    def _is_match(self, version: int) -> bool:
        i = bisect.bisect_left(self.matches, version)
        return i < len(self.matches) and self.matches[i] == version

    def _segments(self, line: EventLine) -> list[Segment]:
        where = "" if line.phase is None else f"p{line.phase}.{line.attempt or 0}"
        tone, glyph, kind = self._style(line.tone), line.glyph, line.type
        width = self.scrollable_content_region.width
        digits, timed, type_w = row_layout(width, self.timeline.head)
        short = type_w < TYPE_WIDTH[0]
        if short:
            kind = SHORT_TYPES.get(kind, kind)
        if line.type == "tool.requested" and self.view.paired:
            result = self.view.results.get(line.version)
            kind = step_label(result, short=short, stopped=self.stopped)
            glyph = STEP_GLYPHS[line.version in self.view.expanded] if result else \
                STEP_MARKS["abandoned" if self.stopped else "running"].glyph
            if (result is None and self.stopped) or \
                    (result is not None and not (result.ok and result.type == "tool.completed")):
                tone = self._style("fail")
        if len(kind) >= type_w:
            kind = kind[:type_w - 2] + "…"
        prefix = digits + 1 + (9 if timed else 0) + 2 + 6 + type_w
        room = max(8, width - prefix)
        summary = line.summary if len(line.summary) <= room else line.summary[:room - 1] + "…"
        return [
            Segment(f"{line.version:>{digits}} ", self._style("muted")),
            *([Segment(f"{line.ts[11:19]} ", self._style("muted"))] if timed else []),
            Segment(f"{glyph} ", tone),
            Segment(f"{where:<6}", self._style("muted")),
            Segment(f"{kind:<{type_w}}", tone),
            Segment(summary, self._style("")),
        ]


class SearchBar(Input):
    """The stream's search field: `enter` goes to the next match, `shift+enter` to the
    previous one, `escape` closes it (the matches stay; `escape` in the stream clears them)."""


class EventPane(Vertical):
    """The event stream with its search field above it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "open_search", "Search", id="stream.search"),
        Binding("n", "next_match(1)", "Next match", show=False, id="stream.next_match"),
        Binding("N", "next_match(-1)", "Prev match", show=False, id="stream.prev_match"),
        Binding("shift+enter", "next_match(-1)", "Prev match", show=False,
                id="search.previous"),
        Binding("escape", "close_search", "Close search", show=False, id="stream.close_search"),
    ]

    def __init__(self, timeline: RunTimeline, *, opened_at: int = 0,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.timeline = timeline
        self.opened_at = opened_at

    def compose(self) -> ComposeResult:
        yield SearchBar(placeholder="search: type, text in payloads, phase:N  (enter next, "
                        "shift+enter previous, esc close)", id="stream-search")
        yield EventStream(self.timeline, opened_at=self.opened_at, id="stream")

    @property
    def stream(self) -> EventStream:
        return self.query_one(EventStream)

    @property
    def bar(self) -> SearchBar:
        return self.query_one(SearchBar)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # n, N and escape belong to the run screen (next decision, back to the runs) unless
        # a search is open or set: then the key falls through to them.
        if action == "next_match":
            return not self.stream.search_query.empty
        if action == "close_search":
            return self.bar.display or not self.stream.search_query.empty
        return True

    def action_open_search(self) -> None:
        self.bar.display = True
        self.bar.focus()

    def action_next_match(self, direction: int) -> None:
        # From the stream's own loop: a message made while this pane handles one names the
        # pane its sender, and Textual stops its bubbling here, short of the screen.
        self.stream.call_later(self.stream.next_match, direction)

    def action_close_search(self) -> None:
        if self.bar.display:
            self.bar.display = False
            self.stream.focus()
        else:
            self.bar.value = ""
            self.stream.clear_search()

    @on(Input.Changed, "#stream-search")
    def _typed(self, event: Input.Changed) -> None:
        self.stream.search(event.value)

    @on(Input.Submitted, "#stream-search")
    def _submitted(self, event: Input.Submitted) -> None:
        self.action_next_match(1)
