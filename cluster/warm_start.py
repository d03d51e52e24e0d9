"""The policy a run starts from: the configured model, or a tiny one built here, then (``sft.steps`` >
0) the SFT warm start that teaches it the workflow format (learner/sft.py). Reused when present, so a
resumed run starts from the same weights."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from cluster.rollouts import policy_path
from conductor.config import Config
from conductor.prompt_builder import PromptBuilder
from conductor.tasks.task import Task


def warm_start_policy(config: Config, run_dir: Path, train_tasks: Sequence[Task], console: Console) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from learner.sft import sft_warm_start

    start = policy_path(config, run_dir / "initial")
    if config.sft.steps == 0:
        return start
    out = run_dir / "sft"
    if (out / "config.json").exists():
        console.print(f"SFT warm start: reusing {out}")
        return str(out)
    tokenizer = AutoTokenizer.from_pretrained(start)
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    builder = PromptBuilder(config, tokenizer, seed=config.seed)
    prompts = [builder.task_prompt_ids(task, builder.roster()) for task in list(train_tasks)[:config.sft.prompts]]
    started = time.time()
    losses = sft_warm_start(model, tokenizer, prompts, len(config.pool.workers), config.sft, seed=config.seed)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    console.print(f"SFT warm start: {config.sft.steps} steps in {time.time() - started:.0f}s, "
                  f"loss {losses[0]:.3f} → {losses[-1]:.3f}")
    return str(out)
