"""A router trained with RLlib: PPO on the pool as a Gymnasium environment (conductor/evaluation/
routing_env.py), where one step is choosing a worker for a training question.

The policy is RLlib's default PPO module (an MLP over the question's MiniLM embedding, a categorical head
over the workers), trained on the routing table of the train split for ``ITERATIONS`` PPO iterations on
a local Ray (started here if none is running); at test time each question goes to the most probable
worker. This is the single-step router the paper's RL baselines are; the Conductor is the same idea with
natural-language workflows as actions. Ray, RLlib and torch are imported inside ``train_ppo_router``, so
the evaluation package stays importable without Ray (``evaluate.rllib_iterations`` sets the iterations).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from conductor.baselines import SOLVE_ALONE
from conductor.evaluation.fixed_methods import run_workflow
from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import Attempt
from conductor.evaluation.registry import MethodSpec
from conductor.evaluation.routing_table import RoutingTable, shared_routing_table
from conductor.tasks.task import Task
from conductor.workflow import Step, Workflow

ITERATIONS, BATCH, MINIBATCH, EPOCHS = 20, 1024, 256, 6
LEARNING_RATE, ENTROPY, COST_WEIGHT = 1e-3, 0.01, 0.0


def train_ppo_router(table: RoutingTable, test_embeddings: np.ndarray, seed: int = 0,
                     iterations: int = ITERATIONS) -> tuple[np.ndarray, list[float]]:
    """The chosen worker per test question, and the mean episode reward of each training iteration."""
    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from conductor.evaluation.routing_env import RoutingEnv

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    env_config = {"embeddings": table.embeddings, "correct": table.correct, "usd": table.usd,
                  "cost_weight": COST_WEIGHT}
    config = (PPOConfig()
              .environment(RoutingEnv, env_config=env_config)
              .env_runners(num_env_runners=0, rollout_fragment_length="auto")
              .learners(num_learners=0)
              .training(lr=LEARNING_RATE, train_batch_size_per_learner=BATCH, minibatch_size=MINIBATCH,
                        num_epochs=EPOCHS, entropy_coeff=ENTROPY, gamma=1.0, lambda_=1.0)
              .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[128], vf_share_layers=False))
              .debugging(seed=seed))
    algo = config.build_algo()
    try:
        curve = []
        for _ in range(iterations):
            result = algo.train()
            curve.append(float(result["env_runners"]["episode_return_mean"]))
        module = algo.get_module()
        with torch.no_grad():
            logits = module.forward_inference({"obs": torch.tensor(test_embeddings, dtype=torch.float32)})
        return np.argmax(logits["action_dist_inputs"].numpy(), axis=1), curve
    finally:
        algo.stop()
        if started:
            ray.shutdown()


@dataclass
class RLlibRouter:
    name: str
    context: MethodContext
    iterations: int = ITERATIONS
    curve: list[float] = field(default_factory=list)
    _choice: dict[str, int] = field(default_factory=dict)

    async def prepare(self, tasks: list[Task], repeats: int, limit: asyncio.Semaphore) -> None:
        from conductor.evaluation.embeddings import embed

        table = await shared_routing_table(self.context, limit)
        embeddings = await asyncio.to_thread(embed, [t.prompt for t in tasks])
        choices, self.curve = await asyncio.to_thread(train_ppo_router, table, embeddings, self.context.seed,
                                                      self.iterations)
        self._choice = {t.id: int(c) for t, c in zip(tasks, choices)}

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        return await run_workflow(self.context, Workflow((Step(self._choice[task.id], SOLVE_ALONE, ()),)), task)


def rllib_router(name: str, context: MethodContext) -> RLlibRouter:
    return RLlibRouter(name, context, context.settings.rllib_iterations)


SPECS = (MethodSpec("rllib_router", rllib_router, trained=True, routing_table=True),)
