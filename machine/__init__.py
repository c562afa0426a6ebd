"""machine: the phase machine (`transitions`) and the conductor that drives a deployment
through phases 0-7 as the only writer of its run."""

from .conductor import (
    Agent,
    Conductor,
    DebugMatcher,
    Gate,
    Halt,
    NeedsHuman,
    PhaseRun,
    Pipeline,
    PipelineRefused,
    Policy,
    RunEnded,
    ToolFailed,
    fork,
    load_pipeline,
    register_pipeline,
    resume,
    stored_pipeline,
)
from .machine import DeploymentMachine, IllegalTransition, mermaid, state_of, trigger_for

__all__ = [
    "Agent", "Conductor", "DebugMatcher", "DeploymentMachine", "Gate", "Halt",
    "IllegalTransition", "NeedsHuman", "PhaseRun", "Pipeline", "PipelineRefused", "Policy",
    "RunEnded", "ToolFailed", "fork", "load_pipeline", "mermaid", "register_pipeline",
    "resume", "stored_pipeline", "state_of", "trigger_for",
]
