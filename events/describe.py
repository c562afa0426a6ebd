"""What an event says, written once for every surface that shows events: its glyph, its
tone, a one-line summary, an aside, and the detail lines under it.

Text comes as spans, `(text, role)`, never as markup: a role says what a piece is ("" plain,
"strong", "pass", "fail", "muted") and each surface styles roles its own way: plain text
(`describe`, `plain`), Rich `Text` for the command line (npu_deploy/cli/render.py), the
TUI's event lines (npu_tui/timeline.py). A model name, a redirect or an agent's message is
data, whatever brackets it holds.

    summary   the one line every listing shows (`show`, the TUI stream, the headless deploy)
    aside     what a one-line listing leaves out: times, who decided ("0.12 s", "by ada")
    details   lines under the summary where there is room: a gate's checks, the directions

Text that came from a person or an agent (a model name, an instruction, an exit reason, a
message) reaches a screen only through `printable`: control characters are shown as
escapes (`\\x1b`), never sent to the terminal, and text longer than SHOWN_CHARS is cut with
a note of how much is left out. The surfaces then hand it to Rich or Textual as `Text`,
never as a markup string (docs/tui.md, "Text is data").
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from .envelope import Event
from .payloads import FailedMetric

#: How much of one piece of text from a person or an agent a surface shows at a time; the
#: rest is one key (the TUI's full-text view) or one flag (`show --json`) away.
SHOWN_CHARS: Final = 1000


class _Escapes(dict[int, str]):
    """`str.translate`'s table for `printable`, filled on first sight of each character.

    Shown as its Python escape (`\\x1b`, `\\u200b`, `\\U000e0041`), never as itself, is
    every character a terminal would act on or draw as nothing or as another: Unicode's
    "other" categories (Cc control: C0, DEL, C1; Cf format: zero-width spaces and joiners,
    the bidirectional marks, embeddings, overrides and isolates of "Trojan Source",
    CVE-2021-42574, the byte-order mark, the tag characters; Cs lone surrogates; Co private
    use; Cn unassigned), the line and paragraph separators (Zl, Zp), and every space but
    the ASCII one (Zs: a no-break or an ideographic space passes for a plain one, so
    `tiny qwen2` and `tiny\\u00a0qwen2` differ on screen as they do in the store). A
    newline and a tab stay: they lay text out and command nothing (a one-line surface folds
    them into spaces); a carriage return does not, it lets a line overwrite itself."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        category = unicodedata.category(char)
        if char in "\t\n " or (category[0] != "C" and category not in ("Zl", "Zp", "Zs")):
            shown = char
        elif char == "\r":
            shown = "\\r"
        elif code <= 0xFF:
            shown = f"\\x{code:02x}"
        else:
            shown = char.encode("unicode_escape", "backslashreplace").decode("ascii")
        self[code] = shown
        return shown


_ESCAPES: Final = _Escapes()


def cut(text: str, limit: int | None = SHOWN_CHARS) -> str:
    """At most `limit` characters of `text` (None: all), "… (N more characters)" after."""
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def printable(text: str, limit: int | None = SHOWN_CHARS) -> str:
    """`text` (from a person or an agent) as a terminal may show it: every control, format
    or separator character as a visible escape (`_Escapes` says which), cut at `limit`
    characters. The one function every surface shows such text through: the command line
    (cli/render.py), the TUI (npu_tui/) and the Phase-6 report (pipeline/report/)."""
    return cut(text, limit).translate(_ESCAPES)


def one_line(text: str, limit: int | None = SHOWN_CHARS) -> str:
    """`printable`, with its line breaks and runs of spaces folded into single spaces."""
    return " ".join(printable(text, limit).split())


#: How the command line starts the one line of an error on stderr.
ERROR_PREFIX: Final = "npu-deploy: error:"


def error_line(message: str) -> str:
    """The command line's one-line error (cli/output.py `fail`), whatever `message` quotes;
    the TUI shows the same line for the same refusal (a resume, npu_tui/app.py)."""
    return f"{ERROR_PREFIX} {one_line(message, None)}"


#: A piece of text and what it is: "" plain, "strong", "pass", "fail", "muted".
Span = tuple[str, str]
Line = tuple[Span, ...]

GLYPHS: Final = {
    "run.started": "▶", "run.forked": "⑂", "run.resumed": "↻", "run.finished": "■",
    "phase.entered": "»", "phase.exited": "«", "agent.message": "✎", "model.called": "◇",
    "tool.requested": "→", "tool.completed": "←", "tool.abandoned": "↯",
    "gate.evaluated": "⊨", "profile.recorded": "⏱", "checkpoint.requested": "?",
    "human.decision": "◆", "debug.proposed": "⚑", "skill.loaded": "§",
    "lesson.recorded": "✱", "lesson.approved": "✔", "experience.recorded": "∿", "error": "✗",
}
#: How an event is coloured, from what it means: a verdict, a failure, a person's turn,
#: the run's and phases' milestones, the agent's work, the rest.
TONES: Final = ("pass", "fail", "human", "phase", "agent", "muted")


