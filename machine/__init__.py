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
    Policy,
    RunEnded,
    ToolFailed,
    fork,
    load_pipeline,
    resume,
)
from .machine import DeploymentMachine, IllegalTransition, mermaid, state_of, trigger_for

__all__ = [
    "Agent", "Conductor", "DebugMatcher", "DeploymentMachine", "Gate", "Halt",
    "IllegalTransition", "NeedsHuman", "PhaseRun", "Pipeline", "Policy", "RunEnded",
    "ToolFailed", "fork",
    "load_pipeline", "mermaid", "resume", "state_of", "trigger_for",
]
