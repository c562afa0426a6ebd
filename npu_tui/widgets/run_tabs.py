"""The run screen's four tabs (Gates, Performance, Agent, Plan) at the replay cursor. Only
the tab in view is drawn: the others are marked stale and drawn when they are shown. Keys 1-4
show them (the run screen's bindings, `TAB_BINDINGS`), as the palette's "Show the ... tab"
does; each tab's title starts with its key."""

from __future__ import annotations

from rich.cells import cell_len
from textual import on
from textual.binding import Binding
from textual.widgets import TabbedContent, TabPane
from textual.widgets._tabs import Underline  # exported by no public module (8.2.8)
from textual.widgets.tabbed_content import ContentTab, ContentTabs

from npu_deploy.events import DeploymentState, Event

from ..timeline import RunTimeline
from .panels import AgentPanel, GatesPanel, PerformancePanel, PlanPanel, PlanView

#: Each tab's pane id, title and panel.
TABS = (("tab-gates", "Gates", GatesPanel, "gates"),
        ("tab-perf", "Performance", PerformancePanel, "perf"),
        ("tab-agent", "Agent", AgentPanel, "agent"),
        ("tab-plan", "Plan", PlanPanel, "plan"))
#: What each tab shows, in the palette beside "Show the ... tab".
ABOUT = {"tab-gates": "every check of the phase's gate", "tab-perf": "TTFT, tokens/s, the "
         "profile and the roofline", "tab-agent": "the agent's transcript up to the cursor",
         "tab-plan": "the recipe, the transforms tried and the plans"}
#: The run screen's keys for the tabs: 1-4 in the order of the tab bar (binding ids
#: run.tab_gates ... run.tab_plan, for the keymap). Not in the footer: each tab's title
#: shows its key. An input with the focus (the stream's search) takes the digits as text.
TAB_BINDINGS = [Binding(str(n), f"show_tab('{pane}')", f"{title} tab", show=False,
                        id=f"run.tab_{name}")
                for n, (pane, title, _panel, name) in enumerate(TABS, 1)]


def tab_commands() -> list[tuple[str, str, str]]:
    """The palette's commands for the tabs: (pane id, title, help)."""
    return [(pane, f"Show the {title} tab", f"{ABOUT[pane]} (key {n})")
            for n, (pane, title, _panel, _name) in enumerate(TABS, 1)]


class RunTabs(TabbedContent):
    """The tabs, drawn from the timeline at the state and cursor `show` receives."""

    def __init__(self, timeline: RunTimeline, *, initial: str = "tab-gates",
                 id: str | None = None) -> None:
        super().__init__(initial=initial, id=id)
        self.timeline = timeline
        self.cursor = 0
        self.state: DeploymentState | None = None
        self._stale: set[str] = set()
        for n, (pane, title, panel, panel_id) in enumerate(TABS, 1):
            self.compose_add_child(TabPane(f"{n} {title}", panel(id=panel_id), id=pane))

    def on_mount(self) -> None:
        # The tab bar's underline moves at once, not in Textual's 0.3 s slide: a switch is
        # shown in the frame after the key (20-50 ms), not 0.34-0.44 s later when the slide
        # ends (benchmarks/tui_bench.py --latency). The project animates nothing else either.
        bar = self.get_child_by_type(ContentTabs)

        def at_once(animate: bool = True) -> None:
            ContentTabs._highlight_active(bar, animate=False)

        bar._highlight_active = at_once  # type: ignore[method-assign]
        # It is under the active tab from the screen's first frame: Textual places it once
        # the tab bar has been laid out, a frame or more later (tui_bench --latency).
        x = 0
        for title in bar.query(ContentTab):
            left, right = title.styles.gutter.left, title.styles.gutter.right
            width = cell_len(title.label_text)
            if title.has_class("-active"):
                line = bar.query_one(Underline)
                line.show_highlight = True
                line.highlight_start, line.highlight_end = x + left, x + left + width
            x += left + width + right

    def show(self, state: DeploymentState, cursor: int) -> None:
        """Every tab is now at `cursor`, whose state is `state`: the one in view is drawn."""
        self.state, self.cursor = state, cursor
        self._stale = {pane for pane, *_ in TABS}
        self._show_tab(self.active)

    @on(TabbedContent.TabActivated)
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        self._show_tab(event.pane.id or "")

    def _show_tab(self, tab: str) -> None:
        if tab not in self._stale or self.state is None:
            return
        self._stale.discard(tab)
        state, c, timeline = self.state, self.cursor, self.timeline
        if tab == "tab-gates":
            line = timeline.line(c)
            phase = line.phase if line is not None and line.phase is not None else \
                state.current_phase
            self.query_one(GatesPanel).show(state, phase)
        elif tab == "tab-perf":
            ref = report_ref(timeline, c)
            self.query_one(PerformancePanel).show(
                timeline.profiles_at(c), timeline.blob_json(ref) if ref else None, ref)
        elif tab == "tab-agent":
            self.query_one(AgentPanel).show(state, timeline.transcript_at(c))
        elif tab == "tab-plan":
            results = timeline.plan_results_at(c)
            recipe = None
            for e in reversed(results):
                r = e.payload["result"]
                if isinstance(r.get("recipe"), str):
                    recipe = timeline.blob_json(r["recipe"])
                    break
            self.query_one(PlanPanel).show(results, recipe, plans_at(timeline, c, results))


def plans_at(timeline: RunTimeline, version: int, results: list[Event]) -> list[PlanView]:
    """The current prefill and decode plans at `version`, from the transforms tried: the
    newest one's plan after it if it was kept, else the plan it started from. Each is
    timed by the newest profile of its scope recorded after the plan became current
    (an older profile timed another plan)."""
    profiles = timeline.profiles_at(version)
    views = []
    for scope in ("prefill", "decode"):
        tried = [e for e in results if e.payload["tool"] == "apply_transform"
                 and str(e.payload["result"].get("mode", "")).startswith(scope)]
        if not tried:
            continue
        newest = tried[-1].payload["result"]
        ref = newest.get("plan_after") if newest["kept"] else newest.get("plan_before")
        plan = timeline.blob_json(ref)
        if not isinstance(ref, str) or not isinstance(plan, dict):
            continue
        kept = [e.run_version for e in tried if e.payload["result"]["kept"]]
        profile = profiles.get(scope)
        if profile is not None and kept and profile.run_version < kept[-1]:
            profile = None
        first = tried[0].payload["result"]
        trend = (first["before_s"], *(
            e.payload["result"]["after_s"] if e.payload["result"]["kept"]
            else e.payload["result"]["before_s"] for e in tried))
        views.append(PlanView(scope, str(newest.get("mode", scope)), ref, plan, profile,
                              trend, str(first.get("source", "modeled"))))
    return views


def report_ref(timeline: RunTimeline, version: int) -> str | None:
    """The blob of the newest phase-6 report data at `version`, if it reads as one."""
    for e in reversed(timeline.plan_results_at(version)):
        if e.payload["tool"] == "write_report":
            ref = e.payload["result"].get("report_data")
            return ref if isinstance(timeline.blob_json(ref), dict) else None
    return None
