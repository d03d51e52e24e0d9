"""Learning-rate factor per optimizer step: linear warmup, then constant or cosine decay to 0.

    factor(s) = (s + 1) / W                                   for s < W
              = 1                                             constant
              = 0.5 * (1 + cos(pi * min(1, (s - W) / (T - W))))   cosine

(W warmup steps, T total steps.) Multiplied into the base lr by ``torch.optim.lr_scheduler.LambdaLR``,
whose state the checkpoints carry, so a resumed run continues the same curve.
"""

from __future__ import annotations

import math


def lr_factor(step: int, warmup_steps: int, total_steps: int, schedule: str) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    raise ValueError(f"unknown lr schedule {schedule!r}")
