"""Where things are, for tests in any folder: the repository and this folder (which holds the
helpers subprocesses import: fake_pipeline, fake_npu)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
