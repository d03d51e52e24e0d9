"""The in-process pool: routes each worker to its provider's client, behind the response cache when
``pool.cache`` is on. Limits hold within this process; the Ray WorkerPool actors (actors/worker_pool.py) make
them hold across a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Optional, TypeVar

from conductor.config import PoolConfig
from conductor.pool import ChatResult, DeltaSink, Messages, WorkerCallError
from conductor.provider_client import ProviderClient
from conductor.response_cache import with_cache
from conductor.stop_request import signals_held


class LocalPool:
    def __init__(self, config: PoolConfig, *, seed: Optional[int] = None):
        routes = config.routes()
        self.providers = {spec.id: with_cache(ProviderClient(spec, routes[spec.id], seed=seed), config.cache)
                          for spec in config.providers}
        self.route = {w.id: pid for pid, workers in routes.items() for w in workers}

    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   on_delta: Optional[DeltaSink] = None, *,
                   max_billable_attempts: Optional[int] = None) -> ChatResult:
        provider = self.route.get(worker_id)
        if provider is None:
            raise WorkerCallError(worker_id, "not_found", "no such worker in the pool")
        return await self.providers[provider].chat(worker_id, messages, params, on_delta,
                                                   max_billable_attempts=max_billable_attempts)

    def stats(self) -> dict[str, dict[str, Any]]:
        return {pid: client.snapshot() for pid, client in self.providers.items()}

    async def close(self) -> None:
        for client in self.providers.values():
            await client.close()


T = TypeVar("T")
# told what an in-process pool spent, by provider, and its attempts whose bill is unknown at their worst case
SpendSink = Callable[[dict[str, float], dict[str, float]], None]


def on_local_pool(config: PoolConfig, work: Callable[[LocalPool], Awaitable[T]], *, seed: Optional[int] = None,
                  on_spend: Optional[SpendSink] = None) -> T:
    """``work`` run to the end against a fresh in-process pool, closed after (the one-off measurements outside
    Ray: the baselines, the warm start's priors). ``on_spend`` is told what the pool spent, by provider, however
    ``work`` ended, a signal's StopSignal included (conductor/stop_request.py): a training run's ledger and spend
    cap count these calls too (cluster/run_spend.py)."""

    async def main() -> T:
        asyncio.get_running_loop().set_exception_handler(quiet_stops)
        pool = LocalPool(config, seed=seed)
        try:
            return await work(pool)
        finally:
            with signals_held():  # a signal now would cut the ledger's write or the cache's flush in two
                try:
                    if on_spend is not None:
                        stats = pool.stats()
                        on_spend({provider: float(s["cost_usd"]) for provider, s in stats.items()},
                                 {provider: float(s.get("unsettled_usd", 0.0)) for provider, s in stats.items()})
                finally:  # a ledger that cannot be written still leaves the cache's answers stored
                    await pool.close()

    return asyncio.run(main())


def quiet_stops(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's error handler: a call's task that a stop's StopSignal (a KeyboardInterrupt) ended is the
    stop, already reported, not a "Task exception was never retrieved" traceback."""
    if not isinstance(context.get("exception"), KeyboardInterrupt):
        loop.default_exception_handler(context)
