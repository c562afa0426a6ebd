"""Where things are, for tests in any folder: the repository, this folder (which holds the
helpers subprocesses import: fake_pipeline, fake_npu) and the clone of upstream, if any."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: A bare clone of Xilinx/mlir-air, on machines that have one (not CI): the tests that re-read
#: upstream skip without it.
MIRROR = Path("/work/.mirror/Xilinx+mlir-air/repo")
