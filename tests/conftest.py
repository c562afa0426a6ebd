"""Shared fixtures (real store files in a temporary directory, the models, the command line),
and the markers by folder: every test under tests/tui/ is a `tui` test.

The tests import the project as it is installed: `python -m pytest` puts the working
directory on sys.path, where the package folders would load under their bare names
(`kernels`) beside `npu_deploy.kernels`, so it is taken off again here, and processes the
tests start inherit PYTHONSAFEPATH (as under `make test`)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT]
os.environ["PYTHONSAFEPATH"] = "1"

import pytest  # noqa: E402
from click.testing import CliRunner, Result  # noqa: E402

from npu_deploy.cli import main  # noqa: E402
from npu_deploy.store import EventStore  # noqa: E402

ERROR_PREFIX = "npu-deploy: error:"
TUI_TESTS = Path(__file__).resolve().parent / "tui"
#: issue 26's red team: every test there names its case (a conftest.py of its own would be
#: imported as `conftest` too, and hide this one from `from conftest import ...`)
REDTEAM_TESTS = Path(__file__).resolve().parent / "redteam"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parents = Path(str(item.fspath)).parents
        if TUI_TESTS in parents:
            item.add_marker(pytest.mark.tui)
        if REDTEAM_TESTS in parents:
            _check_redteam(item)


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
    root = tmp_path_factory.getbasetemp()
    path = (root if worker_id == "master" else root.parent) / "model-cache"
    path.mkdir(exist_ok=True)
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


@pytest.fixture(scope="session", autouse=True)
def anchor_key(tmp_path_factory: pytest.TempPathFactory):
    """The key that anchors runs and signs decisions (store/anchor.py) is the session's,
    created on first use in a temporary directory, never the user's; and the fake pipeline
    is registered, so that runs naming it resume in this process and in those it starts."""
    path = tmp_path_factory.mktemp("anchor-key") / "key"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NPU_DEPLOY_KEY_FILE", str(path))
        env.setenv("NPU_DEPLOY_PIPELINES", "fake_pipeline:make")
        # Made now, not by whichever test writes first: a command that makes the key says
        # so on stderr (store/anchor.py), which would be one line more in that test's output.
        from npu_deploy.store.anchor import signing_key
        signing_key()
        yield path


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
