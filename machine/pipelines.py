"""The pipelines a run may name, and loading one by name ("module:function").

A resume loads (imports and calls) the pipeline its run names in its stored configuration,
so the name is code, and a run can come from anyone's export file: only registered names
are loaded (`stored_pipeline`); `--pipeline` on the command line is the person's own choice
(`load_pipeline` alone).
"""

from __future__ import annotations

import os

from npu_deploy.store import EventStore

from .phase_run import Pipeline
from .reopen import run_config

DEFAULT_PIPELINE = "npu_deploy.agents.autopilot:pipeline"
CLAUDE_PIPELINE = "npu_deploy.agents.claude:pipeline"

#: The pipelines a run's stored configuration may name: a resume loads (imports and calls)
#: the one its run names, so the name is code, and a run can come from anyone's export file.
#: Others are registered by the code that brings them (`register_pipeline`), or by the
#: person in NPU_DEPLOY_PIPELINES (comma-separated); `--pipeline` on the command line is
#: the person's own choice and needs no registration.
REGISTERED_PIPELINES: set[str] = {DEFAULT_PIPELINE, CLAUDE_PIPELINE}
PIPELINES_ENV = "NPU_DEPLOY_PIPELINES"


class PipelineRefused(ValueError):
    """A run names a pipeline that is not registered: it is not loaded."""


def register_pipeline(spec: str) -> None:
    REGISTERED_PIPELINES.add(canonical_pipeline(spec))


def is_registered(spec: str) -> bool:
    env = {canonical_pipeline(s.strip())
           for s in os.environ.get(PIPELINES_ENV, "").split(",") if s.strip()}
    return canonical_pipeline(spec) in REGISTERED_PIPELINES | env


def stored_pipeline(store: EventStore, run_id: str) -> str:
    """The registered pipeline a run names in its configuration (the autopilot's when it
    names none); a name nobody registered is refused, and nothing of it is imported."""
    named = run_config(store, run_id).get("pipeline") or DEFAULT_PIPELINE
    spec = canonical_pipeline(str(named))
    if not is_registered(spec):
        raise PipelineRefused(
            f"run {run_id} names pipeline {spec!r}, which is not a registered pipeline, so "
            "nothing of it was run; pass --pipeline MODULE:FUNCTION to choose one yourself, "
            f"or add it to {PIPELINES_ENV} if you trust it")
    return spec


#: Pipelines under the names their modules had before the project moved under one installed
#: namespace: runs stored then name them so in `run.started`, and still resume.
MOVED_PIPELINES = {"skills.autopilot:pipeline": "npu_deploy.agents.autopilot:pipeline",
                   "skills.claude:pipeline": "npu_deploy.agents.claude:pipeline"}


def canonical_pipeline(spec: str) -> str:
    """The current name of the pipeline `spec` names."""
    return MOVED_PIPELINES.get(spec, spec)


def load_pipeline(spec: str) -> Pipeline:
    """A pipeline from "module:function" (the function returns a Pipeline)."""
    import importlib

    module, _, attr = canonical_pipeline(spec).partition(":")
    if not module or not attr:
        raise ValueError(f"pipeline {spec!r}: expected module:function")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"pipeline {spec!r} cannot be loaded: {e}") from None
    if not callable(factory):
        raise ValueError(f"pipeline {spec!r} names a {type(factory).__name__}, not a function "
                         "returning a Pipeline")
    try:
        pipeline = factory()
    except Exception as e:   # code the user named: whatever it raises is their error
        raise ValueError(f"pipeline {spec!r} failed when called with no arguments "
                         f"({type(e).__name__}: {e}); name a function that returns a "
                         "Pipeline") from None
    if not isinstance(pipeline, Pipeline):
        raise ValueError(f"pipeline {spec!r} returned {type(pipeline).__name__}, not a Pipeline")
    return pipeline
