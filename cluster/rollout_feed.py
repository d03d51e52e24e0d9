"""RolloutFeed: hands rollout requests to the rollout actors and collects what comes back.

Each request goes to the least-busy actor. A request whose actor died (or was restarting) is issued
again, with the same batch id, after a short pause and preferably to another actor: the records get the
same ids and the replay store keeps one copy, whichever attempt writes first. A request that fails
``max_attempts`` times, or fails inside the actor (a bug, an unreachable store), is given up and
reported, so the driver can replace its groups instead of waiting for them forever; one that met a
replay-only response cache without the answer (``ReplayMiss``) stops the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import ray

from conductor.pool import ReplayMiss
from conductor.rollout import RolloutReceipt, RolloutRequest, SamplingSettings
from conductor.rollout_record import RolloutRecord
from conductor.tasks.task import Task

ACTOR_GONE = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)


@dataclass
class FeedCounters:
    reissued: int = 0                 # requests issued again after their actor died
    given_up: int = 0


class RolloutFeed:
    def __init__(self, actors: Sequence[Any], max_attempts: int = 30, retry_pause_s: float = 1.0):
        if not actors:
            raise ValueError("a rollout feed needs at least one rollout actor")
        self.actors = list(actors)
        self.max_attempts, self.retry_pause_s = max_attempts, retry_pause_s
        self.load = [0] * len(self.actors)
        self.running: dict[Any, tuple[RolloutRequest, int, int]] = {}  # call -> (request, actor, attempt)
        self.retrying: list[tuple[float, RolloutRequest, int, int]] = []  # (not before, request, attempt, last actor)
        self.finished: dict[str, RolloutReceipt] = {}
        self.came_back: set[str] = set()  # the batch id of every request that came back, whoever polled
        self.unstored: set[str] = set()  # groups of requests that came back without storing them (take_unstored)
        self.given_up: list[RolloutRequest] = []
        self.counters = FeedCounters()

    @property
    def busy(self) -> bool:
        return bool(self.running or self.retrying)

    def submit(self, request: RolloutRequest, attempt: int = 0, avoid: Optional[int] = None) -> None:
        choices = [i for i in range(len(self.actors)) if i != avoid] or list(range(len(self.actors)))
        index = min(choices, key=self.load.__getitem__)
        self.load[index] += 1
        self.running[self.actors[index].run.remote(request)] = (request, index, attempt)

    def poll(self, timeout_s: float) -> list[RolloutReceipt]:
        """Wait up to ``timeout_s`` for requests to finish; returns the receipts of those that did.
        Failed requests are re-issued or given up here."""
        self._resubmit_due()
        if not self.running:
            time.sleep(min(timeout_s, self._next_retry_in()) if self.retrying else timeout_s)
            self._resubmit_due()
            return []
        done, _ = ray.wait(list(self.running), num_returns=1, timeout=timeout_s)
        if done:
            done, _ = ray.wait(list(self.running), num_returns=len(self.running), timeout=0)
        receipts = []
        for call in done:
            request, index, attempt = self.running.pop(call)
            self.load[index] -= 1
            try:
                receipt = ray.get(call)
            except ACTOR_GONE:
                self._retry(request, attempt, index)
                continue
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, ReplayMiss):  # a replay that cannot go on: the run stops
                    raise ReplayMiss(str(exc.cause)) from None
                self._give_up(request)
                continue
            self.came_back.add(receipt.batch_id)
            if request.write:
                self.unstored.update(set(request.group_ids()) - set(receipt.stored))
            if request.return_records:
                self.finished[receipt.batch_id] = receipt  # for ``run`` to return
            receipts.append(receipt)
        return receipts

    def take_unstored(self, group_id: str) -> bool:
        """True (once) when this group's request came back without storing it: it will never be listed."""
        if group_id in self.unstored:
            self.unstored.discard(group_id)
            return True
        return False

    def wait_sampled(self, timeout_s: float, on_wait: Callable[[], None] = lambda: None, pause_s: float = 0.05,
                     ) -> bool:
        """Wait until every request in flight has drawn its Conductor completions (the actors' ``sampled``),
        has finished, or has lost its actor; False if some had not after ``timeout_s``. Published after this,
        new weights reach no request that was issued before them. ``on_wait``: the caller's actor care, each
        round (an engine back from a restart serves only once it has its weights)."""
        deadline = time.monotonic() + timeout_s
        while self.running:
            on_wait()
            calls = list(self.running)
            finished, _ = ray.wait(calls, num_returns=len(calls), timeout=0)
            waiting: dict[int, list[str]] = {}
            for call in set(calls) - set(finished):
                request, index, _ = self.running[call]
                waiting.setdefault(index, []).append(request.batch_id)
            if not waiting:
                return True
            asks = {index: self.actors[index].sampled.remote(ids) for index, ids in waiting.items()}
            try:
                if all(all(ray.get(ask, timeout=max(0.1, deadline - time.monotonic()))) for ask in asks.values()):
                    return True
            except ray.exceptions.GetTimeoutError:
                return False
            except ACTOR_GONE:
                pass  # its calls fail, so the next look leaves them out: they are issued again, after these weights
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause_s)
        return True

    def drain(self, timeout_s: float, on_wait: Callable[[], None] = lambda: None) -> int:
        """Wait up to ``timeout_s`` for every request in flight to come back (or be given up); returns how
        many are still out."""
        deadline = time.monotonic() + timeout_s
        while self.busy and time.monotonic() < deadline:
            self.poll(timeout_s=min(1.0, max(0.0, deadline - time.monotonic())))
            on_wait()
        return len(self.running) + len(self.retrying)

    def run(self, requests: Sequence[RolloutRequest], on_wait: Callable[[], None] = lambda: None,
            ) -> list[RolloutReceipt]:
        """Issue ``requests`` (with ``return_records``) and wait for all of them; other requests keep
        running meanwhile."""
        if not all(request.return_records for request in requests):
            raise ValueError("run() collects records: issue the requests with return_records=True")
        for request in requests:
            self.submit(request)
        wanted = {request.batch_id for request in requests}
        while not wanted <= set(self.finished):
            if any(r.batch_id in wanted for r in self.given_up):
                raise RuntimeError(f"rollout requests failed: {sorted(r.batch_id for r in self.given_up)}")
            self.poll(timeout_s=1.0)
            on_wait()  # the caller's actor care: e.g. an engine back from a restart gets its weights
        return [self.finished.pop(batch_id) for batch_id in [r.batch_id for r in requests]]

    def evaluate(self, tasks: Sequence[Task], sampling: SamplingSettings, batch_id: str,
                 on_wait: Callable[[], None] = lambda: None, settings: Sequence[Optional[int]] = (None,),
                 ) -> list[RolloutRecord]:
        """One sample per task and setting, the tasks dealt over the actors, all in flight at once, nothing
        written to the store. The root workflow alone, as the report's ``conductor`` row scores it: a share of
        recursive rounds drawn at random would make two checkpoints' scores differ by the draw
        (``conductor_recursive`` is evaluated by cluster.evaluate). ``settings``: a dial run's cost_quality
        settings, every question at each (None: no dial)."""
        actors = len(self.actors)
        requests = [RolloutRequest(f"{batch_id}-eval{i}" + ("" if setting is None else f"-c{setting}"),
                                   tuple(tasks[i::actors]), group_size=1, sampling=sampling, write=False,
                                   return_records=True, recursive_fraction=0.0, cost_quality=setting)
                    for setting in settings for i in range(actors) if tasks[i::actors]]
        return [record for receipt in self.run(requests, on_wait) for record in receipt.records]

    def take_given_up(self) -> list[RolloutRequest]:
        given_up, self.given_up = self.given_up, []
        return given_up

    def _retry(self, request: RolloutRequest, attempt: int, index: int) -> None:
        if attempt + 1 >= self.max_attempts:
            self._give_up(request)
            return
        self.counters.reissued += 1
        self.retrying.append((time.monotonic() + self.retry_pause_s, request, attempt + 1, index))

    def _give_up(self, request: RolloutRequest) -> None:
        self.given_up.append(request)
        self.counters.given_up += 1

    def _resubmit_due(self) -> None:
        now, waiting = time.monotonic(), []
        for due in self.retrying:
            if due[0] <= now:
                self.submit(due[1], attempt=due[2], avoid=due[3])
            else:
                waiting.append(due)
        self.retrying = waiting

    def _next_retry_in(self) -> float:
        return max(0.0, min((due[0] for due in self.retrying), default=0.0) - time.monotonic())
