"""A pool whose workers follow a script: for demos, examples and tests of the executor.

Each worker is a fixed reply or a function of the messages it receives; an optional delay models
latency, and a set of failing workers models a provider that is down (``WorkerCallError``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

from conductor.pool import ChatResult, DeltaSink, Messages, WorkerCallError

Reply = Union[str, Callable[[Messages], str]]


class ScriptedPool:
    def __init__(self, script: Mapping[str, Reply], *, delay_s: float = 0.0, failing: frozenset[str] = frozenset(),
                 price_per_token_usd: float = 0.0):
        self.script = dict(script)
        self.delay_s = delay_s
        self.failing = frozenset(failing)
        self.price_per_token_usd = price_per_token_usd
        self.calls: list[tuple[str, Messages]] = []

    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   on_delta: Optional[DeltaSink] = None, *,
                   max_billable_attempts: Optional[int] = None) -> ChatResult:
        self.calls.append((worker_id, [dict(m) for m in messages]))
        if worker_id not in self.script:
            raise WorkerCallError(worker_id, "not_found", "no such worker in the script")
        await asyncio.sleep(self.delay_s)
        if worker_id in self.failing:
            raise WorkerCallError(worker_id, "server_error", "scripted outage", retries=3)
        reply = self.script[worker_id]
        text = reply(messages) if callable(reply) else reply
        if on_delta is not None:  # word by word, as a streaming server would
            for piece in re.findall(r"\S+\s*|\s+", text):
                on_delta(piece)
        tokens_in = sum(len(m["content"].split()) for m in messages)
        tokens_out = len(text.split())
        return ChatResult(text=text, prompt_tokens=tokens_in, completion_tokens=tokens_out,
                          cost_usd=(tokens_in + tokens_out) * self.price_per_token_usd, latency_s=self.delay_s)
