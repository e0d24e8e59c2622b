# Set-up and the two jobs of this repository. Everything the project needs is installed here.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
GQ     := $(VENV)/bin/gqueue

.PHONY: run test check-code check-queue bench clean

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

# What the patch tests import: CPU torch and a vLLM tree's own runtime requirements. One
# environment serves the patch tests of every gated pin: the newest pin's (vLLM 0.34.0: torch
# 2.14.0, Python >= 3.11; 0.24.0's tests pass there too). TEST_PIN_TREE is the tree whose
# requirements/common.txt it installs: the main pin's, work/.
TEST_TORCH    ?= 2.14.0
TEST_PIN_TREE ?= work
TEST_ENV      := $(VENV)/.vllm-deps-torch$(TEST_TORCH)

$(TEST_ENV): $(VENV)/.tool
	@test -f $(TEST_PIN_TREE)/requirements/common.txt || $(MAKE) run
	$(PY) -m pip install -q torch==$(TEST_TORCH)
	$(PY) -m pip install -q -r $(TEST_PIN_TREE)/requirements/common.txt numba
	touch $@

# The code's own gate: ruff (pyflakes and pycodestyle's error rules) and mypy --strict on the tool.
check-code: $(VENV)/.tool
	$(PY) -m ruff check tools/gqueue tests
	$(PY) -m mypy

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

# The patch tests run on the tree of every gated pin: work/ (the main pin's) in phase 5, and in
# phase 6 on pins/LABEL/ for each other label of vendor-pin.txt (written by `gqueue export-tree`:
# that pin's release with the variants that serve it applied). Phase 5 also runs every
# fixed-behaviour test on each gated pin's pristine tree (tests/test_patch_tests_fail_on_pristine.py).
OTHER_PINS ?= $(shell awk '!/^[[:space:]]*(\#|$$)/ && $$1 != "pin" {print $$1}' vendor-pin.txt)

test: $(VENV)/.tool
	$(call PHASE,phase 1/6: the main job (checkout and push the queue))
	@$(MAKE) --no-print-directory run
	$(call PHASE,phase 2/6: the test environment (CPU torch and vLLM's requirements))
	@$(MAKE) --no-print-directory $(TEST_ENV)
	$(call PHASE,phase 3/6: the gates (ruff and mypy; the queue's lint and docs and check))
	@$(MAKE) --no-print-directory check-code check-queue
	$(call PHASE,phase 4/6: kernel tests under the Triton interpreter)
	$(PYTEST) tests/kernels
	$(call PHASE,phase 5/6: the tool's tests and the patch tests and the real-sdist tests)
	$(PYTEST) --ignore=tests/kernels
	$(call PHASE,phase 6/6: the patch tests on the other gated pins' trees)
	@for label in $(OTHER_PINS); do rm -rf pins/$$label && $(GQ) export-tree --pin $$label pins/$$label && \
		echo "patch tests on pins/$$label" && GQUEUE_VLLM_TREE=pins/$$label $(PYTEST) tests/patches || exit 1; done
	$(call PHASE,done)

bench: $(VENV)/.tool
	$(PY) tools/bench/stack.py

clean:
	rm -rf $(VENV) work pins .gqueue dist bench-out
