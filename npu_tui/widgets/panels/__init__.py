"""The run screen's tabs: gate metrics, performance, the agent's transcript, the plan. Each
receives what to show (from `RunTimeline`) and draws it; none reads the store itself. One
module per tab, over `base.Panel`; what they export is named here."""

from .agent import AgentPanel, hanging_lines, transcript_lines, transcript_row
from .base import (
    SOURCE_LABEL,
    Line,
    Panel,
    Part,
    SparkColours,
    Tones,
    any_width,
    plural,
    source_label,
    sparkline,
)
from .gates import GATE_COLUMNS, GatesPanel, GateTable, gate_table, shorten
from .performance import PerformancePanel, kernel_table, profile_table, roofline
from .plan import PlanPanel, PlanView, plan_table, transforms_table

__all__ = [
    "GATE_COLUMNS", "SOURCE_LABEL", "AgentPanel", "GateTable", "GatesPanel", "Line", "Panel",
    "Part", "PerformancePanel", "PlanPanel", "PlanView", "SparkColours", "Tones", "any_width",
    "gate_table", "hanging_lines", "kernel_table", "plan_table", "plural", "profile_table",
    "roofline", "shorten", "source_label", "sparkline", "transcript_lines", "transcript_row",
    "transforms_table",
]
