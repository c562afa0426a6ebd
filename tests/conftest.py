"""Shared fixtures (real store files in a temporary directory, the models, the command line),
and the markers by folder: every test under tests/tui/ is a `tui` test.

The tests import the project as it is installed: `python -m pytest` puts the working
directory on sys.path, where the package folders would load under their bare names
(`kernels`) beside `npu_deploy.kernels`, so it is taken off again here, and processes the
tests start inherit PYTHONSAFEPATH (as under `make test`)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT]
os.environ["PYTHONSAFEPATH"] = "1"

import pytest  # noqa: E402
from click.testing import CliRunner, Result  # noqa: E402
from filelock import FileLock  # noqa: E402

from npu_deploy.cli import main  # noqa: E402
from npu_deploy.store import EventStore  # noqa: E402

ERROR_PREFIX = "npu-deploy: error:"
TUI_TESTS = Path(__file__).resolve().parent / "tui"
#: issue 26's red team: every test there names its case (a conftest.py of its own would be
#: imported as `conftest` too, and hide this one from `from conftest import ...`)
REDTEAM_TESTS = Path(__file__).resolve().parent / "redteam"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parents = Path(str(item.fspath)).parents
        if TUI_TESTS in parents:
            item.add_marker(pytest.mark.tui)
        if REDTEAM_TESTS in parents:
            _check_redteam(item)
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    items[:] = longest_first(items, workers)


def _expected_length(item: pytest.Item) -> int:
    """How long a test is expected to take, by its markers: a whole deployment (e2e), or a
    test of the bundled model (minutes of its greedy runs), is longest, then a `slow` test,
    then the rest."""
    if item.get_closest_marker("e2e") or "smollm2" in getattr(item, "fixturenames", ()):
        return 2
    return 1 if item.get_closest_marker("slow") else 0


def longest_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The tests in the order pytest-xdist hands them out, so that the end of a run is not
    one long test on one worker: worksteal gives each worker a contiguous block of the list
    and a worker that runs out takes from the end of another's, so each block starts with
    its share of the longest tests and ends with short ones. Within a length each share is
    a contiguous run in file order (a module's fixtures set up once per worker, not per
    test). Every worker collects the same list, so every worker computes the same order."""
    lengths = sorted({_expected_length(item) for item in items}, reverse=True)
    groups = [[item for item in items if _expected_length(item) == n] for n in lengths]
    return [item for block in range(workers) for group in groups
            for item in group[block * len(group) // workers:(block + 1) * len(group) // workers]]


def _check_redteam(item: pytest.Item) -> None:
    mark = item.get_closest_marker("redteam")
    if mark is None:
        raise pytest.UsageError(f"{item.nodeid}: every red-team test names its case with "
                                "@pytest.mark.redteam(area=..., case=..., before=...)")
    missing = {"area", "case", "before"} - set(mark.kwargs)
    if missing:
        raise pytest.UsageError(f"{item.nodeid}: redteam marker lacks {sorted(missing)}")

STARTED = {"model": "tiny-llama", "backend": "emulator", "agent": "autopilot",
           "code_version": "test"}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def store(db_path: Path):
    s = EventStore.open(db_path)
    yield s
    s.close()


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str):
    """Converted and generated models go to one cache per test session, never to the
    user's: a run of the suite starts from what the project's own files build. The
    pytest-xdist workers share it (the folder above each worker's own), so the bundled
    model is de-quantized and each random model built once a session, not once a worker:
    models/sources.py builds under a file lock, and a worker that finds one being built
    waits for it."""
    path = shared_dir(tmp_path_factory, worker_id, "model-cache")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NPU_DEPLOY_CACHE", str(path))
        yield path


@pytest.fixture(scope="session", autouse=True)
def measured_here(tmp_path_factory: pytest.TempPathFactory):
    """Kernel times imported from validate-hardware reports go to a file of the session's,
    never the user's: no figure a test sees comes from this machine's imports."""
    path = tmp_path_factory.mktemp("measured-here") / "measured_here.json"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NPU_DEPLOY_MEASUREMENTS", str(path))
        yield path


@pytest.fixture(scope="session", autouse=True)
def air_objects(tmp_path_factory: pytest.TempPathFactory):
    """The micro-kernel objects' default folder (build-objects writes there, doctor and
    validate-hardware look there) is the session's, never the user's: not created, so a
    test sees no objects unless it builds or writes some."""
    path = tmp_path_factory.mktemp("air-objects") / "objects"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NPU_DEPLOY_AIR_OBJECTS", str(path))
        env.delenv("NPU_DEPLOY_MLIR_AIR_SOURCE", raising=False)
        yield path


def shared_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str) -> Path:
    """A folder of the test session's that every pytest-xdist worker sees (the folder above
    each worker's own), for what is made once a session rather than once a worker."""
    root = tmp_path_factory.getbasetemp()
    path = (root if worker_id == "master" else root.parent) / name
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session", autouse=True)
def anchor_key(tmp_path_factory: pytest.TempPathFactory, worker_id: str):
    """The key that anchors runs and signs decisions (store/anchor.py) is the session's,
    created on first use in a temporary directory, never the user's: one for all the
    workers, so that a run one worker deployed (`deployed_tiny_llama`) reads as anchored in
    another. And the fake pipeline is registered, so that runs naming it resume in this
    process and in those it starts."""
    folder = shared_dir(tmp_path_factory, worker_id, "anchor-key")
    path = folder / "key"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NPU_DEPLOY_KEY_FILE", str(path))
        env.setenv("NPU_DEPLOY_PIPELINES", "fake_pipeline:make")
        # Made now, not by whichever test writes first: a command that makes the key says
        # so on stderr (store/anchor.py), which would be one line more in that test's output.
        # Under a lock: the other workers read it only once it is whole.
        from npu_deploy.store.anchor import signing_key
        with FileLock(folder.parent / "anchor-key.lock"):
            signing_key()
        yield path


