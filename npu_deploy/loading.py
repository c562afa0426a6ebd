"""The line the `npu-deploy` command writes before its imports, and takes back after the
TUI. Importing the command line takes about half a second (click, the store's sqlite-utils,
which imports numpy) and the TUI as much again (Textual); loading a pipeline imports torch,
seconds. A command that opens the TUI or drives a run first says, on one line, what it opens
and that it is loading, so the terminal is never blank while Python imports (launch.py
writes it), wherever `--db` stands (`npu-deploy --db X tui` as `npu-deploy tui --db X`).
The TUI's first frame is the same line, until its first screen is built, and the TUI
erases the line once it has left its screen (cli/tui.py, `run_app`).

Nothing here may import more than the standard library (and platformdirs, for where the
store is: store/locations.py; store/identity.py, whether the file has a second name beside
which reading would open a WAL): its point is to write before that. For a run, the line is the
run screen's header, read from the store's runs row with the standard library's sqlite3,
read-only. A module of its own, below the command line: the entry point (launch.py) calls
the command line, and the command line erases the line, neither importing the other's
module for it.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import sys

from npu_deploy.store.identity import second_name
from npu_deploy.store.locations import default_db_path, locks_dir

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
#: The options of the group and of LOADING's commands that take a value: the word after one
#: is its value, neither the command nor its subject (tests/cli/test_launch.py checks this
#: set against the command line's options).
VALUE_OPTIONS = frozenset({
    "--db", "--pipeline", "--run-id", "--pause-at", "--budget", "--agent", "--model",
    "--agent-budget", "--sandbox-limits", "--seq-len", "--steps", "--weights", "--seed-fault",
    "--backend", "--air-objects", "--repeats"})
#: Options that make the command answer at once, wherever they are.
AT_ONCE = frozenset({"-h", "--help", "--version"})
#: The line, once written: the TUI shows it until its first screen is drawn, then erases it.
said: str | None = None
_rows = 1


def plain(text: str, limit: int = 48) -> str:
    """An argument as the line shows it: printable characters only, cut to `limit` (what a
    person typed is data, not terminal control: events/describe.py holds the same rule,
    which this module may not import)."""
    shown = "".join(c if c.isprintable() else "?" for c in text)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def words(argv: list[str]) -> tuple[list[str], dict[str, str], set[str]]:
    """ARGV after the program, as click reads it, in whatever order it comes (`npu-deploy
    --db X tui` and `npu-deploy tui --db X` alike): the positional words (the command, then
    its arguments), each option's value (the last one given, as click keeps it) and the
    flags."""
    positional: list[str] = []
    values: dict[str, str] = {}
    flags: set[str] = set()
    rest = iter(argv[1:])
    for word in rest:
        if word == "--":
            positional.extend(rest)
        elif word.startswith("--") and "=" in word:
            name, _, value = word.partition("=")
            values[name] = value
        elif word in VALUE_OPTIONS:
            values[word] = next(rest, "")
        elif word.startswith("-") and word != "-":
            flags.add(word)
        else:
            positional.append(word)
    return positional, values, flags


def loading_line(argv: list[str]) -> str | None:
    """What `npu-deploy ARGV` says before it imports, or None (a command that answers at
    once, help, a headless deploy)."""
    positional, values, flags = words(argv)
    if not positional or positional[0] not in LOADING or flags & AT_ONCE:
        return None
    command = positional[0]
    if command == "deploy" and "--headless" in flags:
        return None
    subject = positional[1] if len(positional) > 1 else ""     # the run, or the model
    db = values.get("--db") or str(default_db_path())
    about = subject and command in ("attach", "replay", "resume") and run_header(db, subject)
    head = f"npu-deploy {command}" + (f" {about or plain(subject)}" if subject else "")
    if command == "tui" and (count := run_count(db)) is not None:
        head += f" ({count} run{'s' if count != 1 else ''})"
    return f"{head}: {LOADING[command]} …"


def _read(db: str, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]] | None:
    """Rows of a read-only query, or None when the file is not a store it can read now (the
    command says what is wrong, once it runs)."""
    if not os.path.isfile(db) or second_name(db) is not None:
        return None       # (a second name: the command refuses it, and reads nothing)
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
    """Whether a process holds the run's writer lock (a flock, as filelock takes it), beside
    the store file whatever path reached it (as the store finds it)."""
    path = locks_dir(db) / f"{run_id}.lock"
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


def say(line: str) -> None:
    """Write the loading line, on a terminal that shows it."""
    global said, _rows
    if sys.stdout.isatty() and os.environ.get("TERM") != "dumb":
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        said = line
        try:
            width = os.get_terminal_size(sys.stdout.fileno()).columns
        except OSError:
            width = 80
        _rows = max(1, -(-len(line) // max(1, width)))       # the rows it wraps to


def erase() -> None:
    """Take the loading line back off the terminal (the TUI has been and gone), and with it
    what the terminal echoed of keys typed before the TUI read them (a `q` while it loaded):
    back to the line's first column, up its rows, clear to the end of the screen."""
    global said
    if said is not None and sys.stdout.isatty():
        sys.stdout.write(f"\r\x1b[{_rows}A\x1b[J")
        sys.stdout.flush()
        said = None
