"""The worker-response cache: a wrapper around a provider's client (conductor/provider_client.py) that serves
a call from the answers earlier runs stored (conductor/response_store.py), so a re-run does not pay again.

A call's key is its request (provider, model, messages and every sampling setting it sends) and its
occurrence: the n-th identical request of this pool gets the n-th answer stored for it, so a group's
identical samples stay independent draws and a re-run replays them in order. With ``share_identical`` every
identical request gets the first answer (concurrent ones wait for it). Occurrences count per pool: one per
provider in a cluster (its pool actor), one per in-process pool of the driver (the warm start's
measurements, the baselines). A resumed training run starts its pool actors from the counts its last
checkpoint kept (cluster/cache_occurrences.py), so it does not serve itself answers it already got; a pool
actor that restarts mid-run counts from those again (from 0 in a fresh run), and its checkpoints keep the
larger counts.

A cached answer spends nothing (no call, no rate-limit tokens) but keeps the tokens and the cost the call
had, so an episode's reward and the reports read the same as when it was made; ``ChatResult.cached`` and
the stats say what was not spent. An error, a refusal (finish reason ``content_filter``) or an answer cut
by the provider (``length``, which also stands for a finish reason not known as the model's own end) is never
stored. In ``replay-only`` mode a call without a stored answer raises
``ReplayMiss``, which stops the run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Optional, Union

from conductor.pool import ChatResult, DeltaSink, Messages, ReplayMiss
from conductor.provider_client import ProviderClient
from conductor.response_cache_config import ResponseCacheConfig
from conductor.response_store import Key, NewEntry, ResponseStore, StoredAnswer

log = logging.getLogger(__name__)
NOT_CACHED = ("length", "content_filter")  # cut off (a limit, a reason not known as the model's end); refused
SHOWN_CHARS = 80


def request_digest(provider: str, model: str, messages: Messages, sampling: dict[str, Any]) -> str:
    """The request, canonical JSON, hashed: equal for requests a provider cannot tell apart."""
    canonical = json.dumps({"provider": provider, "model": model, "messages": messages, "sampling": sampling},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()  # a lone surrogate is text too


def cacheable(result: Union[ChatResult, StoredAnswer]) -> bool:
    return result.finish_reason not in NOT_CACHED


def storable(text: str) -> bool:
    """Text Parquet can hold: a lone surrogate (half an emoji) is a valid Python string but not UTF-8. Stored
    answers are UTF-8 already: only new ones are checked."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    stored: int = 0
    uncacheable: int = 0     # answers not stored: cut off, refused, or text that is not UTF-8
    identical: int = 0       # calls repeating an earlier request of this pool (whether served or not)
    saved_usd: float = 0.0   # what the hits cost when they were made

    def as_dict(self) -> dict[str, Any]:
        calls = self.hits + self.misses
        return dict(asdict(self), calls=calls, hit_rate=self.hits / calls if calls else None,
                    identical_share=self.identical / calls if calls else None)


