# MCF — one-command set-up: every target creates/updates .venv and the simulators it needs.
SHELL   := /bin/bash
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.mcf-installed
REQS    := $(wildcard requirements/*.txt) pyproject.toml setup.py
JOBS    ?= auto
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup simulators test test-all demo docs clean bitstream

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

$(STAMP): $(REQS)
	@PYTHON=$(PYTHON) VENV=$(VENV) scripts/setup-venv.sh
	@touch $@

setup: $(STAMP) simulators  ## create/update .venv and install the simulators

simulators:
	@scripts/ensure-simulators.sh

# A fixed string-hash seed: Amaranth orders the ports of a design with two clock domains by a set,
# so each pytest worker would write different Verilog for the same unit and build it again.
# --dist loadgroup --no-loadscope-reorder: the workers take tests one at a time in the order of
# tests/conftest.py (LONG_FIRST: the longest first, so the short ones fill the end of the run; the
# tests of a module with a module-scoped fixture as one group, so one worker sets it up).
test: setup  ## run the test suite (parallel; exit 5 = no tests collected is a failure)
	@PYTHONHASHSEED=0 $(PY) -m pytest -n $(JOBS) --dist loadgroup --no-loadscope-reorder -m "not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; that is a failure" >&2; exit 1; fi; \
	exit $$rc

test-all: setup  ## run every test, the slow ones too
	@PYTHONHASHSEED=0 $(PY) -m pytest -n $(JOBS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

demo: setup  ## the main job: generate Verilog, run simulations, report what was checked
	@$(PY) -m mcf demo

docs: setup  ## regenerate docs/reference.md from the spec
	@$(PY) -m mcf docs

bitstream: setup  ## build the KR260 bitstream (needs Vivado on PATH)
	@$(PY) -m mcf board build

clean:  ## remove build products (keeps .venv)
	rm -rf build sim_build .pytest_cache results.xml
