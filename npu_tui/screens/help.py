"""Help (`?`, F1): every key the screen beneath takes where its focus is, and what each
glyph and colour on the run screen means (npu_tui/legend.py, the table the widgets draw
from)."""

from __future__ import annotations

import re
from collections.abc import Iterable
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
from ..settings import keymap_path


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
                yield Static(Text("Keys", style="bold"))
                yield Static(id="help-keys")          # in the theme's colours: on_mount
            with Vertical():
                yield Static(Text("What the glyphs and colours mean", style="bold"))
                yield Legend(id="legend")

    def on_mount(self) -> None:
        self.query_one("#help-keys", Static).update(self.keys())
        self.app.theme_changed_signal.subscribe(
            self, lambda _theme: self.query_one("#help-keys", Static).update(self.keys()))

    def keys(self) -> Group:
        """Every binding the screen beneath takes now (shown in its footer or not): first
        the screen's own, then those of the part that has the focus, then the app's; the
        keys every Textual widget has (scrolling, moving the focus) last, dim. Binding ids
        are for keymap.toml: the note under the keys says where they are listed."""
        sections: dict[str, dict[str, tuple[Binding, list[str]]]] = {
            title: {} for title in (*SECTIONS, GENERIC)}
        for active in self.beneath.active_bindings.values():
            b, node = active.binding, active.node      # "?,f1" is two, with one id
            section = (GENERIC if not ours(node, b) else SECTIONS[0] if node is self.beneath
                       else SECTIONS[2] if node is self.app else SECTIONS[1])
            _, keys = sections[section].setdefault(b.id or f"{node}:{b.action}", (b, []))
            keys.append(self.app.get_key_display(b))
        tones = legend.tone_styles(self)
        parts: list[RenderableType] = []
        for title, rows in sections.items():
            if not rows:
                continue
            dim = tones["muted"] if title == GENERIC else ""
            grid = Table.grid(padding=(0, 2))
            grid.add_column(no_wrap=True, min_width=6)
            grid.add_column()
            for shown, what in merged(rows.values()):
                grid.add_row(Text(shown, style=dim or "bold"), Text(what, style=dim))
            parts += [Text(title, style="bold underline"), grid, Text("")]
        parts.append(Text(f"Keys can be changed in {keymap_path()} (each key's name is in "
                          "docs/tui.md, Keys).", style=tones["muted"]))
        return Group(*parts)


#: The sections of help's keys, in order: the screen's, the focused part's, the app's.
SECTIONS = ("This screen", "Where the focus is", "Everywhere")
GENERIC = "Also (every Textual app)"
OUR_MODULES = ("npu_tui.", "npu_deploy.")


def ours(node: object, binding: Binding) -> bool:
    """Whether one of our classes declares `binding` (a Textual class's own, such as a
    table's cursor keys or the focus keys, is not)."""
    for cls in type(node).__mro__:
        if not cls.__module__.startswith(OUR_MODULES):
            continue
        for b in cls.__dict__.get("BINDINGS", ()):
            key, action = (b.key, b.action) if isinstance(b, Binding) else (b[0], b[1])
            if action == binding.action and binding.key in key.split(","):
                return True
    return False


def merged(rows: Iterable[tuple[Binding, list[str]]]) -> list[tuple[str, str]]:
    """(keys, what they do) per row; the rows of one action that differ only by a number
    (pick 1 ... pick 9) as one: "1-9", "Pick N"."""
    out: list[tuple[str, str]] = []
    numbered: dict[str, list[str]] = {}
    for b, keys in rows:
        what = b.description or b.action.replace("_", " ")
        base = re.sub(r"\d+$", "N", what)
        if base != what and all(k.isdigit() for k in keys):
            if base not in numbered:
                numbered[base] = []
                out.append(("", base))
            numbered[base] += keys
            continue
        out.append((" ".join(keys), what))
    return [(f"{min(numbered[w])}-{max(numbered[w])}" if w in numbered else k, w)
            for k, w in out]
