"""The run screen's title: run id, model, backend and agent, replay mode, phase, status,
verdict and the time zone on one line, fitted to the terminal's width. It keeps the run's
shortest unique id and how the run stood at the last probe of its writer's lock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rich.text import Text
from textual.widgets import Static

from npu_deploy.events import PHASE_NAMES, DeploymentState
from npu_deploy.events.describe import printable

from ..legend import PLAIN_TONES, tone_styles
from .panels import Tones
from .phase_strip import SHORT

#: The title's parts, in the order they show: run id, model, backend and agent, replay
#: mode, phase, status, verdict, the time zone. Each part is a tuple of forms, longest
#: first; a narrow terminal takes the next form of the first part of TITLE_CUTS that has
#: one, and again, until the title fits. Status and verdict keep a form at every width.
TITLE_CUTS = (7, 2, 3, 6, 4, 1, 4, 1, 5, 0)
TITLE_STYLES = ("bold", "", "", "bold", "", "bold", "bold", "muted")
#: What the title says of a run being written: by a conductor, or by this window's own
#: driver before its conductor has the run (loading the pipeline and the model).
ALIVE = ("running", "starting")
STATUS_S = 1.0               # the writer's lock is probed at most this often


def fit_title(parts: list[tuple[str, ...]], width: int, tones: Tones = PLAIN_TONES) -> Text:
    """The run title in `width` cells (app.tcss gives it one line): lower-priority parts are
    shortened or left out before the status and the verdict are ever cut. A style that
    names a tone is drawn in `tones` (the screen's theme)."""
    form = [0] * len(parts)

    def shown() -> list[str]:
        return [p[f] for p, f in zip(parts, form, strict=True)]

    def length() -> int:
        words = [w for w in shown() if w]
        return sum(len(w) for w in words) + 2 * (len(words) - 1)

    for i in TITLE_CUTS:
        if length() <= width:
            break
        form[i] = min(form[i] + 1, len(parts[i]) - 1)
    text = Text()
    for word, style in zip(shown(), TITLE_STYLES, strict=True):
        if word:
            text.append("  " if text else "")
            text.append(word, tones.get(style, style))
    text.no_wrap = True
    return text


def abbreviate(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut with an ellipsis."""
    return text if len(text) <= width else text[:width - 1] + "…"


def unique_prefix(run_id: str, others: Iterable[str], least: int = 8) -> str:
    """The shortest start of `run_id`, of at least `least` characters, that starts no other
    run id: what `npu-deploy show` and the other commands accept for it."""
    return unique_prefixes([run_id, *others], least)[run_id]


def unique_prefixes(run_ids: Iterable[str], least: int = 8) -> dict[str, str]:
    """`unique_prefix` of every id at once: in sorted order an id shares most of its start
    with a neighbour, so one pass over the sorted ids finds each (the browser redraws a
    store's runs every second)."""
    ids = sorted(set(run_ids))

    def shared(a: str, b: str) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                    min(len(a), len(b)))

    out = {}
    for i, run_id in enumerate(ids):
        n = max([shared(run_id, ids[j]) + 1 for j in (i - 1, i + 1) if 0 <= j < len(ids)],
                default=0)
        out[run_id] = run_id[:max(least, n)]
    return out


class RunTitle(Static):
    """One line (app.tcss, `#run-title`): `show` draws it at the state it is given, in the
    screen's tones, without a relayout of the screen."""

    def __init__(self, run_id: str, short_id: str, live_status: Callable[[str], str], *,
                 id: str | None = None) -> None:
        """`live_status(folded status)`: running, crashed, ... as the writer's lock says."""
        super().__init__(id=id)
        self.run_id, self.short_id = run_id, short_id
        self._live_status = live_status
        self._status: tuple[float, str] = (0.0, "")
        self._seen = -1             # the run's version at the last probe

    def show(self, state: DeploymentState, head: DeploymentState, cursor: int, newest: int,
             mode: str) -> None:
        """The title at `cursor` (of `newest` events), whose state is `state`; the status and
        the verdict are the run's now (`head`); `mode`: LIVE, REPLAY, PLAY x16."""
        k = state.current_phase
        verdict = head.verdict
        status = self.run_status(head)
        if status not in ALIVE and mode == "LIVE":
            mode = "AT END"          # nothing writes it: following shows no more
        # the run id and the model name are data: Text, never markup
        self.update(fit_title([
            (printable(self.run_id), printable(self.short_id) +
             ("…" if self.short_id != self.run_id else "")),
            (printable(state.model or "?", 200), abbreviate(printable(state.model or "?"), 16),
             abbreviate(printable(state.model or "?"), 8)),
            (printable(f"{state.backend}  agent {state.agent}", 200), ""),
            (f"{mode} v{cursor}/{newest}", mode),
            (f"phase {k} {PHASE_NAMES[k]}", f"phase {k} {SHORT[k]}", f"p{k}")
            if k is not None else ("not started", "p-"),
            (f"run {status}", status),
            (f"verdict {verdict}",) if verdict else ("no verdict yet", "verdict —"),
            ("times UTC", ""),
        ], (self.screen.size.width or self.app.size.width) - 2,     # the padding: 0 1
            # the screen's tones, as the title has always been drawn (over its background)
            tone_styles(self.screen)),
            layout=False)           # one line, always (app.tcss): no relayout of the screen

    def run_status(self, head: DeploymentState) -> str:
        """running / crashed / ...: probing the writer's lock file at most once a second,
        and again whenever the run has grown since (a writer is at work; its last event,
        run.finished, is seen at once)."""
        now = time.monotonic()
        if now - self._status[0] > STATUS_S or head.version != self._seen:
            self._status, self._seen = (now, self._live_status(head.status)), head.version
        return self._status[1]
