"""The `npu-deploy` command line: a thin layer over the library packages, one module per
command group, every command registered here.

Every failure the user can cause (a bad path, a foreign or damaged file, an unknown run, a
tampered log) ends as one line on stderr and a non-zero exit (`group.CLI`).
"""

from __future__ import annotations

from . import deploy, hardware, inference, kernels, kit, models, results, runs, tui
from .group import main

# runs in the store
main.add_command(runs.runs_cmd)
main.add_command(runs.show_cmd)
main.add_command(runs.verify_cmd)
main.add_command(runs.export_cmd)
main.add_command(runs.import_cmd)
# models and the hardware
main.add_command(models.models_cmd)
main.add_command(models.oracle_cmd)
main.add_command(kernels.kernels_cmd)
main.add_command(kernels.plan_cmd)
main.add_command(kernels.doctor_cmd)
main.add_command(kit.build_objects_cmd)
main.add_command(hardware.validate_hardware_cmd)
main.add_command(hardware.import_measurements_cmd)
# driving a run
main.add_command(deploy.deploy_cmd)
main.add_command(tui.tui_cmd)
main.add_command(tui.attach_cmd)
main.add_command(tui.replay_cmd)
main.add_command(deploy.decide_cmd)
main.add_command(deploy.resume_cmd)
main.add_command(deploy.fork_cmd)
# using a deployment
main.add_command(inference.generate_cmd)
main.add_command(inference.chat_cmd)
main.add_command(results.report_cmd)
main.add_command(results.lessons_cmd)

__all__ = ["main"]
