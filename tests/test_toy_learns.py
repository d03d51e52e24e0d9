"""The toy learns: a short run of `make train`'s recipe must come to read the question before it routes.

The run is tests/support/toy_learning.py: configs/train-toy.yaml's own warm start (the tiny policy, the plan
line, SFT as configured) and GRPO steps through the learner's loss, without Ray, vLLM or DeepSpeed (the
slow driver tests run the same recipe through the cluster). Nothing is overridden but the step count.

What is measured is `routing_gain`: on the 60 validation questions, the policy's probability of each
question's best worker, less what its own average worker distribution gives the same questions. Any policy
that ignores the question (sends every question to the same worker, or to the same mix) scores exactly 0,
whichever worker it prefers, so a policy that only drifts towards one worker cannot pass; the warm start,
uniform over workers, scores ~0.01. The bar is measured (docs/experiments.md, "#toy-learning-test"):
after 70 steps seeds 0-2 reached 0.112, 0.323 and 0.176 (0.141, 0.204 and 0.077 at step 60); the same
recipe with a reward that does not depend on the worker (nothing to learn) stayed within 0.008 of 0 for 60
steps. ~4.5 minutes here: the recipe's own 400-step SFT (~2.5), then 70 GRPO steps of 64 samples (~2).
"""

from __future__ import annotations

import pytest

from tests.support.toy_learning import ToyRun

pytestmark = pytest.mark.slow  # it alone would be a third of `make test-fast`
STEPS = 70
BAR = 0.06  # ~half the slowest seed's gain at STEPS, 7x the largest the null run reached


def test_a_short_toy_run_learns_to_route_by_the_question(tmp_path):
    run = ToyRun(tmp_path, [])
    start = run.routing_gain()
    assert abs(start) < 0.03, f"the warm start already routes by the question (gain {start:.3f}): it must not"
    for step in range(STEPS):
        run.train_step(step, run.config.train.steps)
    gain = run.routing_gain()
    assert gain >= BAR, (f"after {STEPS} GRPO steps the toy policy's routing gain is {gain:.3f} (warm start "
                         f"{start:.3f}; bar {BAR}): the toy recipe has stopped learning to route by the question")
