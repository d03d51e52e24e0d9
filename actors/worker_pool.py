"""WorkerPool actors: one async Ray actor per provider, found by name, so that every rollout process in
the cluster shares one budget per provider (limits hold cluster-wide, not per process).

``RayPool`` is the executor's pool interface over those actors. Failures cross the actor boundary as
plain data and are raised again here as ``WorkerCallError``. A pool actor that dies restarts
(``max_restarts``) and the calls it held are issued again once it answers, within the provider's
``deadline_s``; the restarted actor first waits out one rate window, since it cannot see what its
predecessor sent. Past the deadline (or past its restarts) a call becomes
``WorkerCallError(kind="actor_unavailable")``: an infrastructure error, never a wrong answer. A call under
a cost cap (``max_billable_attempts``) is not issued again: the actor may have sent it.

With ``pool.cache`` on, the actor's calls go through the response cache (conductor/response_cache.py): as
the one actor of its provider it counts the run's identical requests, and it writes its new answers as
shards of its own (``flush`` at the end of a run). A replay-only miss crosses as data too and is raised
again here as ``ReplayMiss``, which stops the run.

Pool actors ask for no CPU, and Ray places an actor that asks for nothing on a random node. A provider
on a loopback address (the simulator the driver serves on 127.0.0.1) is reachable only from the node
that serves it, so its actor is pinned to the node of the process that creates it (the driver).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Optional
from urllib.parse import urlsplit

import ray

from conductor.config import PoolConfig, ProviderSpec, WorkerSpec
from conductor.metrics import Families
from conductor.pool import ChatResult, DeltaSink, Messages, ReplayMiss, WorkerCallError
from conductor.provider_client import ProviderClient
from conductor.response_cache import CachedClient, with_cache
from conductor.response_cache_config import ResponseCacheConfig

log = logging.getLogger(__name__)
ACTOR_PREFIX = "conductor-worker-pool"
RESTART_POLL_S = 0.5
CALL_PROTOCOL = 2  # the actor's call signature: a detached actor of other code is refused, not called wrongly
FLUSH_TIMEOUT_S = 300.0  # for every pool actor to write its new cached answers (one shard each) as a run ends


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class WorkerPoolActor:
    def __init__(self, provider: ProviderSpec, workers: list[WorkerSpec], seed: Optional[int] = None,
                 run_name: str = "", cache: Optional[ResponseCacheConfig] = None,
                 occurrences: Optional[dict[str, int]] = None):
        restarted = ray.get_runtime_context().was_current_actor_reconstructed
        self.client = ProviderClient(provider, workers, seed=seed, recent_sends_unknown=restarted)
        # restarted, it counts on from the segment's start (its calls since are counted again: answers this run got
        # may be served again until the next resume, which reads the larger counts its checkpoints kept)
        self.calls = with_cache(self.client, cache or ResponseCacheConfig(), seen=occurrences)
        self.config = (CALL_PROTOCOL, provider, sorted(workers, key=lambda w: w.id), cache or ResponseCacheConfig())
        self.metrics = Families("conductor_pool", run=run_name, provider=provider.id)
        self.rate_limited = 0

    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   max_billable_attempts: Optional[int] = None) -> dict[str, Any]:
        return await self._call(worker_id, messages, params, max_billable_attempts=max_billable_attempts)

    async def chat_stream(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                          max_billable_attempts: Optional[int] = None):
        """A streamed call as a Ray streaming generator: ``{"delta": text}`` items as the reply arrives, then
        the same final item ``chat`` returns."""
        pieces: asyncio.Queue = asyncio.Queue()
        call = asyncio.ensure_future(self._call(worker_id, messages, params, pieces.put_nowait,
                                                max_billable_attempts=max_billable_attempts))
        while not (call.done() and pieces.empty()):
            getter = asyncio.ensure_future(pieces.get())
            await asyncio.wait({getter, call}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield {"delta": getter.result()}
            else:
                getter.cancel()
        yield call.result()

    async def _call(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                    on_delta: Optional[DeltaSink] = None, *,
                    max_billable_attempts: Optional[int] = None) -> dict[str, Any]:
        try:
            result = await self.calls.chat(worker_id, messages, params, on_delta,
                                           max_billable_attempts=max_billable_attempts)
        except ReplayMiss as exc:
            self.metrics.inc("conductor_pool_cache_lookups_total", worker=worker_id, outcome="miss")
            return {"replay_miss": str(exc)}
        except WorkerCallError as exc:
            self.metrics.inc("conductor_pool_calls_total", worker=worker_id, outcome=exc.kind)
            self.metrics.inc("conductor_pool_retries_total", exc.retries, worker=worker_id)
            self.metrics.inc("conductor_pool_cost_usd_total", exc.failed_attempts_usd, worker=worker_id)
            self._provider_state()
            return {"error": exc.payload()}
        self.metrics.inc("conductor_pool_calls_total", worker=worker_id, outcome="ok")
        if isinstance(self.calls, CachedClient):
            outcome = "hit" if result.cached else "miss"
            self.metrics.inc("conductor_pool_cache_lookups_total", worker=worker_id, outcome=outcome)
        if result.cached:  # nothing spent: the tokens and cost it had are the cache's stats
            self._provider_state()
            return {"result": result}
        self.metrics.inc("conductor_pool_tokens_total", result.prompt_tokens, worker=worker_id, kind="prompt")
        self.metrics.inc("conductor_pool_tokens_total", result.completion_tokens, worker=worker_id, kind="completion")
        spent = result.cost_usd + result.failed_attempts_usd
        self.metrics.inc("conductor_pool_cost_usd_total", spent, worker=worker_id)
        self.metrics.inc("conductor_pool_retries_total", result.retries, worker=worker_id)
        self.metrics.observe("conductor_pool_latency_seconds", result.latency_s, worker=worker_id)
        self._provider_state()
        return {"result": result}

    def _provider_state(self) -> None:
        """429s since the last call, the breaker's state and the limit in force."""
        limits, rate_limited = self.client.limits, self.client.stats["rate_limited"]
        self.metrics.inc("conductor_pool_rate_limited_total", rate_limited - self.rate_limited)
        self.rate_limited = rate_limited
        self.metrics.set("conductor_pool_cooling_down", float(limits.paused_until > time.monotonic()))
        if limits.rpm is not None:
            self.metrics.set("conductor_pool_rpm_limit", limits.rpm)

    def stats(self) -> dict[str, Any]:
        return self.calls.snapshot()

    def flush(self) -> None:
        """The response cache's new answers written now (the end of a run)."""
        if isinstance(self.calls, CachedClient):
            self.calls.flush()

    def occurrences(self) -> dict[str, int]:
        """The response cache's count of each request so far (nothing with the cache off)."""
        return self.calls.occurrences() if isinstance(self.calls, CachedClient) else {}

    def spec(self) -> tuple[int, ProviderSpec, list[WorkerSpec], ResponseCacheConfig]:
        return self.config

    def pid(self) -> int:
        return os.getpid()


