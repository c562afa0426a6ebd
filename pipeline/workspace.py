"""What the agents and the gates of one run share: the run's settings, its model, and its
artifacts in the store.

Everything a later phase or a gate needs is an artifact: a blob (JSON or safetensors) whose
reference is in the result of a completed tool step. `Workspace.latest` finds the newest
one, so a resumed run, a gate and the evaluator all read what was recorded, never what an
agent holds in memory. The loaded model is the one exception: it is a pure function of the
model spec in `run.started`, so it is cached per process.

The backend is the run's choice (`--backend`): the emulator (the NPU's numerics on the CPU,
times modeled) or the NPU through XRT (`kernels.npu_runtime.npu_backend`: times measured).
`Workspace.time` gives a plan's profile either way, saying which it is. Files a run writes (the
MLIR-AIR programs, the Claude agent's scratch) live in its directory next to the store
(`workspace_dir`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from npu_deploy.events import progress
from npu_deploy.kernels.definition.hardware import HARDWARE, Hardware
from npu_deploy.kernels.definition.specs import Decode, Prefill, prompt_prefill, run_decode
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.npu_runtime.npu_backend import REPEATS
from npu_deploy.kernels.performance.model import Profile, estimate
from npu_deploy.kernels.plans.plan import DispatchPlan
from npu_deploy.kernels.plans.plan_runner import PlanRunner
from npu_deploy.oracle.prompts import DEFAULT_SEQ_LEN, Prompt, canonical_prompts
from npu_deploy.pipeline.deployed import DeployedModel, PlanCache
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.store import EventStore

# The phase-3 gate's greedy tokens per prompt (docs/design.md#phase-3-full-model).
GREEDY_STEPS = 32


@dataclass(frozen=True)
class Settings:
    """A run's deployment settings, from its run.started config."""

    model: str
    seq_len: int = DEFAULT_SEQ_LEN
    steps: int = GREEDY_STEPS
    hw: str = "xdna2"
    fault: str | None = None        # a seeded fault (a drill), see agents.autopilot
    backend: str = "emulator"       # emulator | xrt
    air_objects: str | None = None  # xrt: the compiled micro-kernel objects
    air_cache: str | None = None    # xrt: the compiled programs, by content hash
    npu_runtime: str | None = None  # xrt: module:function giving the runner and compiler
    repeats: int = REPEATS          # xrt: measured runs per profile, after a warm run

    @classmethod
    def of(cls, model: str, config: dict[str, Any]) -> Settings:
        return cls(model, int(config.get("seq_len", DEFAULT_SEQ_LEN)),
                   int(config.get("steps", GREEDY_STEPS)), str(config.get("hw", "xdna2")),
                   config.get("fault"), str(config.get("backend", "emulator")),
                   config.get("air_objects"), config.get("air_cache"),
                   config.get("npu_runtime"), int(config.get("npu_repeats", REPEATS)))

    @property
    def prefill(self) -> Prefill:
        """The prefill the deployment runs on a prompt of seq_len tokens (padded:
        `prompt_prefill`), as the gates, the evaluator and the report price it."""
        return prompt_prefill(self.seq_len)

    @property
    def decode(self) -> Decode:
        """The decode step a generation of `steps` tokens after a prompt of seq_len runs,
        its decode attention built for that whole context (`run_decode`)."""
        return run_decode(self.seq_len, self.steps)

    @property
    def measured(self) -> bool:
        """Whether NPU times are measured (xrt) or modeled (the emulator)."""
        return self.backend == "xrt"


def workspace_dir(store_path: Path, run_id: str) -> Path:
    """The run's working directory: next to the store, one per run."""
    return Path(store_path).resolve().parent / "workspaces" / run_id


