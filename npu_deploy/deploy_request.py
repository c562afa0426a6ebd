"""What a new deployment is asked for, and the checks it passes before any run is created:
the one home of the rules that `npu-deploy deploy` and the TUI's new-deployment form share
(the model must load, the backend must be on this machine, Claude needs its key, the prompt
length has bounds). A stored run resumed passes the same checks of its key and its NPU, by
one function that `npu-deploy resume` and the TUI's resume both call (`resume_run`). The
checks import what they check lazily: the command line and the TUI read the choices below
without importing torch or the NPU runtime."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from npu_deploy.models import BUNDLED as BUNDLED  # the form offers it by name
from npu_deploy.models.random_models import DEPLOYABLE

T = TypeVar("T")

#: The models to choose from by name (besides a path): the bundled one and the tiny random
#: ones (npu_deploy.models; `npu-deploy models` lists them with the catalog).
TINY_MODELS = DEPLOYABLE

#: As machine.pipelines registers them (named here too: the CLI imports the machine lazily).
DEFAULT_PIPELINE = "npu_deploy.agents.autopilot:pipeline"
CLAUDE_PIPELINE = "npu_deploy.agents.claude:pipeline"

BACKENDS = ("emulator", "xrt")
AGENTS = ("autopilot", "claude")
#: --seq-len, the prefill length of the gates' long prompt and of the optimized plans: the
#: bounds `deploy` has always taken.
SEQ_LEN = (8, 2048)
DEFAULT_SEQ_LEN = 128
#: Where the xrt backend's micro-kernel objects are (--air-objects).
AIR_OBJECTS_ENV = "NPU_DEPLOY_AIR_OBJECTS"


@dataclass(frozen=True)
class Problem:
    """One refused field: `field` is the form's field and the option's name (model, backend,
    agent, seq_len); `usage` a wrong option (exit 2), else a model that cannot deploy."""

    field: str
    message: str
    usage: bool = True


class Refused(ValueError):
    """A request that must not become a run, with every problem found, in the order the
    command line reports them (it prints the first)."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems[0].message)
        self.problems = problems

    def by_field(self) -> dict[str, str]:
        return {p.field: p.message for p in reversed(self.problems)}


@dataclass(frozen=True)
class DeployRequest:
    """`npu-deploy deploy MODEL` with its options, as the command line and the TUI take them."""

    model: str
    backend: str = "emulator"
    agent: str = "autopilot"
    seq_len: int = DEFAULT_SEQ_LEN
    steps: int = 32
    auto_approve: bool = False
    pause_at: frozenset[int] = frozenset()
    budget: int = 3                       # attempts of a phase before it stops for a person
    pipeline: str | None = None           # module:function; default by the agent
    claude_model: str | None = None
    agent_budget: str = ""
    sandbox_limits: str = ""              # what Claude's commands may write
    seed_fault: str | None = None
    air_objects: str | None = None
    repeats: int | None = None


@dataclass(frozen=True)
class Deployment:
    """A checked request: the pipeline that works it and the run's config."""

    request: DeployRequest
    pipeline: str
    config: dict[str, Any] = field(default_factory=dict)

    def policy(self) -> Any:
        from npu_deploy.machine import Policy

        r = self.request
        return Policy(auto_approve=r.auto_approve, pause_at=r.pause_at, budget=r.budget)


def checked(request: DeployRequest, with_model: bool = True) -> Deployment:
    """The pipeline and config of `request`, or Refused with every problem in it. Nothing is
    stored: this runs before any run is created. Without `with_model` the model is left to
    `check_model` later (the TUI checks it in a worker, after its first frame)."""
    problems: list[Problem] = []

    def attempt(check: Callable[[], T]) -> T | None:
        try:
            return check()
        except Refused as e:
            problems.extend(e.problems)
            return None

    attempt(lambda: check_seq_len(request.seq_len))
    npu = attempt(lambda: npu_config(request.backend, request.air_objects, request.repeats))
    claude = attempt(lambda: claude_config(request.agent, request.claude_model,
                                           request.agent_budget, request.sandbox_limits))
    pipeline = request.pipeline or (CLAUDE_PIPELINE if request.agent == "claude"
                                    else DEFAULT_PIPELINE)
    if with_model and checks_model(pipeline):
        attempt(lambda: check_model(request.model))
    if problems:
        raise Refused(problems)
    config = {"pipeline": pipeline, "seq_len": request.seq_len, "steps": request.steps,
              "fault": request.seed_fault, **({"claude": claude} if claude else {}), **(npu or {})}
    return Deployment(request, pipeline, config)


