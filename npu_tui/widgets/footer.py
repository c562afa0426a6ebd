"""The run screen's footer: Textual's `Footer`, kept in step with the focus in place.

Textual's footer fills itself only after the screen's first frame, and composes itself anew
whenever the screen says its bindings may have changed, which a change of focus says twice:
every key is unmounted and mounted again, and the whole screen laid out twice more. On the
run screen that was most of what a Tab press cost (three more frames, about 70 ms on the CPU
of the 2-core development machine; benchmarks/tui_bench.py --latency), and opening a run
drew its footer in a frame of its own.

This footer composes its keys with the screen, with a few spare ones hidden. When the keys
it would show change, it relabels its key widgets where they stand and hides those it does
not need, at once, so that the frame that shows the new focus shows its keys. It composes
anew, as Textual's does, only when it needs more keys than it has, or when a binding belongs
to a group (which Textual lays out in a group of its own)."""

from __future__ import annotations

from itertools import zip_longest
from typing import NamedTuple

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

# Textual exports FooterKey from no public module (textual==8.2.8, pyproject.toml).
from textual.widgets._footer import FooterKey

#: Hidden keys beyond those shown at first, for the keys a focused widget adds (the event
#: stream adds three).
SPARE = 4


class ShownKey(NamedTuple):
    """One key as the footer shows it."""

    key: str
    display: str
    description: str
    action: str
    enabled: bool
    tooltip: str


class KeysFooter(Footer):
    """A footer that follows the focus without composing itself again."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: list[ShownKey] | None = None     # what the key widgets say now

    def wanted(self) -> list[ShownKey] | None:
        """The keys the footer shows for the bindings active now, in order: one per action
        (the first key bound to it), as Textual's footer picks them; None when a binding
        belongs to a group."""
        keys: dict[str, ShownKey] = {}
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if not binding.show:
                continue
            if binding.group is not None:
                return None
            if binding.action not in keys:
                keys[binding.action] = ShownKey(binding.key, self.app.get_key_display(binding),
                                                binding.description, binding.action, enabled,
                                                tooltip)
        return list(keys.values())

    def compose(self) -> ComposeResult:
        self._bindings_ready = True           # the keys now, not after the first frame
        self._shown = self.wanted()
        yield from super().compose()
        if self._shown is not None:
            for _ in range(SPARE):
                spare = FooterKey("", "", "", "").data_bind(compact=Footer.compact)
                spare.display = False
                yield spare

    def on_mount(self) -> None:
        # Beside Footer's own subscription, which composes a few messages later, this one
        # relabels the keys at once, before the frame that shows the new focus is drawn.
        self.screen.bindings_updated_signal.subscribe(self, self._follow, immediate=True)

    def bindings_changed(self, screen: Screen[object]) -> None:
        if self._shown is None or self.wanted() != self._shown:
            super().bindings_changed(screen)

    def _follow(self, screen: Screen[object]) -> None:
        """The keys shown for the bindings active now, relabelled where they stand; or, when
        that cannot be done, left for `bindings_changed` to compose."""
        if self._shown is None or screen is not self.screen or not self.app.app_focus:
            return
        wanted = self.wanted()
        if wanted == self._shown:
            return
        widgets = [w for w in self.query_children(FooterKey)
                   if not w.has_class("-command-palette")]
        if wanted is None or len(wanted) > len(widgets):
            self._shown = None
            return
        for widget, key, was in zip_longest(widgets, wanted, self._shown):
            if key is None:
                widget.display = False
            elif key != was or not widget.display:
                widget.key, widget.key_display = key.key, key.display
                widget.description, widget.action = key.description, key.action
                widget._disabled = not key.enabled
                widget.set_class(not key.enabled, "-disabled")
                widget.tooltip = key.tooltip or None
                widget.display = True
                widget.refresh(layout=True)
        self._shown = wanted
