"""The base of the Line-API widgets (the event stream, the tab panels)."""

from __future__ import annotations

from rich.style import Style
from textual.geometry import Region
from textual.scroll_view import ScrollView
from textual.strip import Strip


class LineView(ScrollView):
    """A ScrollView drawn line by line. `rich_style` walks the widget's ancestors on every
    read; `line_style` is read once per render pass (`render_lines`), not once per line,
    which is a few milliseconds of each frame after a seek (benchmarks/tui_bench.py)."""

    _pass_style: Style | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pass_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._pass_style = None

    @property
    def line_style(self) -> Style:
        """The widget's own style, for blank lines and padding."""
        return self._pass_style if self._pass_style is not None else self.rich_style
