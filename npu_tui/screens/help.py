"""Help (`?`, F1): every key the screen beneath takes where its focus is, and what each
glyph and colour on the run screen means (npu_tui/legend.py, the table the widgets draw
from)."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from .. import legend


class Legend(Static):
    """The legend's sections, each glyph in its tone's colour from the theme."""

    COMPONENT_CLASSES: ClassVar[set[str]] = set(legend.TONE_CLASSES)

    def on_mount(self) -> None:
        self.update(self._table())
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.update(self._table()))

    def _table(self) -> Group:
        parts: list[RenderableType] = []
        tones = legend.tone_styles(self)
        for title, items in legend.sections():
            grid = Table.grid(padding=(0, 2))
            grid.add_column(no_wrap=True, min_width=4)
            grid.add_column()
            for g in items:
                grid.add_row(Text(g.glyph, style=tones[g.tone]), Text(g.means))
            parts += [Text(title, style="bold underline"), grid, Text("")]
        return Group(*parts)


class HelpScreen(ModalScreen[None]):
    """Over the screen it explains; `?`, F1 or esc closes it."""

    COMPONENT_CLASSES: ClassVar[set[str]] = set(legend.TONE_CLASSES)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,f1", "dismiss", "Close", id="help.close"),
    ]

    def __init__(self, beneath: Screen[object]) -> None:
        super().__init__()
        self.beneath = beneath

    #: The screen's class by width (app.tcss): wide puts the keys and the legend side by side.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="help"), Horizontal(id="help-body"):
            with Vertical():
                yield Static(Text("Keys here", style="bold"))
                yield Static(id="help-keys")          # in the theme's colours: on_mount
            with Vertical():
                yield Static(Text("What the glyphs and colours mean", style="bold"))
                yield Legend(id="legend")

    def on_mount(self) -> None:
        self.query_one("#help-keys", Static).update(self.keys())
        self.app.theme_changed_signal.subscribe(
            self, lambda _theme: self.query_one("#help-keys", Static).update(self.keys()))

    def keys(self) -> Table:
        """Every binding the screen beneath takes now (shown in its footer or not), the
        focused widget's first, as the footer writes the keys."""
        rows: dict[str, tuple[Binding, list[str]]] = {}
        for active in self.beneath.active_bindings.values():
            b = active.binding          # one Binding per key: "?,f1" is two, with one id
            _, keys = rows.setdefault(b.id or f"{active.node}:{b.action}", (b, []))
            keys.append(self.app.get_key_display(b))
        table = Table.grid(padding=(0, 2))
        table.add_column(no_wrap=True)
        table.add_column()
        table.add_column(style=legend.tone_styles(self)["muted"])
        for b, keys in rows.values():
            table.add_row(Text(" ".join(keys), style="bold"), Text(b.description or b.action),
                          Text(b.id or ""))
        return table
