"""First paint and quit of every TUI entry point, as a person sees them: each command runs as
a real process in a tmux pane (a private server socket, `tmux -L`), and the pane is read
back until it shows what the person waits for.

    .venv/bin/python -m benchmarks.tui_bench --terminal [--repeats 3] [--model tiny-llama]
        [--quit-after 1.0] [--json]

Per entry point, with its own store in a temporary folder, each with `--db` after the
command and again before it (`npu-deploy --db X tui`, the group's option):

- `deploy MODEL` (the real autopilot pipeline, the TUI with its conductor in this process),
- `tui` (the run browser), `replay RUN` and `attach RUN` on the run the first deploy made,
- `resume RUN` (headless: the command line has no TUI resume; its first line is its paint).

first line: from the Enter that starts the command (the shell's fork and exec included)
until the pane shows what it loads (npu_deploy/loading.py's line, written before the
imports) or its header. TUI blank: how long the TUI's own screen (the alternate screen) was
blank before its first frame. first frame: until the pane shows the entry point's header:
the run screen's title line (its "times UTC"), the run browser's title ("N runs"), resume's
first line. quit: `--quit-after` seconds after the first frame (so a deploy's conductor is
still loading the pipeline and the model) the quit key is sent (`q`; ctrl+c for the
headless resume), and two moments are taken: the terminal restored (the header is gone: the
alternate screen was left) and the shell's prompt back (the command's process exited and
the shell printed a marker). The pane is read about every 5-10 ms (one tmux call each),
which bounds the resolution.

Figures are measured on the CPU of this machine, under whatever else runs on it; nothing is
asserted.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NPU_DEPLOY = Path(sys.executable).parent / "npu-deploy"
WIDTH, HEIGHT = 160, 45
RUN_TITLE = re.compile(r"times UTC")                 # the run screen's title line
RUNS_TITLE = re.compile(r"npu-deploy  .*  \d+ runs")  # the browser's title, not the line
RESUMED = re.compile(r"resumed at v\d+")             # resume's first line
LOADING = re.compile(r"npu-deploy \w+.*: (opening|loading) .*…")   # npu_deploy/loading.py's line


class Pane:
    """One tmux session with one pane running bash, on a private server socket."""

    def __init__(self, env: dict[str, str]) -> None:
        self.tmux_path = shutil.which("tmux")
        if self.tmux_path is None:
            raise SystemExit("the terminal benchmark needs tmux")
        self.socket, self.name = f"npu-deploy-bench-{uuid.uuid4().hex[:8]}", "bench"
        shell = shutil.which("bash") or "sh"
        self.tmux("new-session", "-d", "-s", self.name, "-x", str(WIDTH), "-y", str(HEIGHT),
                  *(a for k, v in env.items() for a in ("-e", f"{k}={v}")),
                  f"{shell} --noprofile --norc")

    def tmux(self, *args: str) -> str:
        assert self.tmux_path is not None
        done = subprocess.run([self.tmux_path, "-L", self.socket, "-f", os.devnull, *args],
                              capture_output=True, text=True, timeout=10, check=False)
        return done.stdout

    def send(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", self.name, *(("-l",) if literal else ()), *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def sample(self) -> tuple[bool, str]:
        """Whether the pane shows the alternate screen (the TUI's), and its text."""
        alt, _, text = self.tmux("display-message", "-p", "-t", self.name, "#{alternate_on}",
                                 ";", "capture-pane", "-p", "-t", self.name).partition("\n")
        return alt.strip() == "1", text

    def until(self, test: Callable[[str], bool], timeout: float) -> float | None:
        """monotonic time at which the pane first passed `test`; None on timeout."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if test(self.screen()):
                return time.monotonic()
        return None

    def close(self) -> None:
        self.tmux("kill-server")


@dataclass
class Entry:
    name: str
    argv: list[str]
    header: re.Pattern[str]
    quit_key: str = "q"


def measure(pane: Pane, entry: Entry, quit_after: float, timeout: float) -> dict[str, Any]:
    marker = f"DONE-{uuid.uuid4().hex[:6]}"
    pane.send("clear", "Enter")
    pane.until(lambda s: not s.strip() or s.strip().endswith("$"), 5)
    pane.send(" ".join(entry.argv) + f"; echo {marker}", literal=True)
    t0 = time.monotonic()
    pane.send("Enter")
    said = painted = None
    blank, last = 0.0, t0          # the TUI's screen blank before its first frame
    end = t0 + timeout
    while painted is None and time.monotonic() < end:
        alt, text = pane.sample()
        now = time.monotonic()
        if said is None and (LOADING.search(text) or entry.header.search(text)):
            said = now
        if entry.header.search(text):
            painted = now
        elif alt and not text.strip():
            blank += now - last
        last = now
    if painted is None:
        return {"entry": entry.name, "error": "no header within the timeout",
                "screen": pane.screen()[-600:]}
    time.sleep(quit_after)
    t1 = time.monotonic()
    pane.send(entry.quit_key)
    restored = pane.until(lambda s: not entry.header.search(s) or marker in s.splitlines(),
                          timeout)
    exited = pane.until(lambda s: marker in (line.strip() for line in s.splitlines()),
                        timeout)
    return {"entry": entry.name, "first_line_s": None if said is None else said - t0,
            "tui_blank_s": blank if entry.quit_key == "q" else None,
            "first_paint_s": painted - t0,
            "restored_s": None if restored is None else restored - t1,
            "prompt_s": None if exited is None else exited - t1}


def entries(db: Path, model: str, repeat: int, run: str) -> list[Entry]:
    """Each entry point with --db after the command, then before it (the group's option)."""
    def argv(first: bool, *words: str) -> list[str]:
        store = ["--db", str(db)]
        return [str(NPU_DEPLOY), *(store if first else []), *words, *([] if first else store)]

    out = []
    for first in (False, True):
        tag = " (--db first)" if first else ""
        out += [
            Entry(f"deploy{tag}", argv(first, "deploy", model, "--run-id",
                                       f"bench-{repeat}-{int(first)}"), RUN_TITLE),
            Entry(f"tui{tag}", argv(first, "tui"), RUNS_TITLE),
            Entry(f"replay{tag}", argv(first, "replay", run), RUN_TITLE),
            Entry(f"attach{tag}", argv(first, "attach", run), RUN_TITLE),
            Entry(f"resume{tag}", argv(first, "resume", run), RESUMED, "C-c"),
        ]
    return out


def run_terminal(repeats: int, model: str, quit_after: float,
                 progress: Callable[[str], None]) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="npu-deploy-tui-term-",
                                     ignore_cleanup_errors=True) as tmp:
        db = Path(tmp) / "runs.db"
        env = {"TERM": "xterm-256color", "PS1": "$ ", "HOME": tmp,
               "NPU_DEPLOY_KEYMAP": str(Path(tmp) / "no-keymap.toml")}
        progress("  a headless deploy makes the run that replay, attach and resume open")
        first_run(db, model, env)
        pane = Pane(env)
        try:
            for i in range(repeats):
                for entry in entries(db, model, i, "bench"):
                    progress(f"  {entry.name} #{i + 1}")
                    samples.setdefault(entry.name, []).append(
                        measure(pane, entry, quit_after, timeout=120))
        finally:
            pane.close()
    return {"model": model, "quit_after_s": quit_after, "repeats": repeats,
            "samples": samples, "summary": {name: summary(s) for name, s in samples.items()}}


def first_run(db: Path, model: str, env: dict[str, str]) -> None:
    """Run "bench": a headless deploy stopped at phase 0's checkpoint (crashed there)."""
    from npu_deploy.store import EventStore, StoreUnreadable

    proc = subprocess.Popen([str(NPU_DEPLOY), "deploy", model, "--headless", "--run-id",
                             "bench", "--db", str(db)], env={**os.environ, **env},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 600
        while time.monotonic() < end and proc.poll() is None:
            time.sleep(0.5)
            try:
                with EventStore.open(db, readonly=True) as store:
                    if "bench" in store.run_ids() and \
                            store.fold("bench").phases[0].pending_checkpoint:
                        return
            except StoreUnreadable:
                pass
        raise SystemExit("the headless deploy did not reach phase 0's checkpoint")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def summary(samples: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key in ("first_line_s", "tui_blank_s", "first_paint_s", "restored_s", "prompt_s"):
        values = [s[key] for s in samples if s.get(key) is not None]
        out[f"{key}_median"] = statistics.median(values) if values else None
        out[f"{key}_max"] = max(values) if values else None
    return out


def print_terminal(r: dict[str, Any]) -> None:
    print(f"TUI entry points in a real terminal (tmux {WIDTH}x{HEIGHT}, {r['repeats']} runs "
          f"each, quit {r['quit_after_s']} s after the first paint, model {r['model']}); "
          "measured on the CPU, median (max):")
    print(f"  {'entry':20} {'first line':>14} {'TUI blank':>14} {'first frame':>14} "
          f"{'terminal restored':>18} {'prompt back':>14}")

    def cell(s: dict[str, Any], key: str) -> str:
        med, top = s[f"{key}_median"], s[f"{key}_max"]
        return "n/a" if med is None else f"{med:.2f} s ({top:.2f})"

    for name, s in r["summary"].items():
        print(f"  {name:20} {cell(s, 'first_line_s'):>14} {cell(s, 'tui_blank_s'):>14} "
              f"{cell(s, 'first_paint_s'):>14} {cell(s, 'restored_s'):>18} "
              f"{cell(s, 'prompt_s'):>14}")
    for name, samples in r["samples"].items():
        for s in samples:
            if "error" in s:
                print(f"  {name}: {s['error']}\n{s['screen']}")