@dataclass(frozen=True, slots=True)
class EventView:
    """What one event says."""

    type: str
    glyph: str
    tone: str
    summary: Line
    aside: str
    details: tuple[Line, ...]
    cut: bool = False      # a piece of its text was longer than SHOWN_CHARS and was cut


def plain(spans: Iterable[Span]) -> str:
    return "".join([text for text, _ in spans])


def glyph_of(type_: str) -> str:
    return GLYPHS.get(type_, "·")


def tone_of(e: Event) -> str:
    p = e.payload
    if e.type == "gate.evaluated":
        return "pass" if p.get("passed") else "fail"
    if e.type in ("error", "tool.abandoned") or (e.type == "tool.completed" and not p.get("ok")):
        return "fail"
    if e.type == "run.finished":
        return "pass" if p.get("verdict") == "PASS" else "fail"
    if e.type in ("human.decision", "checkpoint.requested", "debug.proposed"):
        return "human"
    if e.type in ("phase.entered", "phase.exited", "run.started", "run.forked", "run.resumed"):
        return "phase"
    if e.actor == "agent":
        return "agent"
    return "muted"


#: Significant digits a gate figure starts at; more are shown only where needed.
GATE_DIGITS = 4


def gate_figures(value: float, threshold: float) -> tuple[str, str]:
    """A gate's value and threshold as text, each in the fewest significant digits (from
    GATE_DIGITS) at which a value that differs from its threshold also reads differently:
    a within_frac of 0.99988 against 1 reads "0.99988 (needs >= 1)", never "1 (needs >= 1)",
    which looks like a pass. Every surface that shows a gate value formats it here."""
    for digits in range(GATE_DIGITS, 18):
        shown = f"{value:.{digits}g}", f"{threshold:.{digits}g}"
        # rounding up may pass the largest double: 1.7975e308 must not read as inf
        overflows = any(math.isinf(float(t)) and math.isfinite(v)
                        for t, v in zip(shown, (value, threshold), strict=True))
        if not overflows and (shown[0] != shown[1] or value == threshold):
            return shown
    return repr(float(value)), repr(float(threshold))   # 17 digits tell every double apart


def check_text(c: dict[str, Any]) -> str:
    """One gate check: "L0 block output/cosine = 0.9812 (needs >= 0.99)"."""
    value, threshold = gate_figures(c["value"], c["threshold"])
    return f"{c['subject']}/{c['metric']} = {value} (needs {c['comparison']} {threshold})"


def failing_checks(checks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in checks if c.get("gating", True) and not c["passed"]]


def time_split(wall: float, agent: float, backend: float, waiting: float, paused: float
               ) -> str:
    """Where a phase's time went, in one phrase for every surface: "wall 30.0 s: agent
    0.3 s, backend 9.7 s, waiting 20.0 s, paused 0.0 s". The wall less a person's waiting
    and the pauses is the phase's own time, the one its speed is judged by."""
    return (f"wall {wall:.1f} s: agent {agent:.1f} s, backend {backend:.1f} s, "
            f"waiting {waiting:.1f} s, paused {paused:.1f} s")


#: How many failing subjects a proposal's evidence names per metric (it counts them all).
NAMED_SUBJECTS = 8


def failed_metrics(checks: Iterable[dict[str, Any]]) -> list[FailedMetric]:
    """A failed gate's evidence: per gating metric that failed, its worst value against the
    threshold, the subjects (kernel uses, layers, prompts) that failed it and how many, and
    their messages (the elements outside tolerance, the checker's findings)."""
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for c in failing_checks(checks):
        by_metric.setdefault(c["metric"], []).append(c)
    out = []
    for metric, cs in by_metric.items():
        # the worst: furthest on the failing side (a floor's lowest, a ceiling's highest)
        worst = (min if cs[0]["comparison"] in (">=", ">") else max)(c["value"] for c in cs)
        messages = [f"{c['subject']}: {c['message']}" for c in cs if c.get("message")]
        out.append(FailedMetric(metric=metric, worst=worst, threshold=cs[0]["threshold"],
                                comparison=cs[0]["comparison"],
                                subjects=[c["subject"] for c in cs[:NAMED_SUBJECTS]],
                                count=len(cs), detail="; ".join(messages[:3])))
    return out


