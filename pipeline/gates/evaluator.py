"""Phase 7's gate: the independent evaluator (pipeline.evaluator), run in a fresh process on
a read-only store; its checks are the gate's."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from npu_deploy.events.phases import phase
from npu_deploy.pipeline.toolbox import Toolbox
from npu_deploy.pipeline.workspace import Workspace, blob_json

from .common import _Gate, holds, verdict

#: the evaluator's interpreter: -P keeps the working directory off its sys.path (`make
#: demo` runs in the checkout, whose kernels/ folder would stand in for Hugging Face's
#: `kernels`, which transformers imports: npu_deploy/import_path.py); it imports npu_deploy
#: as installed
EVALUATOR_PYTHON = (sys.executable, "-P")


class EvaluatorGate(_Gate):
    """Runs `python -m npu_deploy.pipeline.evaluator` in a fresh process on a read-only store
    and records its checks; its full report is stored as a blob."""

    phase = 7

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        ws.release_backend()        # the evaluator's process opens the NPU itself
        cmd = [*EVALUATOR_PYTHON, "-m", "npu_deploy.pipeline.evaluator", str(ws.store.path),
               ws.run_id, "--json"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        try:
            report = json.loads(done.stdout)
        except json.JSONDecodeError:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return verdict(phase(self.phase).gate,
                           [holds("evaluator", "ran", False, message=tail[:300])])
        ref = blob_json(ws.store, report)
        return verdict(phase(self.phase).gate, report["checks"], inputs=ref)
