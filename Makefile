# Set-up and entry points. CPU paths install the pinned CPU build of torch first
# (constraints-cpu.txt): a bare torch requirement would pull a multi-GB CUDA build.
# PYTHON: an interpreter to use (default: the first CPython 3.11-3.13 found, ci/find_python.sh).
PYTHON ?=
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# the GPU image's Triton, for compiling the kernels without a GPU (constraints-gpu.txt)
GPU_TRITON := $(VENV)/triton-gpu
# The CPU torch pin (one home: constraints-cpu.txt) and where that build lives besides PyPI.
TORCH           := $(shell sed -n 's/^\(torch==[^ ]*\).*/\1/p' constraints-cpu.txt)
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: venv run plan-paper run-paper test test-fast fmt bench rehearse gpu-check gpu-test clean-venv repro push pull env-pins

# torch: first a wheel pip already has on this machine (its configured --find-links; no
# network), else the PyTorch CPU index (one retry, short timeout), then its dependencies.
$(STAMP): pyproject.toml constraints-cpu.txt constraints-gpu.txt
	@test -x $(BIN)/python || { py=$$(PYTHON="$(PYTHON)" sh ci/find_python.sh) && $$py -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-index --no-deps "$(TORCH)" 2>/dev/null \
	  || $(BIN)/python -m pip install --quiet --retries 1 --timeout 30 --extra-index-url $(TORCH_CPU_INDEX) "$(TORCH)"
	$(BIN)/python -m pip install --quiet -c constraints-cpu.txt "$(TORCH)"
	$(BIN)/python -m pip install --quiet -c constraints-cpu.txt -e '.[test,hf]'
	$(BIN)/python -m pip install --quiet --upgrade --no-deps --target $(GPU_TRITON) -r constraints-gpu.txt
	@touch $(STAMP)

venv: $(STAMP)

## the main job: the whole DAG on the default config (embedded corpus, CPU, minutes), then its HTML
## report (results/report/<study>/report.html: the study's status first, then tables and figures)
run: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --profile profiles/local all
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/leviathan report html

## the paper's study (config/paper.yaml), planned without running anything: the resolved config and
## its plan (GPU-hours, memory and disk per job), then Snakemake's dry run of every job
PAPER := config/paper.yaml
plan-paper: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/leviathan config show --configfile $(PAPER)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake all --dry-run --profile profiles/local --configfile $(PAPER)

## the paper's study on SLURM, with the Snakemake profile SLURM_PROFILE (default: `slurm`, the
## installed copy of profiles/slurm that docs/slurm.md sets up with your account and partition)
SLURM_PROFILE ?= slurm
run-paper: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake all --profile $(SLURM_PROFILE) --configfile $(PAPER)

## the whole test suite (fast unit tests and the slower end-to-end ones), on TEST_WORKERS
## processes (pytest-xdist; default: one per CPU, at most 4): each test module runs whole on one
## of them (--dist loadfile), so its fixtures are built once
TEST_WORKERS ?= auto
XDIST = -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile
test: $(STAMP)
	$(BIN)/python -m pytest $(XDIST)

## format and fix lint with ruff, and format the Snakefile and its rules with snakefmt (their
## configuration: pyproject.toml; tests/test_style.py and tests/workflow/test_snakemake.py check them)
fmt: $(STAMP)
	$(BIN)/python -m ruff format .
	$(BIN)/python -m ruff check --fix .
	$(BIN)/snakefmt Snakefile workflow/rules

## unit tests only
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(XDIST)

## DVC versioning (docs/dvc.md). The stages of dvc.yaml run Snakemake with the
## profile $(PROFILE): `make repro PROFILE=profiles/slurm`, or export SNAKEMAKE_PROFILE.
PROFILE   ?= $(or $(SNAKEMAKE_PROFILE),profiles/local)
TOOLS_ENV := PATH="$(abspath $(BIN)):$$PATH" SNAKEMAKE_PROFILE="$(PROFILE)"
## the study's config files and names, as dvc.yaml's stages pass them (params.yaml; expanded when used)
PARAM = $(shell $(BIN)/python -c 'import yaml; print(yaml.safe_load(open("params.yaml"))["$(1)"])')
STUDY_ARGS = --config dvc_study_name=$(call PARAM,study_name) dvc_corpus=$(call PARAM,corpus) \
	--configfile "$(call PARAM,study)" config/dvc_overrides.yaml

## rebuild what changed (Snakemake decides what inside a stage) and record it in dvc.lock
repro: $(STAMP)
	$(TOOLS_ENV) $(BIN)/dvc repro

## send the study's data, final checkpoints, evaluations and report (dvc.lock's outputs) to the DVC remote
push: $(STAMP)
	$(BIN)/dvc push

## fetch them, then make Snakemake see them as up to date. Pulled files get fresh mtimes in
## arbitrary order and .snakemake/ has no records of them, so Snakemake would retrain. Only if
## the checkout (code, config, pulled outputs) is exactly what dvc.lock records are all outputs
## touched, in DAG order, recording Snakemake's metadata as a real run does (--forceall);
## otherwise nothing is touched (that would pass old results off as new) and it says why.
pull: $(STAMP)
	$(BIN)/dvc pull
	@$(BIN)/dvc status --quiet || { $(BIN)/dvc status; \
	  echo "make pull: the checkout differs from dvc.lock (above), so nothing was marked up to date."; \
	  echo "Run 'make pull' on the commit dvc.lock was made with (git stash your edits first), then come back:"; \
	  echo "Snakemake then reruns exactly what your changes affect."; exit 1; }
	$(TOOLS_ENV) $(BIN)/snakemake all --profile "$(PROFILE)" --touch --forceall $(STUDY_ARGS)
	@$(TOOLS_ENV) $(BIN)/snakemake all --profile "$(PROFILE)" --dry-run $(STUDY_ARGS) 2>&1 | grep -q "Nothing to be done" || { \
	  echo "make pull: Snakemake still has work to do ('snakemake -n all' shows what)"; exit 1; }
	@echo "make pull: all outputs present and up to date; nothing will be retrained"

## the exact versions the rules' conda env installs (workflow/envs/leviathan.yaml reads them as pip
## constraints), from this tested venv; local build labels dropped (torch 2.13.0+cpu -> 2.13.0,
## which a cluster's CUDA build of the same version satisfies)
env-pins: $(STAMP)
	@{ echo "# pip constraints of the rules' conda env (make env-pins, from the tested venv)"; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed -E 's/\+[A-Za-z0-9.]+$$//'; } > workflow/envs/leviathan.constraints.txt

bench: $(STAMP)
	$(BIN)/python bench/bench_model.py

## the paper's study rehearsed on this CPU (bench/rehearse.py): SIZE of text built and run through
## every step; one table of measured, predicted at the study and the config's limits; fails (exit 1)
## when a prediction exceeds its limit
SIZE ?= 2G
rehearse: $(STAMP)
	$(BIN)/python bench/rehearse.py --size $(SIZE)

## the GPU check (bench/gpu_check.py, <= 5 min on one H200; docs/gpu.md). It needs a CUDA build of
## torch, so it does not use the CPU set-up: GPU_PYTHON (default: .venv's python if there is one,
## else python3) with the package importable from src/ (pip install -e . into a CUDA env, or as
## here). Its figures go to $(GPU_CHECK_OUT)/gpu_check.json, rewritten after each measurement.
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_CHECK_OUT ?= gpu_check
gpu-check:
	PYTHONPATH="$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH}" $(GPU_PYTHON) bench/gpu_check.py --out "$(GPU_CHECK_OUT)"

## the tests that need a CUDA GPU (pytest marker `gpu`: the Triton kernels compiled for the GPU,
## deterministic CUDA, the compiled step), in a GPU env with only torch, numpy, safetensors,
## tiktoken, PyYAML, tqdm and pytest (GPU_PYTHON; the package from src/); elsewhere they skip
gpu-test:
	PYTHONPATH="$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH}" $(GPU_PYTHON) -m pytest -m gpu -p no:cacheprovider tests/gpu

clean-venv:
	rm -rf $(VENV)
