"""The Textual TUI: the run browser, a run live or in replay, and the human decisions.
It reads the store and writes only inbox commands."""

from .app import DeployApp, Driver
from .timeline import RunTimeline

__all__ = ["DeployApp", "Driver", "RunTimeline"]