def code_version() -> str:
    """The npu-deploy a run was started by, as installed (run.started records it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("npu-deploy")
    except PackageNotFoundError:
        return "0+unknown"


def checks_model(pipeline: str) -> bool:
    """The bundled pipelines deploy the model the run names; another brings its own."""
    return pipeline in (DEFAULT_PIPELINE, CLAUDE_PIPELINE)


def check_seq_len(value: int | str) -> int:
    """The prompt length, from a number or the text a person typed."""
    low, high = SEQ_LEN
    try:
        n = int(str(value).strip())
    except ValueError:
        raise Refused([Problem("seq_len", f"seq-len {str(value)!r} is not a whole number of "
                                          f"tokens ({low}-{high})")]) from None
    if not low <= n <= high:
        raise Refused([Problem("seq_len", f"seq-len {n} is not in {low}-{high} tokens")])
    return n


def check_model(spec: str) -> None:
    """Refuse a model the autopilot cannot deploy: its config and its weight files are read
    (the weights' headers, not their tensors), so a damaged checkpoint is a one-line error
    and no run, not a run that dies in phase 0. The bundled GGUF is de-quantized (and a tiny
    model built) into the cache the first time: call it off a UI thread."""
    from npu_deploy.kernels.plans.plan import unplannable
    from npu_deploy.models import OracleError, model_args, resolve
    from npu_deploy.models.config import read_config
    from npu_deploy.models.files import check_safetensors

    if not spec.strip():
        raise Refused([Problem("model", "no model: give the bundled model's name, a tiny "
                                        "model's, a Hugging Face directory or a .gguf file",
                               usage=False)])
    try:
        source = resolve(spec)
        args = model_args(read_config(source.directory / "config.json"), spec)
        check_safetensors(source.directory)
    except OracleError as e:
        raise Refused([Problem("model", str(e), usage=False)]) from None
    gaps = unplannable(args)
    if gaps:
        raise Refused([Problem("model", f"{spec}: its FP32 oracle runs, but the NPU path has "
                                        f"no kernel yet for {', '.join(gaps)}; deploy a "
                                        "model without them", usage=False)])


def needs_key(what: str) -> None:
    """Claude's agent and a run it works need the Anthropic API key in the environment."""
    import os

    from npu_deploy.agents.claude import KEY_ENV

    if not os.environ.get(KEY_ENV):
        raise Refused([Problem("agent", f"{what} needs {KEY_ENV} in the environment (an "
                                        "Anthropic API key); or deploy with the offline "
                                        "autopilot (the default)")])


def claude_config(agent: str, option: str | None, budget: str,
                  sandbox: str = "") -> dict[str, Any] | None:
    """--agent claude: the key must be there, the model priced, the budget and the sandbox's
    limits well formed."""
    if agent not in AGENTS:
        raise Refused([Problem("agent", f"no agent {agent!r}: {', '.join(AGENTS)}")])
    if agent != "claude":
        if sandbox:
            raise Refused([Problem("agent", "--sandbox-limits is for --agent claude: the "
                                            "autopilot runs no commands")])
        return None
    from npu_deploy.agents.claude import Budget, ClaudeConfig, model_from_env, price_of
    from npu_deploy.agents.claude.limits import SandboxLimits

    needs_key("--agent claude")
    model = model_from_env(option)
    try:
        price_of(model)
        limits = Budget.parse(budget)
        writes = SandboxLimits.parse(sandbox)
    except ValueError as e:
        raise Refused([Problem("agent", str(e))]) from None
    return ClaudeConfig(model=model, budget=limits, sandbox=writes).to_config()


def needs_npu(what: str, objects: str | None) -> None:
    """Refused unless this machine can run the xrt backend with `objects`."""
    from npu_deploy.kernels.npu_runtime.xrt_runtime import XrtError, require

    try:
        require(objects=objects)
    except XrtError as e:
        raise Refused([Problem("backend", f"{what}: {e}")]) from None


def npu_config(backend: str, air_objects: str | None, repeats: int | None) -> dict[str, Any]:
    """The run's config for the backend: nothing on the emulator; on a real NPU, where the
    kernel objects are and how often each profile runs."""
    if backend not in BACKENDS:
        raise Refused([Problem("backend", f"no backend {backend!r}: {', '.join(BACKENDS)}")])
    if repeats is not None and backend != "xrt":
        raise Refused([Problem("backend", "--repeats is for --backend xrt: the emulator's "
                                          "times are modeled, one exact figure each")])
    if backend != "xrt":
        return {}
    needs_npu("--backend xrt", air_objects)
    from npu_deploy.pipeline.workspace import air_cache_dir

    return {"backend": "xrt", "air_objects": str(Path(str(air_objects)).resolve()),
            "air_cache": str(air_cache_dir()),
            **({"npu_repeats": repeats} if repeats is not None else {})}


# --- a stored run resumed -----------------------------------------------------------------

def _quiet(what: str) -> None:
    """`resume_run`'s `loading` when no one shows it."""


def resume_checked(store: Any, run_id: str, pipeline: str | None = None) -> str:
    """The pipeline `run_id` resumes with (`pipeline`, the person's own choice, else the
    registered one the run names), once this machine can go on with it: Claude's key for a
    run Claude works, the NPU for an xrt run. Refused otherwise (an unregistered pipeline is
    no usage error: the run names it). Nothing is loaded nor stored."""
    from npu_deploy.machine.pipelines import PipelineRefused, canonical_pipeline, stored_pipeline
    from npu_deploy.machine.reopen import run_config
    from npu_deploy.store.matrix import node_holding

    node = node_holding(store.conn, run_id)
    if node is not None:
        raise Refused([Problem("run", f"run {run_id} is worked by {node} for its matrix: a "
                                      "second writer here would split it from its node. "
                                      f"Leave decisions with `npu-deploy decide {run_id}`; a "
                                      "matrix run again takes an abandoned run over",
                               usage=False)])

    try:
        # The run's own pipeline only if registered: its name may come from an export file.
        spec = canonical_pipeline(pipeline) if pipeline else stored_pipeline(store, run_id)
    except PipelineRefused as e:
        raise Refused([Problem("pipeline", str(e), usage=False)]) from None
    config = run_config(store, run_id)
    if spec == CLAUDE_PIPELINE:
        needs_key(f"run {run_id} is worked by Claude: resuming it")
    if config.get("backend") == "xrt":
        needs_npu(f"run {run_id} runs on the NPU: resuming it", config.get("air_objects"))
    return spec


def resume_run(store: Any, run_id: str, *, pipeline: str | None = None,
               on_event: Callable[[Any], None] | None = None, adopt: bool = False,
               loading: Callable[[str], None] = _quiet) -> Any:
    """The one resume of a stored run, for `npu-deploy resume` and the TUI: the checks of
    `resume_checked`, the pipeline loaded (a pipeline that cannot load is Refused), then
    machine.resume, which returns the conductor that goes on (or raises RunLocked,
    Unanchored, RunEnded). Before machine.resume nothing is stored."""
    from npu_deploy.machine import load_pipeline, resume

    spec = resume_checked(store, run_id, pipeline)
    loading(f"loading the pipeline {spec} …")
    try:
        loaded = load_pipeline(spec)
    except ValueError as e:
        raise Refused([Problem("pipeline", str(e))]) from None
    return resume(store, run_id, loaded, on_event=on_event, adopt=adopt)


# --- a redirect checked before it is sent (the TUI's decision dialog) ---------------------

def autopilot_forms(phase: int) -> str:
    """The forms of instruction the autopilot follows at `phase`, short."""
    from npu_deploy.agents.instructions import forms_at

    return forms_at(phase)


def autopilot_understands(phase: int) -> str:
    """What the autopilot follows in a redirect of `phase`, in a sentence."""
    from npu_deploy.agents.instructions import understood_at

    return understood_at(phase)


def autopilot_refusal(instruction: str, phase: int) -> str | None:
    """Why the autopilot could not follow `instruction` at `phase` (brief), or None."""
    from npu_deploy.agents.instructions import parse

    understood = parse(instruction, phase, brief=True)
    return understood if isinstance(understood, str) else None