@pytest.fixture(autouse=True)
def node_files(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A matrix's node folder (its node key, its runs' stores) and the head's keyring of node
    keys (store/nodes.py) are each test's own, never the user's: a node a test enrolls is
    trusted by that test alone."""
    folder = tmp_path_factory.mktemp("node")
    monkeypatch.setenv("NPU_DEPLOY_NODE_DIR", str(folder / "node"))
    monkeypatch.setenv("NPU_DEPLOY_KEYRING", str(folder / "nodes.json"))
    monkeypatch.delenv("NPU_DEPLOY_NODE_KEY_FILE", raising=False)
    return folder


@pytest.fixture(scope="session")
def settings_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tui-settings")


@pytest.fixture(autouse=True)
def tui_settings(settings_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What the TUI keeps for its next launch (the theme, npu_tui/settings.py) goes to a file
    of each test's own, never the user's: a theme one test chooses is not the next one's."""
    path = settings_dir / f"{uuid.uuid4().hex}.toml"
    monkeypatch.setenv("NPU_DEPLOY_SETTINGS", str(path))
    return path


@pytest.fixture(scope="session")
def tiny_models(model_cache: Path):
    """The random test models, loaded once per session."""
    from npu_deploy.models.loading import load_model
    from npu_deploy.models.random_models import RANDOM_MODELS

    return {name: load_model(name) for name in RANDOM_MODELS}


@pytest.fixture(scope="session")
def smollm2(model_cache: Path):
    """The bundled SmolLM2-135M-Instruct, de-quantized into the session's cache."""
    from npu_deploy.models.loading import load_model

    return load_model("smollm2-135m")


#: the deployment several tests read (or damage, in a copy of their own): tiny-llama at a
#: short prompt and few greedy steps, through the command line as a user types it
TINY_DEPLOYMENT = ("deploy", "tiny-llama", "--headless", "--auto-approve", "--seq-len", "32",
                   "--steps", "8", "--run-id", "d1")


@dataclass(frozen=True)
class Deployed:
    """A copy of the shared tiny-llama deployment: its store, the run, and what `deploy`
    printed when it was made."""

    db: Path
    run_id: str
    stdout: str


@pytest.fixture(scope="session")
def tiny_llama_deployment(tmp_path_factory: pytest.TempPathFactory, worker_id: str,
                          model_cache: Path, anchor_key: Path) -> tuple[Path, str]:
    """TINY_DEPLOYMENT made once a session, not once a test: the first worker to need it
    deploys it under a lock into a folder every worker sees (the others wait, then read it),
    its WAL checkpointed into the store file. Returns the folder and deploy's output."""
    folder = shared_dir(tmp_path_factory, worker_id, "tiny-llama-deployment")
    printed = folder / "deploy.stdout"
    with FileLock(folder.parent / "tiny-llama-deployment.lock"):
        if not printed.exists():
            db = folder / "store" / "runs.db"
            result = CliRunner().invoke(main, ["--db", str(db), *TINY_DEPLOYMENT])
            assert result.exit_code == 0, result.stdout[-4000:] + result.stderr
            checkpoint(db)
            printed.write_text(result.stdout)
    return folder / "store", printed.read_text()


@pytest.fixture
def deployed(tiny_llama_deployment: tuple[Path, str], tmp_path: Path) -> Deployed:
    """The shared tiny-llama deployment, copied (store and workspaces) into this test's
    folder: the test may change or damage it."""
    store, stdout = tiny_llama_deployment
    copy = shutil.copytree(store, tmp_path / "deployed")
    return Deployed(copy / "runs.db", "d1", stdout)


def checkpoint(db: Path) -> None:
    """Everything of a store into its main file, no -wal or -shm beside it: a copy of the
    file alone is then the whole store."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


# --- the command line ------------------------------------------------------------------

@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Callable[..., object]:
    """The fake pipeline (tests/fake_pipeline.py) with its knobs set: a gate that fails its
    first attempts (fail="phase:times,..."), and the agent's steps per attempt."""
    from fake_pipeline import make

    def build(fail: str = "", steps: int = 3) -> object:
        monkeypatch.setenv("FAKE_FAIL", fail)
        monkeypatch.setenv("FAKE_STEPS", str(steps))
        return make()
    return build


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def cli(runner: CliRunner) -> Callable[..., Result]:
    def invoke(*args: object, env: dict[str, str | None] | None = None) -> Result:
        result = runner.invoke(main, [str(a) for a in args], env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception   # a traceback is never an acceptable answer
        return result
    return invoke



def assert_one_error(result: Result, *needles: str) -> str:
    assert result.exit_code != 0, result.stdout
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture(scope="session")
def bundled_quantized_tensors():
    """The first quantized tensor of each (block type, shape) in the bundled SmolLM2 GGUF,
    as {(GGMLQuantizationType, (rows, K)): bytes}. Read once: parsing the GGUF's metadata
    (its 49,152-token vocabulary) takes seconds."""
    import gguf

    from npu_deploy.models.sources import bundled_gguf

    found: dict = {}
    for t in gguf.GGUFReader(bundled_gguf()).tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0):
            key = (t.tensor_type, (int(t.shape[1]), int(t.shape[0])))
            if key not in found:
                found[key] = t.data.tobytes()
    return found
