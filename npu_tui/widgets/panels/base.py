"""What every tab of the run screen is drawn with: `Panel`, a scrolling body laid out once
per width with the Line API, the parts it keeps, the sparklines, and where a profile's
figures come from."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...legend import SPARK_BARS, TONE_CLASSES, TREND_MARKS, tone_styles

LAYER_PREFIX = re.compile(r"^L\d+\.")
SOURCE_LABEL = {"modeled": "MODELED (performance model, not measured)",
                "measured-npu": "MEASURED on the NPU", "measured-cpu": "MEASURED on the CPU"}


def source_label(profile: dict[str, Any]) -> str:
    """Where a recorded profile's figures come from; measured ones with their runs."""
    label = SOURCE_LABEL.get(profile["source"], profile["source"])
    runs = profile.get("runs")
    if not runs:
        return label
    return (f"{label}: median of {len(runs)} runs, {min(runs) * 1e3:.2f}-"
            f"{max(runs) * 1e3:.2f} ms")


#: A laid-out line, as segments: kept lines are not Strips, each of which carries seven
#: caches of its own that the garbage collector would walk (tui_bench.py, gen-2 pauses).
Line = list[Segment]
#: What `Panel.put` shows: a renderable, or (key, build) whose lines are kept under the key;
#: build(width) returns a renderable or the lines themselves.
Part = RenderableType | tuple[Hashable, Callable[[int], RenderableType | list[Line]]]
#: The tones' styles (legend.py), as `tone_styles` reads them from a widget's theme.
Tones = dict[str, Style]


def any_width(build: Callable[[], RenderableType]) -> Callable[[int], RenderableType]:
    """A part's build for a renderable that Rich lays out at whatever width it is given."""
    return lambda _width: build()


class Panel(ScrollView, can_focus=True):
    """A scrolling tab body drawn with the Line API: what `put` receives is laid out by Rich
    once, at the panel's width, and kept as strips, so a seek costs one Rich render and
    never a relayout of the screen (a Static in an auto-height container costs both)."""

    CACHED_PARTS = 96
    #: A sparkline's lowest and highest values are drawn in these colours (app.tcss).
    COMPONENT_CLASSES: ClassVar[set[str]] = {"panel--spark-low", "panel--spark-high",
                                             *TONE_CLASSES}
    #: Whether a new `put` scrolls to the last line (the Agent tab: the cursor's event).
    KEEP_END: ClassVar[bool] = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._parts: tuple[Part, ...] = ()
        self._lines: list[Line] = []
        self._width = 0
        self._cache: OrderedDict[tuple[Hashable, int], list[Line]] = OrderedDict()
        self._tones: Tones | None = None

    def put(self, *parts: Part) -> None:
        """Show `parts`, one below the other. A part is a renderable, laid out afresh, or
        `(key, build)`: `build(width)` is called and its lines kept under `key` (a part whose
        content follows from the key, such as an event's version or a blob's digest), so a
        seek that shows it again costs no Rich layout."""
        self._parts = parts
        self._lay_out()

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size,
                      layout: bool = True) -> bool:
        # Laid out at its width in the layout itself, so the first frame that shows the
        # panel has its lines (the Resize event comes after that frame).
        resized = super()._size_updated(size, virtual_size, container_size, layout)
        if self.scrollable_content_region.width != self._width:
            self._lay_out()
        return resized

    def on_resize(self) -> None:
        if self.scrollable_content_region.width != self._width:
            self._lay_out()

    def notify_style_update(self) -> None:
        self._cache.clear()           # a theme change: the kept lines have the old colours
        self._tones = None
        super().notify_style_update()

    def _lay_out(self) -> None:
        self._width = width = self.scrollable_content_region.width
        if width <= 0:               # not shown yet: laid out on the first resize
            self._lines = []
            return
        lines: list[Line] = []
        for part in self._parts:
            if isinstance(part, tuple):
                key, build = part
                kept = self._cache.get((key, width))
                if kept is None:
                    built = build(width)
                    kept = self._cache[(key, width)] = built if isinstance(built, list) \
                        else self._lines_of(built, width)
                    if len(self._cache) > self.CACHED_PARTS:
                        self._cache.popitem(last=False)
                else:
                    self._cache.move_to_end((key, width))
                lines.extend(kept)
            else:
                lines.extend(self._lines_of(part, width))
        self._lines = lines
        self._set_virtual_height(len(lines))
        if self.KEEP_END and self.scroll_y < self.max_scroll_y:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        self.refresh()

    @property
    def tones(self) -> Tones:
        """The tones in the theme's colours now (read once per style: a seek shows a panel
        again); the screen shows its panels again after a theme change (RunScreen,
        `theme_changed_signal`)."""
        if self._tones is None:
            self._tones = tone_styles(self)
        return self._tones

    def spark_colours(self) -> SparkColours:
        """The theme's colours for sparklines, over the panel's background (as Textual's
        Sparkline widget takes them)."""
        _, base = self.background_colors
        low, high = (base + self.get_component_styles(f"panel--spark-{end}").color
                     for end in ("low", "high"))
        return SparkColours(low, high, self.tones["muted"])

    def _lines_of(self, renderable: RenderableType, width: int) -> list[Line]:
        console = self.app.console
        return list(console.render_lines(
            renderable, console.options.update(width=width, height=None),
            style=self.rich_style, pad=True))

    def _set_virtual_height(self, height: int) -> None:
        """The canvas's new height without a relayout of the screen (what assigning
        `virtual_size` costs): the scrollbar is always shown (app.tcss), so only its thumb
        changes, and the scroll offset is kept inside the new canvas."""
        self.set_reactive(Panel.virtual_size, Size(self._width, height))
        self.vertical_scrollbar.window_virtual_size = height
        if self.scroll_y > self.max_scroll_y:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def render_line(self, y: int) -> Strip:
        i, width = self.scroll_offset.y + y, self.size.width
        style = self.visual_style.rich_style     # Textual's cached style: no ancestor walk
        if i >= len(self._lines):
            return Strip.blank(width, style)
        return Strip(self._lines[i], self._width).crop_extend(0, width, style)

    @property
    def text(self) -> str:
        """What the panel shows, as plain lines."""
        return "\n".join("".join(seg.text for seg in line).rstrip() for line in self._lines)


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


@dataclass(frozen=True, slots=True)
class SparkColours:
    """A sparkline's colours (Textual colours), its lowest value's and its highest's, and
    the style of a missing value's mark."""

    low: Any
    high: Any
    muted: Style


def sparkline(values: Sequence[float | None], colours: SparkColours | None = None) -> Text:
    """`values` as Textual's Sparkline draws them, one block each on a linear scale from
    the lowest to the highest (all equal: the lowest block), shaded from the low colour to
    the high; a missing value is a dash (legend.py TREND_MARKS)."""
    known = [v for v in values if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 0.0)
    extent = hi - lo or 1.0
    text = Text(no_wrap=True)
    for v in values:
        if v is None:
            text.append(TREND_MARKS["missing"].glyph, colours.muted if colours else "dim")
            continue
        ratio = (v - lo) / extent
        style = Style(color=colours.low.blend(colours.high, ratio).rich_color) if colours \
            else ""
        text.append(SPARK_BARS[int(ratio * (len(SPARK_BARS) - 1))], style)
    return text

