"""The Conductor's prompt for a task, as the policy's token ids: the roster shown (the whole pool, or a
random subset renumbered from 0), the cost dial's setting (a dial run's: conductor/cost_dial.py), the prompt
messages and the policy's chat template. Used by rollouts, the SFT warm start, evaluation, serving and the
baselines alike, so all of them see the same prompt."""

from __future__ import annotations

import functools
import random
from typing import Any, Optional

from conductor.config import Config
from conductor.pool import Messages
from conductor.prompts import FewShotExample, conductor_messages, load_fewshot, recursive_messages
from conductor.roster import Roster
from conductor.tasks.task import Task


def chat_ids(tokenizer: Any, messages: Messages) -> list[int]:
    """The policy's chat template applied, generation prompt added, as token ids. The messages' text is
    defused first: a question, a subtask or a worker's answer that spells a control token (``<|im_end|>``)
    would otherwise become that token, and close its turn or open a forged system turn."""
    controls = control_texts(tokenizer)
    if controls:
        messages = [dict(m, content=defused(m["content"], controls)) if isinstance(m.get("content"), str) else m
                    for m in messages]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding in transformers 5


@functools.lru_cache(maxsize=8)
def control_texts(tokenizer: Any) -> tuple[str, ...]:
    """The texts the tokenizer reads as special tokens (its role markers, end of text), longest first."""
    texts = set(getattr(tokenizer, "all_special_tokens", None) or ())
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            texts.add(str(token))
    return tuple(sorted((t for t in texts if len(t) > 1), key=len, reverse=True))


def defused(text: str, controls: tuple[str, ...]) -> str:
    """``text`` with a zero-width space after the first character of each control token it spells, so that
    it tokenizes as the text it is."""
    for control in controls:
        if control in text:
            text = text.replace(control, control[0] + ZERO_WIDTH_SPACE + control[1:])
    return text


ZERO_WIDTH_SPACE = "\u200b"


class PromptBuilder:
    def __init__(self, config: Config, tokenizer: Any, seed: int = 0):
        self.config, self.tokenizer = config, tokenizer
        self.rng = random.Random(seed)
        self.fewshot: tuple[FewShotExample, ...] = load_fewshot(
            config.prompt.fewshot_file, config.prompt.num_fewshot, config.executor.max_steps)

    def roster(self, rng: Optional[random.Random] = None) -> Roster:
        """The workers a prompt offers: the whole pool, or a random ``pool.subset_size`` of it drawn by ``rng``
        (default: this builder's own)."""
        workers, size = self.config.pool.workers, self.config.pool.subset_size
        return Roster.random_subset(workers, size, rng or self.rng) if size else Roster.full(workers)

    def prompt_ids(self, messages: Messages) -> list[int]:
        return chat_ids(self.tokenizer, messages)

    def task_prompt_ids(self, task: Task, roster: Roster, cost_quality: Optional[int] = None) -> list[int]:
        return self.prompt_ids(conductor_messages(task.prompt, roster, self.fewshot,
                                                  max_steps=self.config.executor.max_steps,
                                                  show_prices=self.config.prompt.show_prices,
                                                  cost_quality=cost_quality))

    def recursive_prompt_ids(self, task: Task, roster: Roster, previous_plan: str, final_response: str,
                             cost_quality: Optional[int] = None) -> list[int]:
        """The recursive round's prompt (conductor/prompts.py), as the episode builds it."""
        return self.prompt_ids(recursive_messages(task.prompt, roster, self.fewshot, previous_plan=previous_plan,
                                                  final_response=final_response,
                                                  max_steps=self.config.executor.max_steps,
                                                  show_prices=self.config.prompt.show_prices,
                                                  cost_quality=cost_quality))
