"""A MASRouter-style router (Yue et al., ACL 2025): a cascaded controller that, for each question, picks a
collaboration mode, the agents' roles and an LLM for each agent, trained by policy gradient on
accuracy minus cost over the train split, with the pool's real calls.

Cascade here: (1) the mode is one of the workflow shapes (conductor/example_workflows.py: solve, verify,
verify_chain, aggregate, plan); (2) the mode fixes the roles (solver, verifier, aggregator, planner) and
so the number of agents; (3) each agent's worker is chosen from the question and the agent's role slot.
REINFORCE with a moving-average baseline and an entropy bonus; reward ``correct - COST_WEIGHT x
(dollars / one average call's dollars)``. At test time every choice is the most probable.

Deviations: the reference's modes include debate and its role allocator writes role prompts with an LLM;
here the modes are this project's shapes and their roles are fixed by the shape; the question encoder is
frozen all-MiniLM-L6-v2 with trainable heads. Cost: 1 to 3 calls per question, as the controller chooses.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conductor.episode_score import EpisodeScorer
from conductor.evaluation.fixed_methods import run_workflow
from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import Attempt
from conductor.evaluation.registry import MethodSpec
from conductor.example_workflows import SHAPES, shape_steps, shape_workflow
from conductor.tasks.task import Task

COST_WEIGHT, ENTROPY_WEIGHT, BASELINE_DECAY = 0.02, 0.01, 0.9
EPOCHS, BATCH, LEARNING_RATE, WIDTH = 3, 32, 3e-3, 64
MAX_AGENTS = max(shape_steps(s) for s in SHAPES)


def build_controller(dimensions: int, workers: int) -> Any:
    import torch

    class Controller(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mode = torch.nn.Sequential(torch.nn.Linear(dimensions, WIDTH), torch.nn.GELU(),
                                            torch.nn.Linear(WIDTH, len(SHAPES)))
            self.slot = torch.nn.Embedding(len(SHAPES) * MAX_AGENTS, 16)
            self.worker = torch.nn.Sequential(torch.nn.Linear(dimensions + 16, WIDTH), torch.nn.GELU(),
                                              torch.nn.Linear(WIDTH, workers))

        def decide(self, query: Any, greedy: bool) -> tuple[int, list[int], Any, Any]:
            """(mode, workers, log-probability, entropy) for one question embedding."""
            mode_dist = torch.distributions.Categorical(logits=self.mode(query))
            mode = int(mode_dist.probs.argmax()) if greedy else int(mode_dist.sample())
            logprob, entropy, chosen = mode_dist.log_prob(torch.tensor(mode)), mode_dist.entropy(), []
            for agent in range(shape_steps(SHAPES[mode])):
                slot = self.slot(torch.tensor(mode * MAX_AGENTS + agent))
                dist = torch.distributions.Categorical(logits=self.worker(torch.cat([query, slot])))
                worker = int(dist.probs.argmax()) if greedy else int(dist.sample())
                logprob, entropy = logprob + dist.log_prob(torch.tensor(worker)), entropy + dist.entropy()
                chosen.append(worker)
            return mode, chosen, logprob, entropy

    return Controller()


@dataclass
class MasRouter:
    name: str
    context: MethodContext
    _plans: dict[str, tuple[int, list[int]]] = field(default_factory=dict)
    rewards: list[float] = field(default_factory=list)  # per training batch, for inspection

    async def prepare(self, tasks: list[Task], repeats: int, limit: asyncio.Semaphore) -> None:
        import torch

        from conductor.evaluation.embeddings import embed

        train = list(self.context.train_tasks)
        if not train:
            raise ValueError("masrouter needs training questions: evaluate on split 'heldout' or 'val'")
        torch.manual_seed(self.context.seed)
        order = random.Random(f"{self.context.seed}:masrouter")
        train_embeddings = torch.tensor(await asyncio.to_thread(embed, [t.prompt for t in train]))
        controller = build_controller(train_embeddings.shape[1], len(self.context.roster))
        optimizer = torch.optim.Adam(controller.parameters(), lr=LEARNING_RATE)
        baseline, call_usd = None, None
        for _ in range(EPOCHS):
            indices = list(range(len(train)))
            order.shuffle(indices)
            for start in range(0, len(indices), BATCH):
                batch = indices[start:start + BATCH]
                decisions = [controller.decide(train_embeddings[i], greedy=False) for i in batch]
                outcomes = await asyncio.gather(*(self._run(train[i], mode, workers, limit)
                                                  for i, (mode, workers, _, _) in zip(batch, decisions)))
                scored = [(d, o) for d, o in zip(decisions, outcomes) if o is not None]
                if not scored:
                    continue
                per_call = [usd / n for _, (_, usd, n) in scored if n]
                call_usd = call_usd or (float(np.mean(per_call)) if per_call and np.mean(per_call) > 0 else 1.0)
                rewards = [correct - COST_WEIGHT * usd / call_usd for _, (correct, usd, _) in scored]
                mean = float(np.mean(rewards))
                baseline = mean if baseline is None else BASELINE_DECAY * baseline + (1 - BASELINE_DECAY) * mean
                loss = -sum((r - baseline) * d[2] + ENTROPY_WEIGHT * d[3] for (d, _), r in zip(scored, rewards))
                optimizer.zero_grad()
                (loss / len(scored)).backward()
                optimizer.step()
                self.rewards.append(mean)
        test_embeddings = torch.tensor(await asyncio.to_thread(embed, [t.prompt for t in tasks]))
        with torch.no_grad():
            for task, query in zip(tasks, test_embeddings):
                mode, workers, _, _ = controller.decide(query, greedy=True)
                self._plans[task.id] = (mode, workers)

    async def _run(self, task: Task, mode: int, workers: list[int], limit: asyncio.Semaphore):
        """(correct, dollars, calls), or None for an infrastructure error (not a training signal)."""
        async with limit:
            attempt = await run_workflow(self.context, shape_workflow(SHAPES[mode], workers), task)
        score = await EpisodeScorer(self.context.verifier, judge=self.context.judge).score(task, attempt)
        if not score.scored:
            return None
        ran = [s for s in attempt.steps if s.response is not None]
        return float(score.correct), sum(s.cost_usd for s in ran), len(ran)

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        mode, workers = self._plans[task.id]
        return await run_workflow(self.context, shape_workflow(SHAPES[mode], workers), task)


SPECS = (MethodSpec("masrouter", MasRouter, trained=True),)
