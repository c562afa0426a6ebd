"""The `npu-deploy` command's entry point. Importing the command line takes about half a
second (click, the store's sqlite-utils, which imports numpy) and the TUI as much again
(Textual); loading a pipeline imports torch, seconds. A command that opens the TUI or drives
a run first says, on one line, what it opens and that it is loading, so the terminal is
never blank while Python imports; the TUI erases the line once it has left its screen
(cli/tui.py, `run_app`; the line's state is terminal_line.py, which both import).

Nothing here may import more than the standard library (and platformdirs, for where the
store is): its point is to write before that. For a run, the line is the run screen's
header, read from the store's runs row with the standard library's sqlite3, read-only.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import sys

from npu_deploy import terminal_line
from npu_deploy.locations import default_db_path

#: The commands that open the TUI (deploy without --headless), and those that load a
#: pipeline before their first line; what each says it loads.
LOADING = {
    "tui": "opening the TUI (loading Textual and the store)",
    "attach": "opening the TUI (loading Textual and the store)",
    "replay": "opening the TUI (loading Textual and the store)",
    "deploy": "opening the TUI (loading Textual and the store; then the pipeline and the "
              "model)",
    "resume": "loading the store and the run's pipeline",
}


def plain(text: str, limit: int = 48) -> str:
    """An argument as the line shows it: printable characters only, cut to `limit` (what a
    person typed is data, not terminal control: events/describe.py holds the same rule,
    which this module may not import)."""
    shown = "".join(c if c.isprintable() else "?" for c in text)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def loading_line(argv: list[str]) -> str | None:
    """What `npu-deploy ARGV` says before it imports, or None (a command that answers at
    once, help, a headless deploy)."""
    if len(argv) < 2 or argv[1] not in LOADING or {"-h", "--help"} & set(argv):
        return None
    command = argv[1]
    if command == "deploy" and "--headless" in argv:
        return None
    # the run or the model, when it comes first (what follows an option may be its value)
    subject = argv[2] if len(argv) > 2 and not argv[2].startswith("-") else ""
    about = subject and command in ("attach", "replay", "resume") and run_header(
        store_file(argv), subject)
    head = f"npu-deploy {command}" + (f" {about or plain(subject)}" if subject else "")
    if command == "tui" and (count := run_count(store_file(argv))) is not None:
        head += f" ({count} run{'s' if count != 1 else ''})"
    return f"{head}: {LOADING[command]} …"


def store_file(argv: list[str]) -> str:
    """The store the command will open: its --db, else the default."""
    for i, a in enumerate(argv):
        if a == "--db" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--db="):
            return a[len("--db="):]
    return str(default_db_path())


def _read(db: str, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]] | None:
    """Rows of a read-only query, or None when the file is not a store it can read now (the
    command says what is wrong, once it runs)."""
    if not os.path.isfile(db):
        return None
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return None


def run_header(db: str, ref: str) -> str | None:
    """The run screen's header, from the runs row: id, model, phase, status, verdict. The
    run by its id, or a prefix only it starts with (as the commands take it)."""
    like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = _read(db, "SELECT run_id, model, current_phase, status, verdict FROM runs "
                     "WHERE run_id = ? OR run_id LIKE ? ESCAPE '\\' LIMIT 3", (ref, like))
    if not rows:
        return None
    exact = [r for r in rows if r[0] == ref]
    if not exact and len(rows) > 1:
        return None
    run_id, model, phase, status, verdict = (exact or rows)[0]
    if locked(db, str(run_id)):
        status = "running"
    elif status in ("running", "new"):
        status = "crashed"          # its writer's lock is free (EventStore.live_status)
    return "  ".join(plain(str(x)) for x in (
        run_id, model or "?", "no phase yet" if phase is None else f"phase {phase}",
        f"run {status}", f"verdict {verdict}" if verdict else "no verdict yet"))


def locked(db: str, run_id: str) -> bool:
    """Whether a process holds the run's writer lock (a flock, as filelock takes it)."""
    path = f"{db}.locks/{run_id}.lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def run_count(db: str) -> int | None:
    rows = _read(db, "SELECT count(*) FROM runs")
    return None if not rows else int(str(rows[0][0]))


def main() -> None:
    line = loading_line(sys.argv)
    if line is not None and sys.stdout.isatty() and os.environ.get("TERM") != "dumb":
        terminal_line.say(line)
    from npu_deploy.cli import main as cli

    cli()
