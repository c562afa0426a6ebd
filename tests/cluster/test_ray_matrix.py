"""Issue 41's acceptance on Ray's multi-node cluster utilities: a head and three simulated
nodes on this machine, each a raylet of its own with `npu: 1`, its own node folder, node
key and user key. Real tiny deployments (the autopilot on the emulator), real Ray
scheduling, a node's processes really killed (`Cluster.remove_node`), Ray's own
rescheduling, decisions typed at the head.

One cluster per module and worker (about 5 s to start).

The undisturbed matrix also stands in for test_defaults_pass's deployment of tiny-llama at
16 tokens (`BY_MATRIX` there): the same deployment, every gate passing at its first attempt
and the whole toolbox worked through, run here through Ray rather than `deploy`."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from deployments import BY_MATRIX, first_attempts_or_the_bars_fix, worked_through_the_toolbox

from npu_deploy.cluster.compare import compare
from npu_deploy.cluster.driver import run_matrix
from npu_deploy.cluster.spec import MatrixSpec
from npu_deploy.events.decisions import waiting_on
from npu_deploy.store import EventStore
from npu_deploy.store.matrix import matrix_runs
from npu_deploy.store.nodes import enroll, node_key, revoke

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NODES = ("npu-a", "npu-b", "npu-c")
#: Ray notices a node is gone within a few seconds (the default waits ~30 s).
FAST_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
               "health_check_failure_threshold": 4}


class Head:
    """The simulated cluster, the head's store and keyring, and each node's folder."""

    def __init__(self, root: Path, cluster: Any, nodes: dict[str, Any]) -> None:
        self.root, self.cluster, self.nodes = root, cluster, nodes
        self.db = root / "head.db"
        self.keyring = root / "nodes.json"

    def store(self) -> EventStore:
        return EventStore.open(self.db, readonly=True)

    def book(self, matrix: str) -> dict[str, Any]:
        with self.store() as store:
            return {r.cell["model"]: r for r in matrix_runs(store.conn, matrix)}


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import ray
    from ray.cluster_utils import Cluster

    root = tmp_path_factory.mktemp("ray-head")
    env = {"NPU_DEPLOY_KEY_FILE": os.environ["NPU_DEPLOY_KEY_FILE"],
           "NPU_DEPLOY_KEYRING": str(root / "nodes.json"),
           "NPU_DEPLOY_NODE_DIR": str(root / "head-node")}
    saved = {k: os.environ.get(k) for k in (*env, "NPU_DEPLOY_NODE_KEY_FILE")}
    os.environ.update(env)
    os.environ.pop("NPU_DEPLOY_NODE_KEY_FILE", None)
    node_env = {}
    for name in NODES:                     # each node's key made there, enrolled at the head
        folder = root / name
        os.environ["NPU_DEPLOY_NODE_DIR"] = str(folder)
        key = node_key(create=True)
        assert key is not None
        enroll(name, key.public)
        node_env[name] = {"NPU_DEPLOY_NODE_DIR": str(folder),
                          "NPU_DEPLOY_KEY_FILE": str(folder / "user.key"),
                          "NPU_DEPLOY_KEYRING": str(root / "nodes.json")}
    os.environ["NPU_DEPLOY_NODE_DIR"] = env["NPU_DEPLOY_NODE_DIR"]
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "env_vars": env,
        "_system_config": FAST_HEALTH})
    nodes = {name: cluster.add_node(num_cpus=1, resources={"npu": 1}, env_vars=node_env[name])
             for name in NODES}
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        yield Head(root, cluster, nodes)
    finally:
        ray.shutdown()
        cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def keyring(head: Head, monkeypatch: pytest.MonkeyPatch) -> Head:
    """This test reads the head's store as the head's user: its keyring."""
    monkeypatch.setenv("NPU_DEPLOY_KEYRING", str(head.keyring))
    return head


def _gates(store: EventStore, run_id: str) -> list[tuple[Any, ...]]:
    """What a run concluded: every gate's verdict and metrics, every profile's figures, and
    its verdict, in order (ids, times and decisions' authors aside)."""
    out = []
    for e in store.events(run_id):
        if e.type == "gate.evaluated":
            out.append(("gate", e.phase, e.payload["passed"],
                        [(c["subject"], c["metric"], c["value"]) for c in e.payload["checks"]]))
        elif e.type == "profile.recorded":
            out.append(("profile", e.phase, e.payload["scope"], e.payload["total_s"],
                        e.payload["source"]))
        elif e.type == "run.finished":
            out.append(("finished", e.payload["verdict"]))
    return out


def _deployed_in_full(store: EventStore, run_id: str) -> None:
    """test_defaults_pass's checks of a tiny deployment, on a run a node made."""
    events = list(store.events(run_id))
    worked_through_the_toolbox(store, events)
    gates: dict[int, list[bool]] = {}
    numerics: list[dict[str, Any]] = []
    for e in events:
        if e.type == "gate.evaluated":
            gates.setdefault(e.phase, []).append(e.payload["passed"])
        if e.type == "debug.proposed" and e.phase == 3:
            numerics += [d["change"]["recipe"] for d in e.payload["directions"]
                         if d.get("change") and d["change"].get("recipe")]
    first_attempts_or_the_bars_fix(gates, numerics)


def _a_matrix_of_tiny_deployments_lands_in_the_head_store_each_run_verified(keyring: Head
                                                                          ) -> None:
    spec = MatrixSpec(name="m1", models=("tiny-llama", "tiny-qwen2"), seq_lens=(16,))
    outcome = run_matrix(spec, keyring.db, say=lambda _line: None)
    assert sorted((c.cell.model, c.verdict) for c in outcome.cells) \
        == [("tiny-llama", "PASS"), ("tiny-qwen2", "PASS")]
    book = keyring.book("m1")
    with keyring.store() as store:
        for model, row in book.items():
            assert row.state == "finished" and row.node in NODES and row.tries == 1
            if (model, 16) in BY_MATRIX:
                _deployed_in_full(store, row.run_id)
            report = store.verify(row.run_id)
            assert report.trusted, report.line()
            assert report.made_on == (f"{row.node} (v1-v{report.events})",)
            # the node kept its own copy: the very same chain
            with EventStore.open(keyring.root / row.node / "runs" / f"{row.run_id}.db",
                                 readonly=True) as node_store:
                assert node_store.fold(row.run_id).last_hash == report.head_hash
        assert outcome.events == sum(store.fold(r.run_id).version for r in book.values())


def test_a_matrix_across_three_nodes_lands_verified_survives_a_killed_node_and_takes_decisions(
        keyring, cli):
    """One test, in order (pytest-xdist may hand a module's tests to two workers, and the
    second part compares its run with the first's): the undisturbed matrix, then the same
    cells with a node killed and decisions typed at the head, then a node the head no longer
    trusts."""
    _a_matrix_of_tiny_deployments_lands_in_the_head_store_each_run_verified(keyring)
    _a_killed_node_s_run_resumes_on_another_and_decisions_typed_at_the_head_arrive_once(
        keyring, cli)
    _a_cell_that_fails_for_a_reason_no_retry_changes_is_not_retried(keyring)


def _wait_for(what: str, check: Any, timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _waiting_at(head: Head, run_id: str, phase: int, attempt: int = 1) -> bool:
    if not head.db.exists():          # the matrix has not made its store yet
        return False
    with head.store() as store:
        if run_id not in store.run_ids():
            return False
        state = store.fold(run_id)
        waiting = waiting_on(state)
        return (waiting.kind == "checkpoint" and state.current_phase == phase
                and state.phases[phase].attempts == attempt)


def _decide(cli: Any, head: Head, run_id: str, *args: str) -> None:
    r = cli("--db", head.db, "decide", run_id, *args)
    assert r.exit_code == 0, r.stderr


def _a_killed_node_s_run_resumes_on_another_and_decisions_typed_at_the_head_arrive_once(
        keyring: Head, cli: Any) -> None:
    """Both runs wait at phase 1's checkpoint on their nodes. The node of one is killed: Ray
    runs its task again on the third node, which takes the run over from the head's copy and
    waits at the same checkpoint; approved from the head, it ends exactly as the undisturbed
    run of the same cell (the first test's). The other is redirected from the head ('retry
    with seed 7'): the node records the redirect once, phase 1 runs again, and it passes."""
    head = keyring
    spec = MatrixSpec(name="m2", models=("tiny-llama", "tiny-qwen2"), seq_lens=(16,),
                      pause_at=(1,))
    result: dict[str, Any] = {}
    driver = threading.Thread(target=lambda: result.update(
        outcome=run_matrix(spec, head.db, say=lambda _line: None)), daemon=True)
    driver.start()
    llama, qwen = (c.run_id("m2") for c in spec.cells())
    _wait_for("both runs at phase 1's checkpoint",
              lambda: _waiting_at(head, llama, 1) and _waiting_at(head, qwen, 1))
    first_node = head.book("m2")["tiny-llama"].node
    head.cluster.remove_node(head.nodes[first_node])          # its raylet and workers die
    taken = _wait_for("the run taken over by another node", lambda: (
        (row := head.book("m2")["tiny-llama"]).tries == 2 and row.node != first_node and row))
    with head.store() as store:
        held = store.fold(llama).version
    time.sleep(2)         # the new node has resumed and ships nothing new while it waits
    assert _waiting_at(head, llama, 1)
    _decide(cli, head, llama, "approve")
    _decide(cli, head, qwen, "redirect", "retry with seed 7")
    _wait_for("the redirected phase 1 at its checkpoint again",
              lambda: _waiting_at(head, qwen, 1, attempt=2))
    _decide(cli, head, qwen, "approve")
    driver.join(timeout=600)
    outcome = result["outcome"]
    assert sorted((c.cell.model, c.verdict) for c in outcome.cells) \
        == [("tiny-llama", "PASS"), ("tiny-qwen2", "PASS")]
    with head.store() as store:
        # the resumed run: its chain whole, made on two nodes, ending as the undisturbed one
        report = store.verify(llama)
        assert report.trusted, report.line()
        assert [m.split(" ")[0] for m in report.made_on] == [first_node, taken.node]
        assert int(report.made_on[0].rsplit("-v", 1)[1].rstrip(")")) <= held
        assert _gates(store, llama) == _gates(store, "m1.tiny-llama.s16.emulator.autopilot")
        # the redirect typed at the head: recorded once, consumed at the head once
        decisions = [e.payload for e in store.events(qwen) if e.type == "human.decision"]
        redirects = [d for d in decisions if d.get("instruction") == "retry with seed 7"]
        assert len(redirects) == 1 and redirects[0]["author"] != "policy"
        assert store.pending_commands(qwen) == [] and store.pending_commands(llama) == []
        assert store.unbacked_decisions(qwen) == {}
        assert store.verify(qwen).trusted
        seeds = [e.payload for e in store.events(qwen)
                 if e.type == "phase.entered" and e.phase == 1]
        assert len(seeds) == 2
        # `matrix compare m1 m2`: the resumed cell marks nothing
        (same,) = [c for c in compare(store, "m1", "m2").cells if c.cell.model == "tiny-llama"]
        assert not [row for row in same.rows if row.regression]
    node_db = head.root / head.book("m2")["tiny-qwen2"].node / "runs" / f"{qwen}.db"
    with EventStore.open(node_db, readonly=True) as node_store:
        held_commands = node_store.conn.execute(
            "SELECT count(*) FROM inbox WHERE run_id = ? AND kind = 'redirect'",
            (qwen,)).fetchone()[0]
    assert held_commands == 1


def _a_cell_that_fails_for_a_reason_no_retry_changes_is_not_retried(keyring: Head) -> None:
    """A node the head does not trust: its task raises, and Ray does not run it again."""
    import ray

    spec = MatrixSpec(name="m3", models=("tiny-llama",), seq_lens=(16,))
    with open(keyring.keyring) as f:
        saved = f.read()
    for name in NODES:
        revoke(name)
    try:
        outcome = run_matrix(spec, keyring.db, say=lambda _line: None)
    finally:
        with open(keyring.keyring, "w") as f:
            f.write(saved)
    (cell,) = outcome.cells
    assert cell.state == "error" and "revoked" in cell.detail and outcome.exit_code == 1
    row = keyring.book("m3")["tiny-llama"]
    assert row.state == "error" and row.tries == 1      # one try: Ray ran it once
    assert ray.is_initialized()


def test_a_head_that_dies_mid_matrix_loses_nothing_and_the_matrix_run_again_finishes(keyring):
    """`npu-deploy matrix` (the head's driver and its collector) is killed while its run
    waits on a node; Ray ends that task with its owner. Run again under the same name, the
    matrix takes the run over from what the head holds and finishes it: the chain the head
    held is the start of the final one, each event once."""
    import signal
    import subprocess
    import sys

    head = keyring
    args = [sys.executable, "-m", "npu_deploy", "--db", str(head.db), "matrix", "--address",
            head.cluster.address, "--name", "m4", "--model", "tiny-llama", "--seq-len", "16",
            "--pause-at", "1"]
    run_id = "m4.tiny-llama.s16.emulator.autopilot"
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for("the run at phase 1's checkpoint", lambda: _waiting_at(head, run_id, 1))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    with head.store() as store:
        held = [(e.run_version, e.hash) for e in store.events(run_id)]
    second = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for("the run taken over", lambda: head.book("m4")["tiny-llama"].tries == 2)
    _wait_for("the run at phase 1's checkpoint again", lambda: _waiting_at(head, run_id, 1))
    r = subprocess.run([sys.executable, "-m", "npu_deploy", "--db", str(head.db), "decide",
                        run_id, "approve"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, out + err
    assert f"{run_id}: PASS on " in out and "matrix m4: 1 cells" in out
    with head.store() as store:
        report = store.verify(run_id)
        assert report.trusted, report.line()
        final = [(e.run_version, e.hash) for e in store.events(run_id)]
        assert final[:len(held)] == held
        types = [e.type for e in store.events(run_id)]
        assert types.count("run.started") == 1 and types.count("run.finished") == 1
        assert [e.payload["verdict"] for e in store.events(run_id)
                if e.type == "run.finished"] == ["PASS"]
