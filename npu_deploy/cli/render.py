"""Events on the command line: what events/describe.py says an event says, styled as Rich
`Text` (a style per role), never as markup, so that a model name, an instruction or an
agent's message prints as written, brackets and all; and `data`, the one way any other
text from a person or an agent (a model name in a table, an exit reason) reaches Rich."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from rich.text import Text

from npu_deploy.events import Event
from npu_deploy.events.describe import SHOWN_CHARS, EventView, Span, printable, view

ROLE_STYLES: Final = {"strong": "bold", "pass": "green", "fail": "red", "muted": "dim"}

#: The headless deploy's line of each event it shows: indent, and the words before the
#: summary ("{where}" is "phase K "). Agent steps only for tool.completed.
PROGRESS: Final = {
    "phase.entered": (0, "{where}"),
    "tool.completed": (2, "step "),
    "gate.evaluated": (2, "gate "),
    "debug.proposed": (2, "debug: "),
    "human.decision": (2, "decision: "),
    "phase.exited": (2, "{where}exited: "),
    "run.finished": (0, "run finished: "),
    "error": (2, "error "),
}


def data(text: str, style: str = "", limit: int | None = SHOWN_CHARS) -> Text:
    """Text from a person or an agent as a Rich cell or line: never parsed as markup, its
    control characters shown as escapes, cut at `limit` characters (events/describe.py)."""
    return Text(printable(text, limit), style=style)


def styled(spans: Iterable[Span], style: str = "") -> Text:
    text = Text(style=style)
    for part, role in spans:
        text.append(part, ROLE_STYLES.get(role, ""))
    return text


def summary(v: EventView) -> Text:
    """The summary, and its aside in parentheses: one cell of a listing."""
    text = styled(v.summary)
    if v.aside:
        text.append(f" ({v.aside})", "dim")
    return text


def progress(e: Event) -> list[Text]:
    """The headless deploy's lines for `e`: none for the events it leaves out."""
    shown = PROGRESS.get(e.type)
    if shown is None or (e.type == "tool.completed" and e.actor != "agent"):
        return []
    indent, words = shown
    v = view(e)
    where = "" if e.phase is None else f"phase {e.phase} "
    head = Text(" " * indent)
    head.append(words.format(where=where), "bold" if indent == 0 else
                "red" if v.tone == "fail" else "")
    head.append_text(summary(v))
    return [head, *(styled(((" " * (indent + 2), ""), *line)) for line in v.details)]
