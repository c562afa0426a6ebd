"""What the agents and the gates of one run share: the run's settings, its model, and its
artifacts in the store.

Everything a later phase or a gate needs is an artifact: a blob (JSON or safetensors) whose
reference is in the result of a completed tool step. `Workspace.latest` finds the newest
one, so a resumed run, a gate and the evaluator all read what was recorded, never what an
agent holds in memory. The loaded model is the one exception: it is a pure function of the
model spec in `run.started`, so it is cached per process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from kernels.emulator import EmulatorBackend
from kernels.hardware import HARDWARE, Hardware
from oracle.prompts import DEFAULT_SEQ_LEN, Prompt, canonical_prompts
from store import EventStore

from .runtime import DeployedModel, Recipe

GREEDY_STEPS = 32       # the phase-3 gate's greedy tokens per prompt (ARCHITECTURE.md)


@dataclass(frozen=True)
class Settings:
    """A run's deployment settings, from its run.started config."""

    model: str
    seq_len: int = DEFAULT_SEQ_LEN
    steps: int = GREEDY_STEPS
    hw: str = "xdna2"
    fault: str | None = None        # a seeded fault (a drill), see skills.autopilot

    @classmethod
    def of(cls, model: str, config: dict[str, Any]) -> Settings:
        return cls(model, int(config.get("seq_len", DEFAULT_SEQ_LEN)),
                   int(config.get("steps", GREEDY_STEPS)), str(config.get("hw", "xdna2")),
                   config.get("fault"))


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
        self.backend = EmulatorBackend()

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
        a = self.loaded
        return DeployedModel(self.settings.model, a.args, a.weights, recipe, self.backend,
                             self.hw)

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


_MODELS: dict[str, Any] = {}


def _load(spec: str) -> Any:
    from oracle.loading import load_model

    if spec not in _MODELS:
        _MODELS.clear()             # one model at a time: they can be large
        _MODELS[spec] = load_model(spec)
    return _MODELS[spec]


_WORKSPACES: dict[tuple[str, str], Workspace] = {}


def workspace_of(run: Any) -> Workspace:
    """The workspace of the run a PhaseRun belongs to (one per run and process)."""
    c = run.conductor
    key = (str(c.store.path), c.run_id)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = Workspace(c.store, c.run_id)
    return _WORKSPACES[key]
