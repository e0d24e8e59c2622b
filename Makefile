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

# --no-compile: the tests compile what they import into their own folder (TEST_PYC below), so
# the 20,000 modules' bytecode pip would write beside them is never read by a test run.
$(TEST_ENV): $(VENV)/.tool
	@test -f $(TEST_PIN_TREE)/requirements/common.txt || $(MAKE) run
	$(PY) -m pip install -q --no-compile torch==$(TEST_TORCH)
	$(PY) -m pip install -q --no-compile -r $(TEST_PIN_TREE)/requirements/common.txt numba
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

# The patch tests run on the tree of every gated pin: work/ (the main pin's), and pins/LABEL/ for
# each other label of vendor-pin.txt (written here by `gqueue export-tree`: that pin's release with
# the variants that serve it applied; tests/test_patch_tests_on_other_pins.py runs them there in
# shards, beside the other tests). Phase 5 also runs every fixed-behaviour test on each gated
# pin's pristine tree (tests/test_patch_tests_fail_on_pristine.py).
OTHER_PINS ?= $(shell awk '!/^[[:space:]]*(\#|$$)/ && $$1 != "pin" {print $$1}' vendor-pin.txt)

# One bytecode folder for the whole of make test, new each time (tests/conftest.py makes one per
# pytest when none is set): torch's and vLLM's modules are compiled once, not once per phase.
TEST_PYC := $(CURDIR)/$(VENV)/.test-pyc
test: export PYTHONPYCACHEPREFIX = $(TEST_PYC)
test: export PYTHONDONTWRITEBYTECODE =
test: $(VENV)/.tool
	@rm -rf $(TEST_PYC)
	$(call PHASE,phase 1/5: the main job (checkout and push the queue))
	@$(MAKE) --no-print-directory run
	$(call PHASE,phase 2/5: the test environment (CPU torch and vLLM's requirements))
	@$(MAKE) --no-print-directory $(TEST_ENV)
	$(call PHASE,phase 3/5: the gates (ruff and mypy; the queue's lint and docs and check))
	@$(MAKE) --no-print-directory check-code check-queue
	$(call PHASE,phase 4/5: kernel tests under the Triton interpreter)
	$(PYTEST) tests/kernels
	$(call PHASE,phase 5/5: the tool's tests and the patch tests on every gated pin and the real-sdist tests)
	@for label in $(OTHER_PINS); do rm -rf pins/$$label && $(GQ) export-tree --pin $$label pins/$$label || exit 1; done
	$(PYTEST) --ignore=tests/kernels
	@rm -rf $(TEST_PYC)
	$(call PHASE,done)

bench: $(VENV)/.tool
	$(PY) tools/bench/stack.py

clean:
	rm -rf $(VENV) work pins .gqueue dist bench-out
