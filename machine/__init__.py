"""machine: the phase machine (`transitions`) and the conductor that drives a deployment
through phases 0-7 as the only writer of its run.

    phase_run.py   what an agent sees (PhaseRun) and the interfaces a pipeline fills
    conductor.py   the conductor: the loop, one event at a time
    reopen.py      a stored run opened again: resume, fork, the config it started with
    pipelines.py   the pipelines a run may name, loaded by name
"""

from .conductor import Conductor
from .machine import DeploymentMachine, IllegalTransition, mermaid, state_of, trigger_for
from .phase_run import (
    Agent,
    DebugMatcher,
    Gate,
    Halt,
    NeedsHuman,
    PhaseRun,
    Pipeline,
    Policy,
    ToolFailed,
)
from .pipelines import PipelineRefused, load_pipeline, register_pipeline, stored_pipeline
from .reopen import RunEnded, fork, resume

__all__ = [
    "Agent", "Conductor", "DebugMatcher", "DeploymentMachine", "Gate", "Halt",
    "IllegalTransition", "NeedsHuman", "PhaseRun", "Pipeline", "PipelineRefused", "Policy",
    "RunEnded", "ToolFailed", "fork", "load_pipeline", "mermaid", "register_pipeline",
    "resume", "stored_pipeline", "state_of", "trigger_for",
]
