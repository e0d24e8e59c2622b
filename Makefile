# Set-up and the two jobs of this repository. Everything the project needs is installed here.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
GQ     := $(VENV)/bin/gqueue

.PHONY: run test check-queue bench clean

$(VENV)/.tool: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# The main job: fetch the pinned vLLM (hash-verified, cached), apply the whole queue, print the report.
run: $(VENV)/.tool
	$(GQ) checkout
	@if [ -n "$$($(GQ) applied 2>/dev/null)" ]; then $(GQ) pop --all; fi
	$(GQ) push --all
	@echo 'gqueue is $(GQ) here; to have it on PATH: export PATH="$$PWD/$(VENV)/bin:$$PATH"' >&2

# What the patch tests import: CPU torch and the vLLM tree's own runtime requirements.
$(VENV)/.vllm-deps: $(VENV)/.tool
	@test -f work/requirements/common.txt || $(MAKE) run
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r work/requirements/common.txt numba
	touch $@

check-queue: $(VENV)/.tool
	$(GQ) lint
	$(GQ) docs --check
	$(GQ) check --junit bench-out/check-junit.xml

# The tests: the queue gate, then every test but the GPU-only ones (slow real-vLLM tests included),
# spread over the machine's cores (pytest-xdist; JOBS=1 runs them in one process).
# The kernel tests run in a pytest of their own: they turn on Triton's CPU interpreter, which
# changes what vLLM decides at import time in the patch tests.
JOBS   ?= auto
PYTEST := $(PY) -m pytest -m "not gpu" -p no:cacheprovider -n $(JOBS) --dist worksteal
PHASE   = @echo "=== make test: $(1) [$$(date -u +%H:%M:%S)]"

test: $(VENV)/.tool
	$(call PHASE,phase 1/5: the main job (checkout and push the queue))
	@$(MAKE) --no-print-directory run
	$(call PHASE,phase 2/5: the test environment (CPU torch, vLLM's requirements))
	@$(MAKE) --no-print-directory $(VENV)/.vllm-deps
	$(call PHASE,phase 3/5: the queue gate (lint, docs, check))
	@$(MAKE) --no-print-directory check-queue
	$(call PHASE,phase 4/5: kernel tests under the Triton interpreter)
	$(PYTEST) tests/kernels
	$(call PHASE,phase 5/5: the tool's tests, the patch tests and the real-sdist tests)
	$(PYTEST) --ignore=tests/kernels
	$(call PHASE,done)

bench: $(VENV)/.tool
	$(PY) tools/bench/stack.py

clean:
	rm -rf $(VENV) work .gqueue dist bench-out
