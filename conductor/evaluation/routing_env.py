"""The pool as a Gymnasium environment for a router trained by RL: one step = choose a worker.

An episode is one training question: the observation is its MiniLM embedding, the action a worker, the
reward that worker's verdict on it (from the routing table: the answer each worker actually gave) minus
``cost_weight x`` its dollars over one average call's, and the episode ends. Questions on which some
worker's call failed are left out (no verdict to learn from).
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium
import numpy as np


class RoutingEnv(gymnasium.Env):
    def __init__(self, config: dict[str, Any]):
        embeddings, correct, usd = (np.asarray(config[k]) for k in ("embeddings", "correct", "usd"))
        keep = ~np.isnan(correct).any(axis=1)
        if not keep.any():
            raise ValueError("no training question with every worker's verdict")
        self.embeddings, self.correct, self.usd = embeddings[keep].astype(np.float32), correct[keep], usd[keep]
        self.cost_weight = float(config.get("cost_weight", 0.0))
        self.call_usd = float(self.usd.mean()) or 1.0
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (self.embeddings.shape[1],), np.float32)
        self.action_space = gymnasium.spaces.Discrete(self.correct.shape[1])
        self.question = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.question = int(self.np_random.integers(len(self.embeddings)))
        return self.embeddings[self.question], {}

    def step(self, action: int):
        q = self.question
        reward = self.correct[q, action] - self.cost_weight * self.usd[q, action] / self.call_usd
        return self.embeddings[self.question], float(reward), True, False, {}
