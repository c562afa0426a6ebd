"""Every glyph and colour the run screen draws, and what each means: one table that the
widgets draw from and the help screen shows, so the legend cannot go stale.

    PHASE_STATES   the phase strip: a phase's state (events/state.py PhaseState.status)
    GATE_MARKS     the Gates tab: the status column of a check
    SCRUBBER_MARKS the scrubber: what happened at a column of the run
    EVENT_GLYPHS   the event stream: an event's type (events/describe.py GLYPHS)
    STEP_MARKS     the event stream: a tool step folded into one line
    TREND_MARKS    the Gates and Plan tabs: a value across attempts or transforms
    TONES          the colours of the event stream, the phase strip and the gate marks

A glyph's `tone` names its colour; app.tcss gives each tone its theme colour once, as the
component class `tone--<tone>` (TONE_CLASSES) that every widget drawing tones lists, and
`tone_styles` reads them: no colour is named in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rich.style import Style

from npu_deploy.events.describe import GLYPHS, glyph_of

if TYPE_CHECKING:
    from textual.widget import Widget


@dataclass(frozen=True, slots=True)
class Glyph:
    glyph: str
    means: str
    tone: str       # a key of TONES


#: The colours, by what they mean. The event stream's tones are events/describe.py TONES;
#: "active" is the phase strip's phase at work.
TONES: Final = {
    "pass": "passed: a gate, a check, a phase, the run (PASS)",
    "fail": "failed: a gate, a check, a tool call, an error, the run (FAIL)",
    "human": "a person's turn: a checkpoint, a debug proposal, a decision",
    "phase": "a milestone: a run or phase started, resumed, forked, left",
    "agent": "the agent's work: its messages, tool calls, model calls",
    "active": "the phase at work (the current phase is also underlined)",
    "muted": "the rest: pending phases, harness bookkeeping",
    "match": "the event stream's rows that the search (/) matches, as their background",
}

#: The component classes of the tones (app.tcss colours each from the theme).
TONE_CLASSES: Final = frozenset(f"tone--{tone}" for tone in TONES)


#: The tones without colour: for text drawn outside an app (a plain Rich console).
PLAIN_TONES: Final = {tone: Style() for tone in ("", *TONES)}


def tone_styles(widget: Widget) -> dict[str, Style]:
    """Each tone's Rich style as `widget` draws it, from its component classes: a text
    colour (and weight) without a background, so that a tone reads over whatever the row
    shows beneath it (a zebra stripe, a cursor); "match" is a background only. "" (no tone)
    is the widget's own text colour. Read again after a theme change."""
    styles = {"": Style(color=widget.visual_style.rich_style.color)}
    for tone in TONES:
        style = widget.get_component_rich_style(f"tone--{tone}")
        styles[tone] = Style(bgcolor=style.bgcolor) if tone == "match" else \
            Style(color=style.color) + style.without_color
    return styles


#: A phase's state in the phase strip: glyph, then `a<attempts>` and its own time.
PHASE_STATES: Final = {
    "pending": Glyph("·", "not started", "muted"),
    "working": Glyph("…", "the agent works on it", "active"),
    "gating": Glyph("⊨", "the harness evaluates its gate", "active"),
    "passed": Glyph("✓?", "gate passed, a checkpoint follows", "active"),
    "failed": Glyph("✗", "gate failed", "fail"),
    "awaiting_human": Glyph("?", "waits for a person at its checkpoint", "human"),
    "debugging": Glyph("⚑", "gate failed, debug directions proposed", "fail"),
    "exited:passed": Glyph("✓", "done: passed and approved", "pass"),
    "exited:needs_human": Glyph("✋", "stopped for a person (retries spent)", "fail"),
    "exited:failed": Glyph("✗", "left failed", "fail"),
    "exited:aborted": Glyph("■", "aborted by a person", "fail"),
}