def actor_name(provider_id: str) -> str:
    return f"{ACTOR_PREFIX}:{provider_id}"


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def placement_options(provider: ProviderSpec, node_id: Callable[[], str]) -> dict[str, Any]:
    """The actor's scheduling: on ``node_id()`` (the creator's node) when the provider is on loopback,
    since from any other node its address names another machine; anywhere otherwise."""
    if not is_loopback(provider.base_url):
        return {}
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id(), soft=False)}


class RayPool:
    """Routes each worker to its provider's actor; creates the actors or attaches to existing ones. An
    actor is owned by the process that created it and dies with it: create the pool in the driver
    first, so the actors outlive any rollout actor that attaches to them."""

    def __init__(self, config: PoolConfig, *, seed: Optional[int] = None, run_name: str = "", detached: bool = False,
                 occurrences: Optional[dict[str, dict[str, int]]] = None):
        """``detached``: the actors outlive their creator (the endpoint's replicas come and go with load).
        ``occurrences``: per provider, the response cache's counts a resumed run starts from."""
        routes = config.routes()
        self.route = {w.id: pid for pid, workers in routes.items() for w in workers}
        self.deadlines = {spec.id: spec.deadline_s for spec in config.providers}
        self.caching = config.cache.mode != "off"
        self.actors = {}
        for spec in config.providers:
            workers = routes[spec.id]
            where = placement_options(spec, lambda: ray.get_runtime_context().get_node_id())
            lifetime = {"lifetime": "detached"} if detached else {}
            actor = WorkerPoolActor.options(name=actor_name(spec.id), get_if_exists=True,
                                            **where, **lifetime).remote(spec, workers, seed, run_name, config.cache,
                                                                        (occurrences or {}).get(spec.id))
            running = ray.get(actor.spec.remote())
            if running != (CALL_PROTOCOL, spec, sorted(workers, key=lambda w: w.id), config.cache):
                raise ValueError(f"a WorkerPool actor for provider {spec.id!r} already runs in this Ray namespace "
                                 f"with a different provider or worker config (or pool.cache, or from other code); "
                                 f"stop it or use another namespace")
            self.actors[spec.id] = actor

    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   on_delta: Optional[DeltaSink] = None, *,
                   max_billable_attempts: Optional[int] = None) -> ChatResult:
        """Streamed (``on_delta``) through the actor's streaming generator; a call whose actor died is issued
        again only while none of its text has been passed on."""
        provider = self.route.get(worker_id)
        if provider is None:
            raise WorkerCallError(worker_id, "not_found", "no such worker in the pool")
        deadline = time.monotonic() + self.deadlines[provider]
        actor = self.actors[provider]
        limit = {} if max_billable_attempts is None else {"max_billable_attempts": max_billable_attempts}
        while True:
            passed_on = False
            try:
                if on_delta is None:
                    outcome = await actor.chat.remote(worker_id, messages, params, **limit)
                    break
                streamed = actor.chat_stream.options(num_returns="streaming")
                async for ref in streamed.remote(worker_id, messages, params, **limit):
                    outcome = await ref
                    if "delta" in outcome:
                        passed_on = True
                        on_delta(outcome["delta"])
                break
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                if passed_on:
                    raise WorkerCallError(worker_id, "stream_broken", f"worker-pool actor for provider {provider} "
                                          f"died mid-stream ({type(exc).__name__})", unsettled_attempts=1) from None
                if max_billable_attempts is not None:  # a cost cap's call: it may have been sent, so not again
                    raise WorkerCallError(worker_id, "actor_unavailable", f"worker-pool actor for provider "
                                          f"{provider} failed during the call ({type(exc).__name__}); not issued "
                                          "again under a cost cap", unsettled_attempts=1) from None
                if isinstance(exc, ray.exceptions.ActorDiedError) or time.monotonic() > deadline:
                    raise WorkerCallError(worker_id, "actor_unavailable", f"worker-pool actor for provider "
                                          f"{provider} is unavailable ({type(exc).__name__})") from None
                await asyncio.sleep(RESTART_POLL_S)
        if "error" in outcome:
            raise WorkerCallError(**outcome["error"])
        if "replay_miss" in outcome:
            raise ReplayMiss(outcome["replay_miss"])
        return outcome["result"]

    def stats(self, allow_unavailable: bool = False, timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
        """Each provider's counters; with ``allow_unavailable``, without a provider whose actor does not
        answer within ``timeout_s`` (dead or restarting)."""
        from actors.conductor_engine import answers_within

        providers = list(self.actors)
        calls = [self.actors[p].stats.remote() for p in providers]
        if not allow_unavailable:
            return dict(zip(providers, ray.get(calls)))
        return {p: answer for p, answer in zip(providers, answers_within(calls, timeout_s)) if answer is not None}

    def occurrences(self, timeout_s: float = 10.0) -> dict[str, dict[str, int]]:
        """Per provider whose actor answers within ``timeout_s``, the response cache's counts (none with the
        cache off)."""
        from actors.conductor_engine import answers_within

        if not self.caching:
            return {}
        providers = list(self.actors)
        counts = answers_within([self.actors[p].occurrences.remote() for p in providers], timeout_s)
        return {p: answer for p, answer in zip(providers, counts) if answer is not None}

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Every actor's new cached answers written (nothing to do with the cache off), all at once, within
        ``timeout_s`` in all. An actor that is gone or stuck keeps its unwritten answers (lost with it): said,
        not raised (this runs as a run ends, however it ends)."""
        if not self.caching:
            return
        flushing = {provider: actor.flush.remote() for provider, actor in self.actors.items()}
        deadline = time.monotonic() + timeout_s
        for provider, ref in flushing.items():
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.RayError as exc:  # GetTimeoutError among them
                log.warning("response cache of provider %s not flushed: %s", provider, type(exc).__name__)
