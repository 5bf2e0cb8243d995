# Set-up and entry points. CPU paths install the pinned CPU torch first (constraints-cpu.txt):
# a bare torch requirement would pull a multi-GB CUDA build.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv run test test-fast bench clean-venv

$(STAMP): pyproject.toml constraints-cpu.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints-cpu.txt torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints-cpu.txt -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

## the main job: the whole DAG on the default config (embedded corpus, CPU, minutes)
run: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --profile profiles/local all

## the whole test suite (fast unit tests and the slower end-to-end ones)
test: $(STAMP)
	$(BIN)/python -m pytest

## unit tests only
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/bench_model.py

clean-venv:
	rm -rf $(VENV)
