"""Issue 39, point 9: the command line at scale and at start-up. `runs` reads the runs table
once and no run's events; `--help` and a command that only reads the store import neither
the model code, numpy, torch nor sqlite-utils (each command's module is imported when it
runs, npu_deploy/cli/group.py COMMANDS). The times themselves are measured by
`python -m benchmarks.scale_bench`, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from npu_deploy.events import NewEvent
from npu_deploy.store import EventStore

#: What a command that only reads the store never needs.
HEAVY = ("numpy", "torch", "sqlite_utils", "transformers", "npu_deploy.models",
         "npu_deploy.machine", "npu_deploy.pipeline", "textual")

STARTED = {"model": "tiny", "backend": "emulator", "agent": "autopilot", "code_version": "t"}


def store_of(db, runs: int) -> None:
    with EventStore.open(db) as store:
        for n in range(runs):
            with store.create_run(dict(STARTED), run_id=f"r{n}") as w:
                for i in range(5):
                    w.append(NewEvent("agent.message", {"role": "assistant", "text": f"m{i}"},
                                      actor="agent"))


def imported(*args: str) -> list[str]:
    """The HEAVY modules `npu-deploy ARGS` imported, in a fresh interpreter (this checkout's
    code: the test process's sys.path, as PYTHONPATH)."""
    program = ("import sys, runpy; sys.argv = ['npu-deploy', *sys.argv[1:]]\n"
               "try:\n    runpy.run_module('npu_deploy', run_name='__main__')\n"
               "except SystemExit as e:\n    code = e.code\n"
               f"print('\\n' + __import__('json').dumps([m for m in {HEAVY!r} "
               "if m in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", program, *args], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.redteam(area="scale", case="`runs` reads each run's events",
                     before="this test failed (the listing read through sqlite-utils); in "
                            "substance the listing was one query of the runs table, and the "
                            "12 s over 5,000 runs were Rich's table (11.9 s CPU over 10,000) "
                            "and a FileLock made per run to probe it (2.5 s)")
def test_runs_reads_the_runs_table_once_and_no_events(tmp_path):
    db = tmp_path / "runs.db"
    store_of(db, 30)
    statements: list[str] = []
    with EventStore.open(db, readonly=True) as store:
        store.conn.set_trace_callback(statements.append)
        listed = store.runs()
    assert len(listed) == 30 and {r.events for r in listed} == {6}
    assert len(statements) == 1 and "FROM runs" in statements[0]
    assert not any("events" in s.split("FROM", 1)[-1] for s in statements)


@pytest.mark.redteam(area="scale", case="--help imports the whole program",
                     before="`npu-deploy --help` imported sqlite-utils, numpy, the model code "
                            "and every command's dependencies: 0.55 s CPU here, 0.9 s wall "
                            "(0.12 s CPU after)")
def test_help_imports_nothing_heavy():
    assert imported("--help") == []


@pytest.mark.redteam(area="scale", case="a read command imports the whole program",
                     before="`runs` and `show` on a one-run store imported sqlite-utils, "
                            "numpy and the model code: 0.56 s and 0.71 s CPU here")
def test_read_commands_import_nothing_heavy(tmp_path):
    db = tmp_path / "runs.db"
    store_of(db, 1)
    assert imported("--db", str(db), "runs") == []
    assert imported("--db", str(db), "show", "r0") == []
    assert imported("--db", str(db), "verify", "r0") == []