def evidence_text(m: dict[str, Any]) -> str:
    """One failed metric of a proposal's evidence: "within_frac = 0.99988 (needs >= 1) on 2
    subjects: a, b; <detail>"."""
    value, threshold = gate_figures(m["worst"], m["threshold"])
    named = ", ".join(m["subjects"]) + (f" and {m['count'] - len(m['subjects'])} more"
                                        if m["count"] > len(m["subjects"]) else "")
    return (f"{m['metric']} = {value} (needs {m['comparison']} {threshold}) on "
            f"{m['count']} subject{'s' if m['count'] != 1 else ''}: {named}"
            + (f"; {m['detail']}" if m.get("detail") else ""))


def direction_lines(d: dict[str, Any], deterministic: bool = False) -> list[str]:
    """What a debug direction rests on and what its retry changes, as lines of text; of a
    deterministic failure, a direction that changes nothing says so."""
    lines = [f"matched: {why}" for why in d.get("evidence", ())]
    change = d.get("change")
    if change:
        lines += change_lines(change)
    elif deterministic:
        lines.append("changes nothing: the same attempt would fail the same way")
    return lines


def change_lines(change: dict[str, Any]) -> list[str]:
    """A retry's change (payloads.RetryChange as stored) in words: what it changes, then
    each kernel's whole configuration as the next attempt runs it and the recipe settings
    it sets, as `name = value` ("tile_m = 64, ping_pong = true"), never a Python dict."""
    lines = [f"changes: {change['text']}"]
    lines += [f"{key} runs with {settings_text(config)}"
              for key, config in change.get("configs", {}).items() if config]
    if change.get("recipe"):
        lines.append(f"recipe: {settings_text(change['recipe'])}")
    return lines


def settings_text(settings: dict[str, Any]) -> str:
    """`name = value` pairs in their order, as a configuration file writes them."""
    def word(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return f"{v:.6g}"
        if isinstance(v, list | tuple):
            return ", ".join(word(x) for x in v)
        return str(v)

    return ", ".join(f"{k} = {word(v)}" for k, v in settings.items())


# --- the summaries --------------------------------------------------------------------------

def _gate(p: dict[str, Any]) -> Line:
    checks = p["checks"]
    if p["passed"]:
        return (f"{p['gate']}: ", ""), ("PASS", "pass")
    return (f"{p['gate']}: ", ""), (f"FAIL ({len(failing_checks(checks))} of {len(checks)} "
                                    "checks)", "fail")


def _finished(p: dict[str, Any]) -> Line:
    return (p["verdict"], "pass" if p["verdict"] == "PASS" else "fail"), (f": {p['summary']}", "")


def _decision(p: dict[str, Any]) -> Line:
    words = [(p["decision"], "strong")]
    if p.get("override"):
        words.append(("OVERRIDING THE FAILED GATE", "fail"))
    words += [(str(x), "") for x in (p.get("direction_id"), p.get("instruction")) if x]
    line: list[Span] = []
    for word in words:
        line += [(" ", ""), word] if line else [word]
    return tuple(line)


#: A tool call's arguments that are the conductor's bookkeeping, not what the call is about
_BOOKKEEPING = frozenset({"backend", "idempotent"})


def _arguments(args: dict[str, Any]) -> list[str]:
    """What a tool call is about, in words: a text argument as it is (the kernel, the
    prompt's name), a number or a flag as name=value, a list joined; a mapping by its size."""
    words = []
    for name, value in args.items():
        if name in _BOOKKEEPING:
            continue
        if isinstance(value, str):
            words.append(value if len(value) <= 48 else value[:47] + "…")
        elif isinstance(value, list | tuple):
            words.append(f"{name}=" + ",".join(map(str, value)))
        elif isinstance(value, dict):
            words.append(f"{name}={{{len(value)}}}" if value else f"{name}={{}}")
        else:
            words.append(f"{name}={value}")
    return words


#: Summaries of one plain span (the event stream's hot path formats them straight).
_PLAIN: dict[str, Callable[[dict[str, Any]], str]] = {
    "run.started": lambda p: f"{p['model']} on {p['backend']}, agent {p['agent']}",
    "run.forked": lambda p: f"from {p['parent_run_id']} at v{p['parent_version']}",
    "run.resumed": lambda p: f"from v{p['from_version']}: {p['reason']}",
    "phase.exited": lambda p: f"{p['outcome']} {p['reason']}".strip(),
    # the agent's own words as they are; another role (a person's, the system's) named
    "agent.message": lambda p: p["text"] if p["role"] == "assistant" else
    f"{p['role']}: {p['text']}",
    "model.called": lambda p: (f"{p['model']} in {p['input_tokens']} out {p['output_tokens']} "
                               f"${p['cost_usd']:.4f} ({p['stop_reason']})"),
    "tool.requested": lambda p: " ".join([p["tool"], *_arguments(p["arguments"])]),
    "tool.completed": lambda p: f"{p['tool']} [{p['call_id']}] {'ok' if p['ok'] else 'failed'}",
    "tool.abandoned": lambda p: f"{p['tool']} [{p['call_id']}]: {p['reason']}",
    "profile.recorded": lambda p: f"{p['scope']} {p['total_s'] * 1e3:.2f} ms ({p['source']})",
    "checkpoint.requested": lambda p: p["summary"],
    "debug.proposed": lambda p: f"{p['symptom']}: {len(p['directions'])} directions",
    "skill.loaded": lambda p: p["skill"],
    "lesson.recorded": lambda p: f"{p['symptom']} -> {p['target_skill']}",
    "lesson.approved": lambda p: f"{p['lesson_id']} by {p['author']} -> {p['applied_to']}",
    "experience.recorded": lambda p: f"{p['topic']}: {p['outcome']}",
}
#: Summaries whose parts are styled: a verdict, a heading, a failure.
_STYLED: dict[str, Callable[[dict[str, Any]], Line]] = {
    "run.finished": _finished,
    "phase.entered": lambda p: ((p["name"], "strong"),),
    "gate.evaluated": _gate,
    "human.decision": _decision,
    "error": lambda p: ((p["kind"], "fail"), (f": {p['message']}", "")),
}




def _as_plain(styled: Callable[[dict[str, Any]], Line]) -> Callable[[dict[str, Any]], str]:
    return lambda p: plain(styled(p))


#: Every summary as plain text, in one lookup (`describe` runs for every line the TUI reads).
_SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    **_PLAIN, **{t: _as_plain(f) for t, f in _STYLED.items()}}