def air_cache_dir() -> Path:
    """Where compiled programs are kept across runs: $NPU_DEPLOY_AIR_CACHE, else
    ~/.cache/npu-deploy/air."""
    env = os.environ.get("NPU_DEPLOY_AIR_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "npu-deploy" / "air"


def _npu_backend(ws: Workspace) -> Any:
    """The NPU backend of an xrt run: pyxrt and mlir-air, unless the run's config names
    another runtime (`npu_runtime`, module:function of the workspace returning the
    backend's `runner` and `compiler`: the simulated NPU of the tests is one)."""
    from npu_deploy.kernels.npu_runtime.npu_backend import NpuBackend
    s = ws.settings
    if not s.air_objects:
        raise ValueError("a run on the xrt backend needs its micro-kernel objects "
                         "(deploy --air-objects DIR)")
    runtime: dict[str, Any] = {}
    if s.npu_runtime:
        import importlib
        module, _, function = s.npu_runtime.partition(":")
        runtime = getattr(importlib.import_module(module), function)(ws)
    return NpuBackend(cache=Path(s.air_cache) if s.air_cache else air_cache_dir(),
                      objects=Path(s.air_objects), programs=ws.directory / "air" / "compiled",
                      hw=ws.hw, **runtime)


#: The backends a run can name, each built from its workspace.
BACKENDS: dict[str, Callable[[Workspace], Any]] = {
    "emulator": lambda ws: EmulatorBackend(), "xrt": _npu_backend}


def blob_json(store: EventStore, value: Any) -> str:
    return store.put_blob(json.dumps(value, sort_keys=True).encode())


def read_json(store: EventStore, ref: str) -> Any:
    return json.loads(store.get_blob(ref))


def blob_tensors(store: EventStore, tensors: dict[str, torch.Tensor]) -> str:
    from safetensors.torch import save
    return store.put_blob(save({k: v.contiguous() for k, v in tensors.items()}))


def read_tensors(store: EventStore, ref: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load
    return load(store.get_blob(ref))


class Workspace:
    """One run's settings, model and artifacts."""

    def __init__(self, store: EventStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        first = store.event_at(run_id, 1)
        if first is None:
            raise KeyError(f"run {run_id} has no events")
        self.settings = Settings.of(first.payload["model"], first.payload.get("config") or {})
        if self.settings.backend not in BACKENDS:
            raise ValueError(f"run {run_id} names backend {self.settings.backend!r}; this "
                             f"build has {', '.join(BACKENDS)}")

    @cached_property
    def backend(self) -> Any:
        return BACKENDS[self.settings.backend](self)

    def release_backend(self) -> None:
        """Let another process have the device: the NPU backend closes its contexts and
        its lock (it opens them again when next used)."""
        self.__dict__.pop("runner", None)
        backend = self.__dict__.pop("backend", None)
        if backend is not None and hasattr(backend, "close"):
            backend.close()

    @property
    def directory(self) -> Path:
        return workspace_dir(self.store.path, self.run_id)

    @property
    def hw(self) -> Hardware:
        return HARDWARE[self.settings.hw]

    @cached_property
    def loaded(self) -> Any:
        return _load(self.settings.model)

    def prompts(self) -> list[Prompt]:
        chat = bool(getattr(self.loaded.tokenizer, "chat_template", None))
        return canonical_prompts(self.settings.seq_len, chat=chat)

    def block_prompt(self) -> Prompt:
        """The prompt of exactly seq_len tokens: goldens, the block and the lens."""
        return self.prompts()[-1]

    def ids(self, prompt: Prompt) -> torch.Tensor:
        return prompt.token_ids(self.loaded.tokenizer)

    def deployed(self, recipe: Recipe) -> DeployedModel:
        """The recipe deployed on this run's backend, sharing the runner and the plans
        built lately (a check signature builds every plan a check runs; the check then
        runs them, and a recipe that changes one mode's transforms shares the other's)."""
        a = self.loaded
        return DeployedModel(self.settings.model, a.args, a.weights, recipe, self.backend,
                             self.hw, self.runner, self.plans)

    @cached_property
    def plans(self) -> PlanCache:
        """The plans this workspace built, by recipe and mode (`PlanCache`)."""
        return PlanCache()

    def time(self, plan: DispatchPlan) -> Profile:
        """The plan's profile: measured on the NPU on the xrt backend (a prefill on the
        block prompt's tokens; a decode step after the recipe's prefill of as many), else
        modeled."""
        if not self.settings.measured:
            return estimate(plan, self.hw)
        from npu_deploy.kernels.npu_runtime.npu_backend import measure
        runner = self.runner
        ids = self.ids(self.block_prompt())
        if isinstance(plan.mode, Prefill):
            return measure(runner, plan, _cycled(ids, plan.mode.seq),
                           repeats=self.settings.repeats)
        prefill = self.recipe().plan(self.settings.model, self.loaded.args,
                                     prompt_prefill(plan.mode.pos), self.hw)
        cache = runner.run(prefill, _cycled(ids, plan.mode.pos)).cache
        return measure(runner, plan, ids[-1:], cache, self.settings.repeats)

    @cached_property
    def runner(self) -> PlanRunner:
        """The one plan runner of the model on the backend, for every deployed run and
        measurement (its bf16 weights and GEMM operands prepared once)."""
        return PlanRunner(self.loaded.args, self.loaded.weights, self.backend)

    # --- artifacts -------------------------------------------------------------------

    def latest(self, key: str, *, tool: str | None = None) -> dict[str, Any] | None:
        """The newest completed step result (of `tool`, if given) that holds `key`."""
        found = None
        for e in self.store.events(self.run_id, types=("tool.completed",)):
            p = e.payload
            if p["ok"] and key in p["result"] and (tool is None or p["tool"] == tool):
                found = p["result"]
        return found

    def recipe(self) -> Recipe:
        """The recipe as the newest step that changed it left it (the empty recipe before
        phase 1 chose any configuration)."""
        r = self.latest("recipe")
        return Recipe() if r is None else Recipe.from_json(self.store.get_blob(r["recipe"]))

    def put_recipe(self, recipe: Recipe) -> str:
        return self.store.put_blob(recipe.to_json())


def _cycled(ids: torch.Tensor, n: int) -> torch.Tensor:
    """n tokens: the prompt's, repeated as needed."""
    return ids.repeat(-(-n // int(ids.shape[0])))[:n]


_MODELS: dict[str, Any] = {}


def _load(spec: str) -> Any:
    from npu_deploy.models.loading import load_model

    if spec not in _MODELS:
        _MODELS.clear()             # one model at a time: they can be large
        with progress.stage("loading the model", 1):
            _MODELS[spec] = load_model(spec)
            progress.advance()
    return _MODELS[spec]


def workspace_of(run: Any) -> Workspace:
    """The workspace of the run a PhaseRun belongs to: one per conductor, kept on it, so it
    holds that conductor's open store and goes away with it. A module-level cache would
    outlive the store: a run resumed in the same process (the TUI after a decision) would
    read through a closed connection."""
    c = run.conductor
    if c.workspace is None or c.workspace.store is not c.store:
        c.workspace = Workspace(c.store, c.run_id)
    ws: Workspace = c.workspace
    return ws