#: The status column of the Gates tab.
GATE_MARKS: Final = {
    "passed": Glyph("ok", "the check holds", "pass"),
    "failed": Glyph("FAIL", "the check fails and decides the gate", "fail"),
    "lens": Glyph("lens", "recorded to look through, does not decide the gate", "muted"),
}

#: The scrubber's marks line; where marks share a column, the first kind here wins.
SCRUBBER_MARKS: Final = {
    "gate_fail": Glyph("✗", "a gate failed", "fail"),
    "error": Glyph("!", "an error", "fail"),
    "decision": Glyph("◆", "a person's (or the policy's) decision", "human"),
    "debug": Glyph("⚑", "debug directions proposed", "human"),
    "checkpoint": Glyph("?", "a checkpoint asked for a decision", "human"),
    "finished": Glyph("■", "the run finished", "human"),
}
SCRUBBER_CURSOR: Final = Glyph("▲", "the cursor, with its event number", "active")

#: A tool step folded into one line of the event stream: its glyph, then in the type
#: column how it ended (and how long it took).
STEP_MARKS: Final = {
    "folded": Glyph("▸", "a tool step as one line: request, outcome, duration (e expands)",
                    "agent"),
    "expanded": Glyph("▾", "a tool step shown as its two events (e folds it)", "agent"),
    "ok": Glyph("✓", "the tool call returned; its duration follows", "pass"),
    "failed": Glyph("✗", "the tool call failed", "fail"),
    "abandoned": Glyph("↯", "abandoned: the run stopped before the result came", "fail"),
    "running": Glyph("…", "running: a live run waits for the result", "agent"),
}

#: The sparklines of the Gates tab (a check's value at each attempt) and of the Plan tab
#: (the plan's time after each transform tried): Textual's Sparkline blocks, one per value,
#: from the row's lowest to its highest, shaded from `$accent 40%` to `$accent`.
SPARK_BARS: Final = "▁▂▃▄▅▆▇█"
TREND_MARKS: Final = {
    "low": Glyph(SPARK_BARS[0], "a sparkline's lowest value (its row's, linear scale)", "active"),
    **{f"bar{i}": Glyph(b, "a value between its row's lowest and highest", "active")
       for i, b in enumerate(SPARK_BARS[1:-1], 1)},
    "high": Glyph(SPARK_BARS[-1], "a sparkline's highest value", "active"),
    "missing": Glyph("—", "no value: the check was not made at that attempt", "muted"),
    "then": Glyph("→", "the values across attempts, oldest first", "muted"),
}

#: The event stream's glyph per event type; any other type draws as `glyph_of`'s default.
EVENT_GLYPHS: Final = {
    **{t: Glyph(g, t, "") for t, g in GLYPHS.items()},
    "": Glyph(glyph_of(""), "any other event", ""),
}


def phase_glyph(status: str) -> Glyph:
    """The phase strip's glyph of a phase state; a state this table does not know shows
    as its own name (and the legend's test fails)."""
    return PHASE_STATES.get(status) or Glyph(status, status, "active")


def gate_mark(passed: bool, gating: bool) -> Glyph:
    return GATE_MARKS["lens" if not gating else "passed" if passed else "failed"]


#: The sections of the legend, as the help screen shows them: (title, [(glyph, means, tone)]).
def sections() -> list[tuple[str, list[Glyph]]]:
    return [
        ("Phase strip", list(PHASE_STATES.values())),
        ("Gates tab: status", list(GATE_MARKS.values())),
        ("Scrubber", [*SCRUBBER_MARKS.values(), SCRUBBER_CURSOR]),
        ("Event stream (in the colours below)", list(EVENT_GLYPHS.values())),
        ("Event stream: tool steps", list(STEP_MARKS.values())),
        ("Gates and Plan tabs: trends", list(TREND_MARKS.values())),
        ("Colours", [Glyph("■", means, tone) for tone, means in TONES.items()]),
    ]


def glyphs() -> set[str]:
    """Every glyph the legend explains."""
    return {g.glyph for _, items in sections()[:-1] for g in items}
