"""A short toy run without Ray, vLLM or DeepSpeed: the tiny policy, its SFT warm start, the toy prompts and
splits, and GRPO steps through the learner's own loss (shared-prompt logprobs, group advantages, the clipped
objective, AdamW and the lr schedule as configured). Samples come from ``transformers``' ``generate``; a
workflow's outcome is drawn from the toy preset's accuracy table: the last step's worker is right with its
accuracy in the question's domain (the simulator fixes which items each worker solves; here each sample
draws, so the signal is the same on average and a little noisier).

It checks the learning, not the plumbing: the slow driver tests run the same recipe through the cluster."""

from __future__ import annotations

import random
from pathlib import Path

import torch

TOY_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "train-toy.yaml"


class ToyRun:
    def __init__(self, directory: Path, overrides: list[str]):
        from rich.console import Console
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from cluster.rollouts import tasks_for
        from cluster.warm_start import warm_start_policy
        from conductor.config_loader import load_config
        from conductor.prompt_builder import PromptBuilder
        from conductor.run_output import RunOutput
        from conductor.simulator.presets import load_preset, simulated_pool_config
        from conductor.tasks.splits import TaskSampler, configured_splits

        config = load_config(TOY_CONFIG, overrides)
        preset = load_preset(config.simulator)
        self.config = config = config.model_copy(
            update={"pool": simulated_pool_config(preset, "http://127.0.0.1:1/v1")})
        self.accuracy = {worker.name: worker.accuracy for worker in preset.workers}
        self.splits = configured_splits(tasks_for(config), config.train)
        self.rng = random.Random(config.seed)
        # The run's own warm start (tiny policy, prompts, plan lines, SFT), as `cluster.train` makes it.
        path = warm_start_policy(config, RunOutput(str(directory), "toy"), list(self.splits.train), Console(quiet=True))
        torch.manual_seed(config.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.reference = None
        if config.learner.kl_coef > 0 or config.learner.worker_id_kl_coef > 0:
            self.reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            self.reference.requires_grad_(False)
        self.builder = PromptBuilder(self.config, self.tokenizer, seed=config.seed)
        self.roster = self.builder.roster()
        self.end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.sampler = TaskSampler(list(self.splits.train), config.seed)
        learner = config.learner
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=learner.lr, betas=tuple(learner.betas),
                                           weight_decay=learner.weight_decay)

    def prompt(self, task) -> list[int]:
        return self.builder.task_prompt_ids(task, self.roster)

    def sample(self, tasks, samples: int, greedy: bool) -> list[list[int]]:
        """Completions (ending with the end-of-turn token when they ended), ``samples`` per task in order."""
        prompts = [self.prompt(t) for t in tasks]
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(prompts) * samples, width), pad)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(p for p in prompts for _ in range(samples)):
            ids[row, width - len(prompt):] = torch.tensor(prompt)  # left-padded for generation
            mask[row, width - len(prompt):] = 1
        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, do_sample=not greedy,
                                      temperature=self.config.rollout.temperature if not greedy else None,
                                      top_p=None, top_k=None, max_new_tokens=self.config.rollout.max_new_tokens,
                                      eos_token_id=self.end, pad_token_id=pad)
        completions = []
        for row in out[:, width:].tolist():
            completions.append(row[:row.index(self.end) + 1] if self.end in row else row)
        return completions

    def routed_worker(self, completion: list[int]):
        """The worker whose answer is final, or None for a completion that is no workflow."""
        from conductor.workflow import WorkflowParseError, parse_workflow

        if not completion or completion[-1] != self.end:
            return None  # cut at max_new_tokens: a format error (rollout.truncation_is_format_error)
        try:
            workflow = parse_workflow(self.tokenizer.decode(completion[:-1]), num_workers=len(self.roster),
                                      max_steps=self.config.executor.max_steps)
        except WorkflowParseError:
            return None
        return self.roster.worker_ids[workflow.steps[-1].worker]

    def reward(self, task, completion: list[int]) -> float:
        from conductor.rewards import reward

        worker = self.routed_worker(completion)
        correct = worker is not None and self.rng.random() < self.accuracy[worker][task.domain]
        return reward(format_ok=worker is not None, correct=correct, cost_usd=0.0, worker_tokens=0,
                      infra_error=False, settings=self.config.reward)

    def routing_accuracy(self) -> float:
        """Greedy: the share of validation questions sent to a worker that is best in their domain."""
        tasks = list(self.splits.val)
        best = {t.domain: max(a[t.domain] for a in self.accuracy.values()) for t in tasks}
        chosen = [self.routed_worker(c) for c in self.sample(tasks, 1, greedy=True)]
        return sum(w is not None and self.accuracy[w][t.domain] == best[t.domain]
                   for t, w in zip(tasks, chosen)) / len(tasks)

    def worker_chances(self) -> tuple[torch.Tensor, list[int]]:
        """For each validation question, the policy's probability of each worker (each one-step workflow
        scored whole: the warm start's plan line, then the lists with worker k; normalised over k), and the
        index of its domain's best worker."""
        from conductor.example_workflows import example_plans, shape_workflow
        from learner.shared_prompt import collate_shared, shared_prompt_logprobs
        from learner.train_batch import TrainSequence

        tasks, workers = list(self.splits.val), list(self.roster.worker_ids)
        plans = example_plans(self.config.sft.plan, self.config.sft.plan_words, [t.prompt for t in tasks])
        sequences = []
        for index, task in enumerate(tasks):
            for worker in range(len(workers)):
                text = (plans[index] if plans else "") + shape_workflow("solve", [worker]).render()
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.end]
                sequences.append(TrainSequence(tuple(self.prompt(task)), tuple(ids), (0.0,) * len(ids), 0.0))
        self.model.eval()
        with torch.no_grad():
            batch = collate_shared(sequences, self.tokenizer.pad_token_id)
            scores = (shared_prompt_logprobs(self.model, batch) * batch.completion_mask).sum(-1)
        chances = torch.softmax(scores.view(len(tasks), len(workers)), dim=-1)
        best = [max(range(len(workers)), key=lambda k: self.accuracy[workers[k]][t.domain]) for t in tasks]
        return chances, best

    def routing_probability(self) -> float:
        """The mean probability of sending a validation question to its domain's best worker. A policy that
        ignores the question scores at most the largest domain's share of the split."""
        chances, best = self.worker_chances()
        return float(sum(chances[i, k] for i, k in enumerate(best)) / len(best))

    def routing_gain(self) -> float:
        """How much reading the question adds: the mean probability of each validation question's best
        worker, less what the policy's average choice (the same worker distribution for every question, as a
        policy that ignores the question must have) gives the same questions. 0 for any question-blind
        policy, whatever worker it prefers; 1 - 1/3 at most on the toy's three domains."""
        chances, best = self.worker_chances()
        blind = chances.mean(dim=0)
        return float(sum(chances[i, k] - blind[k] for i, k in enumerate(best)) / len(best))

    def format_rate(self, questions: int = 16) -> float:
        """The share of completions sampled as in training (temperature, one per question) that parse."""
        tasks = list(self.splits.val)[:questions]
        completions = self.sample(tasks, self.config.rollout.group_size, greedy=False)
        return sum(self.routed_worker(c) is not None for c in completions) / len(completions)

    def train_step(self, step: int, total_steps: int) -> None:
        from conductor.worker_choice_tokens import TokenTexts
        from learner.grpo import GrpoSettings, group_advantages, policy_loss
        from learner.lr_schedule import lr_factor
        from learner.shared_prompt import collate_shared, shared_prompt_logprobs
        from learner.train_batch import TrainSequence

        config, learner = self.config, self.config.learner
        texts = TokenTexts(self.tokenizer)
        tasks = self.sampler.next(config.train.questions_per_step)
        group = config.rollout.group_size
        completions = self.sample(tasks, group, greedy=False)
        sequences = []
        for index, task in enumerate(tasks):
            mine = completions[index * group:(index + 1) * group]
            advantages = group_advantages([self.reward(task, c) for c in mine], scale=learner.advantage_scale)
            if learner.filter_zero_spread and not any(advantages):
                continue
            sequences += [TrainSequence(tuple(self.prompt(task)), tuple(c), (0.0,) * len(c), a,
                                        texts.choice_positions(c)) for c, a in zip(mine, advantages)]
        if not sequences:
            return
        self.model.train()
        batch = collate_shared(sequences, self.tokenizer.pad_token_id)
        logprobs = shared_prompt_logprobs(self.model, batch)
        settings = GrpoSettings(eps_low=learner.eps_low, eps_high=learner.eps_high, aggregation=learner.aggregation,
                                kl_coef=learner.kl_coef, worker_id_kl_coef=learner.worker_id_kl_coef)
        reference = None
        if self.reference is not None:
            with torch.no_grad():
                reference = shared_prompt_logprobs(self.reference, batch)
        loss, _ = policy_loss(logprobs, logprobs.detach(), batch.advantages, batch.completion_mask, settings,
                              ref_logprobs=reference, worker_choice_mask=batch.worker_choice_mask)
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = learner.lr * lr_factor(step, learner.warmup_steps, total_steps, learner.lr_schedule)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), learner.grad_clip)
        self.optimizer.step()


def main(argv: list[str]) -> None:
    """``python -m tests.support.toy_learning STEPS [dotted overrides]``: the curve, every 10 steps."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        run = ToyRun(Path(directory), argv[1:])
        print(f"step 0: routing {run.routing_accuracy():.3f}, p(best worker) {run.routing_probability():.3f}, "
              f"gain {run.routing_gain():.3f}, sampled format {run.format_rate():.3f}", flush=True)
        for step in range(int(argv[0])):
            run.train_step(step, int(argv[0]))
            if (step + 1) % 10 == 0:
                print(f"step {step + 1}: routing {run.routing_accuracy():.3f}, "
                      f"p(best worker) {run.routing_probability():.3f}, gain {run.routing_gain():.3f}", flush=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
