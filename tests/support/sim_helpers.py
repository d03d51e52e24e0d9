"""Drive a simulator through the real pool client and score answers with the real verifiers."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from conductor.local_pool import LocalPool
from conductor.simulator.presets import simulated_pool_config
from conductor.verifiers.verify import verify


def ask(task, context=()):
    messages = []
    for subtask, answer in context:
        messages += [{"role": "user", "content": subtask}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": "Solve the question."})
    messages[0] = {"role": "user", "content": f"Question:\n{task.prompt}\n\n{messages[0]['content']}"}
    return messages


def answers(sim, requests, concurrency=32):
    """requests: [(worker, messages)] -> [text] in order, through LocalPool over HTTP."""
    pool = LocalPool(simulated_pool_config(sim.state.preset, sim.base_url, max_concurrency=concurrency))

    async def main():
        try:
            results = await asyncio.gather(*(pool.chat(worker, messages) for worker, messages in requests))
            return [r.text for r in results]
        finally:
            await pool.close()

    return asyncio.run(main())


def accuracy_by(sim, tasks, workers, threads=4):
    """{(worker, domain): accuracy} for every worker on every task, checked by the task's verifier. Workers
    often give the same text for a task (a right answer, mostly); each distinct (task, text) is verified
    once, which matters for code, whose check runs the tests in the sandbox."""
    requests = [(w, ask(t)) for w in workers for t in tasks]
    texts = answers(sim, requests)
    pairs = [(w, t) for w in workers for t in tasks]
    distinct = {(id(task), text): task for (_, task), text in zip(pairs, texts)}
    with ThreadPoolExecutor(threads) as pool:
        checked = dict(zip(distinct, pool.map(lambda key: verify(distinct[key], key[1]).correct, distinct)))
    verdicts = [checked[(id(task), text)] for (_, task), text in zip(pairs, texts)]
    totals: dict = {}
    for (worker, task), correct in zip(pairs, verdicts):
        key = (worker, task.domain)
        hits, count = totals.get(key, (0, 0))
        totals[key] = (hits + correct, count + 1)
    return {key: hits / count for key, (hits, count) in totals.items()}
