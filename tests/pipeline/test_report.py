"""The Phase-6 report: report.md says where every time comes from, its figures are right,
and roofline.png and timeline.png are real images (drawn with matplotlib's Agg canvas)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from matplotlib.image import imread

from npu_deploy.pipeline.report.render import (
    DPI,
    ROOFLINE_SIZE,
    TIMELINE_SIZE,
    KernelPoint,
    PhaseSpan,
    ReportData,
    format_time,
    render_report,
    report_markdown,
    roofline_figure,
    timeline_figure,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PEAK = 50e12                        # ridge point PEAK / BW = 862 FLOP/byte
BW = 58e9
PHASE_NAMES = ("oracle", "kernels", "block", "model", "prefill", "decode", "finalize",
               "evaluate")


def point(label: str, seconds: float, flops: float = 1e9, nbytes: int = 10**6,
          kernel: str = "gemm_bf16", source: str = "modeled") -> KernelPoint:
    return KernelPoint(label, kernel, flops, nbytes, seconds, source)


def make_data(**changes: object) -> ReportData:
    data = ReportData(
        run_id="run-7f3a", model="smollm2-135m", backend="emulator", time_source="modeled",
        peak_flops=PEAK, ddr_bw=BW,
        prefill={"baseline_s": 2.0, "deployed_s": 0.5, "tokens": 128},
        decode={"baseline_s": 0.04, "deployed_s": 0.025},
        transforms=[
            {"phase": 4, "transform": "merge_dispatches", "kept": True, "before_s": 1.5,
             "after_s": 0.5, "reason": "one sync instead of three"},
            {"phase": 4, "transform": "cpu_attention", "kept": False, "before_s": 0.5,
             "after_s": None, "reason": "gate failed"},
        ],
        gates=[
            {"phase": 0, "gate": "phase0.oracle", "passed": True, "attempts": 1,
             "worst": "prompt0/rel_l2 = 3e-07 (needs <= 1e-4)"},
            {"phase": 2, "gate": "phase2.block", "passed": False, "attempts": 3,
             "worst": "L0/cosine = 0.91 (needs >= 0.99)"},
        ],
        kernels=[
            point("L0.gate_up", 2e-3, flops=5e10, nbytes=10**6),              # AI 5e4: compute
            point("L0.rmsnorm", 5e-3, flops=1e6, nbytes=10**8, kernel="rmsnorm"),  # AI 0.01
            point("L0.attn", 3e-4, flops=5e8, nbytes=2 * 10**6, kernel="flash_attn"),
            point("L0.q_proj", 1e-3),
        ],
        phases=[PhaseSpan(i, name, 10.0 * i, 9.0, 4.0, 3.0, 1, "passed")
                for i, name in enumerate(PHASE_NAMES)],
        answers=[{"prompt": "What is the capital of France?", "answer": "Paris."}],
    )
    return dataclasses.replace(data, **changes)  # type: ignore[arg-type]


def section(markdown: str, title: str) -> str:
    """The text of one '## title' section, up to the next section."""
    start = markdown.index(f"## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:] if end < 0 else markdown[start:end]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first markdown table in text, as lists of cells."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return render_report(make_data(), tmp_path_factory.mktemp("report") / "not" / "yet")


def test_render_creates_the_directory_and_writes_the_three_files(rendered):
    assert set(rendered) == {"report", "roofline", "timeline"}
    assert [p.name for p in rendered.values()] == ["report.md", "roofline.png", "timeline.png"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in rendered.values())
    text = rendered["report"].read_text(encoding="utf-8")
    assert text.startswith("# Performance report: smollm2-135m, run run-7f3a\n")
    assert "![roofline](roofline.png)" in text and "![timeline](timeline.png)" in text


@pytest.mark.parametrize("name, size", [("roofline", ROOFLINE_SIZE), ("timeline", TIMELINE_SIZE)])
def test_the_plots_are_png_images_of_the_figure_size(rendered, name, size):
    path = rendered[name]
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = imread(path)
    width, height = size
    assert pixels.shape[:2] == (round(height * DPI), round(width * DPI))
    # Drawn, not blank: many distinct colours and plenty of non-white pixels.
    rgb = pixels[..., :3].reshape(-1, 3)
    assert (rgb.min(axis=1) < 0.9).mean() > 0.01
    assert len({tuple(px) for px in rgb[:: 97].tolist()}) > 10


def test_rendering_is_deterministic(tmp_path):
    first = render_report(make_data(), tmp_path / "one")
    second = render_report(make_data(), tmp_path / "two")
    for name in ("report", "roofline", "timeline"):
        assert first[name].read_bytes() == second[name].read_bytes(), name


def test_modeled_times_are_called_modeled_and_never_measured():
    text = report_markdown(make_data())
    assert "modeled by the performance model" in text
    assert "not measured" in text
    summary = section(text, "Summary")
    assert "baseline (modeled)" in summary and "deployed (modeled)" in summary
    for title in ("Summary", "Optimization steps", "Kernels"):
        assert "measured" not in section(text, title), title
    assert "before (modeled)" in section(text, "Optimization steps")
    assert "time (modeled)" in section(text, "Kernels")


def test_measured_npu_times_say_so():
    text = report_markdown(make_data(backend="xrt", time_source="measured-npu",
                                     kernels=[point("L0.q_proj", 1e-3, source="measured-npu")]))
    assert "measured on the NPU" in text
    assert "modeled" not in text
    assert "baseline (measured on NPU)" in section(text, "Summary")
    assert "time (measured on NPU)" in section(text, "Kernels")


def test_phase_times_are_said_to_be_measured_on_this_hosts_cpu():
    text = report_markdown(make_data())
    phases = section(text, "Phases")
    assert "measured on the CPU of this host" in phases
    assert ("| wall (host CPU) | own (host CPU) | agent (host CPU) | backend (host CPU) | "
            "waiting (host CPU) | paused (host CPU) |") in phases
    rows = table_rows(phases)
    assert [r[0] for r in rows] == [f"{i} {n}" for i, n in enumerate(PHASE_NAMES)]
    assert rows[1] == ["1 kernels", "10.00 s", "9.00 s", "9.00 s", "4.00 s", "3.00 s", "0 s", "0 s",
                       "1", "passed"]


def test_speedups_are_baseline_over_deployed():
    text = report_markdown(make_data())
    rows = table_rows(section(text, "Summary"))
    assert rows[0] == ["prefill (128 tokens)", "2.00 s", "500 ms", "4.00x"]
    assert rows[1] == ["decode (per token)", "40.0 ms", "25.0 ms", "1.60x"]
    assert "prefill (modeled): 256.0 tokens/s" in text      # 128 tokens in 0.5 s
    assert "decode (modeled): 40.0 tokens/s" in text        # one token per 25 ms
    steps = table_rows(section(text, "Optimization steps"))
    assert steps[0] == ["4", "merge_dispatches", "yes", "1.50 s", "500 ms", "3.00x",
                        "one sync instead of three"]
    assert steps[1][2:6] == ["no", "500 ms", "-", "-"]


def test_gates_table_shows_pass_and_fail_with_the_worst_check():
    rows = table_rows(section(report_markdown(make_data()), "Gates"))
    assert rows == [
        ["0", "phase0.oracle", "PASS", "1", "prompt0/rel_l2 = 3e-07 (needs <= 1e-4)"],
        ["2", "phase2.block", "FAIL", "3", "L0/cosine = 0.91 (needs >= 0.99)"],
    ]


def test_kernels_are_sorted_by_time_and_classified_by_the_ridge_point():
    rows = table_rows(section(report_markdown(make_data()), "Kernels"))
    assert [r[0] for r in rows] == ["L0.rmsnorm", "L0.gate_up", "L0.q_proj", "L0.attn"]
    assert [r[2] for r in rows] == ["5.00 ms", "2.00 ms", "1.00 ms", "300 µs"]
    bound = {r[0]: r[6] for r in rows}
    assert bound["L0.gate_up"] == "compute"            # 5e4 FLOP/byte, far right of 862
    assert bound["L0.rmsnorm"] == "memory"             # 0.01 FLOP/byte
    by_label = {r[0]: r[3:6] for r in rows}            # GFLOP/s, GB/s, of roofline
    assert by_label["L0.gate_up"] == ["25000.0", "0.50", "50%"]   # 1 ms at peak, took 2 ms
    assert by_label["L0.rmsnorm"] == ["0.2", "20.00", "34%"]      # 1.72 ms at 58 GB/s of 5 ms


def test_the_kernels_table_keeps_the_fifteen_longest():
    kernels = [point(f"L{i}.q_proj", (i + 1) * 1e-4) for i in range(20)]
    rows = table_rows(section(report_markdown(make_data(kernels=kernels)), "Kernels"))
    assert [r[0] for r in rows] == [f"L{i}.q_proj" for i in range(19, 4, -1)]


def test_a_zero_byte_launch_is_left_off_the_roofline_and_counted():
    kernels = [point("L0.q_proj", 1e-3), point("L0.copy", 2e-3, flops=1e6, nbytes=0),
               point("L0.idle", 0.0)]
    data = make_data(kernels=kernels)
    kernel_text = section(report_markdown(data), "Kernels")
    assert "2 of 3 launches are not on the roofline plot" in kernel_text
    assert "L0.copy" in kernel_text                     # still in the table
    ax = roofline_figure(data).axes[0]
    placed = [pt for c in ax.collections for pt in c.get_offsets().tolist()]
    assert placed == [[1000.0, 1e12]]                   # only q_proj: 1e9 FLOP / 1e6 B, 1 ms
    assert "not on the roofline plot" not in report_markdown(make_data())


def test_the_roofline_is_log_log_with_a_legend_by_kernel_and_the_source_in_its_title():
    fig = roofline_figure(make_data())
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert "modeled" in ax.get_title()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["roofline", "flash_attn", "gemm_bf16", "rmsnorm"]
    xs, ys = ax.lines[0].get_data()
    assert max(ys) == pytest.approx(PEAK)               # the compute roof
    assert ys[0] == pytest.approx(BW * xs[0])           # the memory roof
    measured = make_data(backend="xrt", time_source="measured-npu",
                         kernels=[point("L0.q_proj", 1e-3, source="measured-npu")])
    assert "measured on NPU" in roofline_figure(measured).axes[0].get_title()


def test_the_timeline_has_a_bar_per_phase_on_the_host_clock():
    ax = timeline_figure(make_data()).axes[0]
    assert ax.get_xlabel() == "seconds (measured on the CPU of this host)"
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        f"{i} {n}" for i, n in enumerate(PHASE_NAMES)]
    wall, agent, backend, waiting, paused = ax.containers
    assert [b.get_x() for b in waiting] == [10.0 * i + 7.0 for i in range(8)]  # after the work
    assert [b.get_x() for b in wall] == [10.0 * i for i in range(8)]
    assert [b.get_width() for b in wall] == [9.0] * 8
    assert [b.get_x() for b in backend] == [10.0 * i + 4.0 for i in range(8)]  # after the agent
    assert [b.get_width() for b in agent] == [4.0] * 8


def test_times_read_in_sensible_units():
    assert [format_time(s) for s in (2.0, 0.5, 0.0123, 4.56e-5, 0.0, None)] == [
        "2.00 s", "500 ms", "12.3 ms", "45.6 µs", "0 s", "-"]


@pytest.mark.parametrize("build, words", [
    (lambda: make_data(time_source="guessed"), ["time_source", "'guessed'", "modeled"]),
    (lambda: make_data(backend="emulator", time_source="measured-npu"), ["xrt"]),
    (lambda: point("L0.q_proj", -1e-3), ["L0.q_proj", "seconds", "-0.001"]),
    (lambda: PhaseSpan(3, "model", 0.0, -2.0, 0.0, 0.0, 1, "passed"), ["wall_s", "-2.0"]),
    (lambda: make_data(prefill={"baseline_s": 2.0, "deployed_s": -0.5}), ["deployed_s"]),
    (lambda: make_data(transforms=[{"transform": "fuse", "before_s": -1.0}]), ["before_s"]),
])
def test_bad_input_is_refused_with_one_line_that_says_what_is_wrong(build, words):
    with pytest.raises(ValueError) as err:
        build()
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_upstreams_measured_figure_stands_beside_the_modeled_time_with_its_source():
    source = "Xilinx/mlir-air details/GEMM_bf16_in_bf16_out.json @ e972f2942d41 (real NPU2)"
    measured = dataclasses.replace(point("L0.q_proj", 1e-3), upstream_s=8e-4,
                                   upstream_source=source)
    text = section(report_markdown(make_data(kernels=[measured, point("L0.o", 5e-4)])),
                   "Kernels")
    rows = {r[0]: r for r in table_rows(text)}
    assert rows["L0.q_proj"][2:4] == ["1.00 ms", "800 µs [1]"]
    assert rows["L0.o"][3] == "-"
    assert f"[1] measured on NPU2: {source}" in text
    assert "time (modeled)" in text and "(measured on NPU2)" in text


def test_the_report_gathers_upstreams_figure_for_a_measured_shape():
    from npu_deploy.kernels.definition.registry import SPECS
    from npu_deploy.kernels.measured.figures import measured_figure

    figure = measured_figure(SPECS["gemm_bf16"], {"M": 2048, "K": 8192, "N": 2048})
    assert figure is not None and figure.config["method"] == "fused-cast"
    assert figure.seconds == pytest.approx(2 * 2048 * 8192 * 2048 / 8898e9)
    assert "Xilinx/mlir-air" in figure.source and "GEMM_bf16_in_bf16_out.json" in figure.source
    assert measured_figure(SPECS["gemm_bf16"], {"M": 2048, "K": 8192, "N": 2056}) is None