# --- asides and details -------------------------------------------------------------------

def _aside(e: Event) -> str:
    p = e.payload
    if e.type in ("tool.completed", "model.called"):
        return f"{p['duration_s']:.2f} s"
    if e.type == "phase.exited":
        return time_split(*(p.get(f"{part}_s", 0.0)
                            for part in ("wall", "agent", "backend", "waiting", "paused")))
    if e.type == "human.decision":
        return f"by {p['author']}"
    if e.type == "phase.entered" and e.attempt and e.attempt > 1:
        return f"attempt {e.attempt}"
    return ""


def _details(e: Event) -> tuple[Line, ...]:
    p = e.payload
    if e.type == "gate.evaluated":
        return tuple((("ok ", "pass") if c["passed"] else ("BAD", "fail"), (" ", ""),
                      (check_text(c), "")) for c in p["checks"])
    if e.type == "debug.proposed":
        lines: list[Line] = [(("evidence: ", "muted"), (evidence_text(m), ""))
                             for m in p.get("evidence", ())]
        for i, d in enumerate(p["directions"], 1):
            lines.append(((f"{i}. ", ""), (d["title"], "strong"),
                          (f" ({d['skill']}, score {d['score']:.2f})", "")))
            lines += [(("   ", ""), (text, "muted"))
                      for text in direction_lines(d, p.get("deterministic", False))]
        return tuple(lines)
    if e.type == "phase.entered":
        out: list[Line] = []
        if p.get("debug_direction"):
            out.append((("following debug direction ", ""), (p["debug_direction"], "strong")))
        if p.get("instruction"):
            out.append((("a person's instruction: ", ""), (p["instruction"], "")))
        return tuple(out)
    return ()


def _summary(e: Event) -> Line:
    try:
        text = _PLAIN.get(e.type)
        if text is not None:
            return ((text(e.payload), ""),)
        styled = _STYLED.get(e.type)
        return styled(e.payload) if styled is not None else ()
    except (KeyError, TypeError):         # a payload of an older shape: no summary, no crash
        return ()


def view(e: Event) -> EventView:
    """Everything the event says, for a surface that shows all of it: every piece of text
    `printable`, cut at SHOWN_CHARS (`cut` says whether any was)."""
    try:
        aside = _aside(e)
    except (KeyError, TypeError):
        aside = ""
    try:
        details = _details(e)
    except (KeyError, TypeError):
        details = ()
    lines = (_summary(e), *details)
    cut = any(len(text) > SHOWN_CHARS for line in lines for text, _ in line)
    summary, *shown = (tuple((printable(text), role) for text, role in line) for line in lines)
    return EventView(e.type, glyph_of(e.type), tone_of(e), summary, printable(aside),
                     tuple(shown), cut)


def describe(event: Event, width: int = 120) -> str:
    """The summary as one line of plain text, at most `width` characters."""
    summary = _SUMMARIES.get(event.type)
    try:
        text = summary(event.payload) if summary is not None else ""
    except (KeyError, TypeError):
        text = ""
    # cut before the escapes: a 100 KB instruction costs what its first line costs
    text = one_line(text[: width * 2], None)
    return text if len(text) <= width else text[: width - 1] + "…"