class CachedClient:
    """``ProviderClient``'s ``chat`` and ``snapshot``, answered from the cache where it can."""

    def __init__(self, client: ProviderClient, config: ResponseCacheConfig, store: Optional[ResponseStore] = None,
                 seen: Optional[Mapping[str, int]] = None):
        """``seen``: each request digest's calls so far in this run (a resumed run's, from its checkpoint)."""
        if config.mode == "off" or config.path is None:
            raise ValueError("CachedClient needs pool.cache.mode read-write or replay-only and a pool.cache.path")
        self.client, self.config = client, config
        self.provider = client.spec.id
        self.store = store or ResponseStore(config.path, config.storage_options)
        self.answers: dict[Key, StoredAnswer] = {
            key: answer for key, answer in self.store.load(self.provider).items() if cacheable(answer)}
        self.seen: Counter[str] = Counter(seen or {})
        self.pending: list[NewEntry] = []
        self.inflight: dict[Key, asyncio.Future] = {}
        self.stats = CacheStats()

    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   on_delta: Optional[DeltaSink] = None, *,
                   max_billable_attempts: Optional[int] = None) -> ChatResult:
        sampling = self.client.request(worker_id, params)  # an unknown worker or setting fails as uncached
        model = self.client.workers[worker_id].model_name
        digest = request_digest(self.provider, model, messages, sampling)
        occurrence = self.seen[digest]
        self.seen[digest] += 1
        self.stats.identical += occurrence > 0
        key = (digest, 0 if self.config.share_identical else occurrence)
        while key in self.inflight:  # an identical call is being made: its answer is this one's too; when it
            await asyncio.shield(self.inflight[key])  # stored none, one waiter calls and the others wait again
        answer = self.answers.get(key)
        if answer is not None:
            return self._hit(answer, on_delta)
        self.stats.misses += 1
        if self.config.mode == "replay-only":
            raise ReplayMiss(self._miss_message(worker_id, digest, occurrence, messages))
        done = self.inflight[key] = asyncio.get_running_loop().create_future()
        try:
            result = await self.client.chat(worker_id, messages, params, on_delta,
                                            max_billable_attempts=max_billable_attempts)
        finally:
            if self.inflight.get(key) is done:
                del self.inflight[key]
            done.set_result(None)
        self._keep(key, worker_id, model, result)
        if len(self.pending) >= self.config.flush_every:  # taken here, on the loop that appends; written off it
            entries, self.pending = self.pending, []
            self.pending[:0] = await asyncio.to_thread(self._write, entries)
        return result

    def _hit(self, answer: StoredAnswer, on_delta: Optional[DeltaSink]) -> ChatResult:
        self.stats.hits += 1
        self.stats.saved_usd += answer.cost_usd
        if on_delta is not None and answer.text:
            on_delta(answer.text)  # a pool that cannot stream hands over the whole text at once
        return ChatResult(answer.text, answer.prompt_tokens, answer.completion_tokens, answer.cost_usd,
                          finish_reason=answer.finish_reason, reasoning_tokens=answer.reasoning_tokens, cached=True)

    def _keep(self, key: Key, worker_id: str, model: str, result: ChatResult) -> None:
        if not (cacheable(result) and storable(result.text)):
            self.stats.uncacheable += 1
            return
        answer = StoredAnswer(result.text, result.prompt_tokens, result.completion_tokens, result.reasoning_tokens,
                              result.cost_usd, result.finish_reason)
        if self.answers.setdefault(key, answer) is answer:
            self.pending.append(NewEntry(key, self.provider, model, worker_id, answer))
            self.stats.stored += 1

    def _miss_message(self, worker_id: str, digest: str, occurrence: int, messages: Messages) -> str:
        last = " ".join(str(messages[-1].get("content") or "").split()) if messages else ""
        shown = last[:SHOWN_CHARS] + ("..." if len(last) > SHOWN_CHARS else "")
        which = "" if self.config.share_identical else f", identical request #{occurrence + 1} of this run"
        return (f"pool.cache is replay-only and holds no answer for worker {worker_id} (request {digest[:12]}"
                f"{which}; cache {self.config.path}): last message {shown!r}. Replay-only serves only a run "
                "whose every answer was stored (not one cut off or refused); pool.cache.mode=read-write calls "
                "the provider for what is missing")

    def flush(self) -> None:
        """Write the answers not yet stored as one shard; on a storage failure they wait for the next flush."""
        entries, self.pending = self.pending, []
        self.pending[:0] = self._write(entries)

    def _write(self, entries: list[NewEntry]) -> list[NewEntry]:
        """``entries`` as one shard; returns those not written."""
        try:
            self.store.append(self.provider, entries)
        except Exception as exc:  # the calls were answered: a cache that cannot write must not fail them
            log.warning("response cache: %d answers not written to %s yet (%s)", len(entries), self.config.path,
                        type(exc).__name__)
            return entries
        return []

    def occurrences(self) -> dict[str, int]:
        """Each request digest's calls so far, to start a resumed run's counts from."""
        return dict(self.seen)

    def snapshot(self) -> dict[str, Any]:
        return dict(self.client.snapshot(), cache=dict(self.stats.as_dict(), mode=self.config.mode))

    async def close(self) -> None:
        self.flush()
        await self.client.close()


PoolClient = Union[ProviderClient, CachedClient]


def with_cache(client: ProviderClient, config: ResponseCacheConfig,
               seen: Optional[Mapping[str, int]] = None) -> PoolClient:
    """``client`` behind the cache ``config`` asks for; ``client`` itself when the cache is off."""
    return client if config.mode == "off" else CachedClient(client, config, seen=seen)


COUNTS = tuple(CacheStats.__dataclass_fields__)  # the counters a snapshot's ``cache`` carries


def cache_figures(counts: dict[str, Any], mode: Optional[str]) -> dict[str, Any]:
    """The figures reported for summed counters (``COUNTS``): with calls, hit rate and identical share."""
    return dict(CacheStats(**{name: counts[name] for name in COUNTS}).as_dict(), mode=mode)


def combined_stats(snapshots: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The cache figures of several pools' snapshots (``snapshot()``) summed; None when none has a cache."""
    caches = [s["cache"] for s in snapshots if "cache" in s]
    if not caches:
        return None
    return cache_figures({name: sum(c[name] for c in caches) for name in COUNTS}, caches[0]["mode"])
