"""The simulator's oracle called in-process, behind the pool interface: no HTTP, no rate limits.

For tests of the simulated workers' *behaviour* at full size (tens of thousands of calls), where the HTTP
path is not what is being tested; test_simulator.py and test_evaluate.py cover that path with the real
server and the official client. Token counts follow the server's rule.
"""

from __future__ import annotations

from typing import Any, Optional

from conductor.pool import ChatResult, DeltaSink, Messages
from conductor.simulator.oracle import Oracle
from conductor.simulator.server import count_tokens


class DirectPool:
    def __init__(self, oracle: Oracle):
        self.oracle = oracle
        self.calls = 0

    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   on_delta: Optional[DeltaSink] = None, *,
                   max_billable_attempts: Optional[int] = None) -> ChatResult:
        self.calls += 1
        seed = (params or {}).get("seed")
        reply = self.oracle.answer(worker_id, messages, seed if type(seed) is int else None)
        if on_delta is not None:
            on_delta(reply.text)
        prompt = sum(count_tokens(str(m.get("content") or "")) + 4 for m in messages)
        return ChatResult(reply.text, prompt, count_tokens(reply.text) + reply.reasoning_tokens,
                          reasoning_tokens=reply.reasoning_tokens)
