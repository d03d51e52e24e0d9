"""Every metric the cluster exports, one family per actor kind, defined once (the engine, rollout and
pool actors, the learner's rank 0 and the driver all take their families from here).

``ray.util.metrics`` sends them to the node's metrics agent; Prometheus scrapes the head's export port
(``ray start --metrics-export-port``) and every name gains Ray's ``ray_`` prefix. Names are Prometheus
names (``[a-z_]``, counters end in ``_total``, units in the name); tags say which run, replica, actor or
provider. These names are the contract with ``k8s/grafana-dashboard.json`` (tests/test_metrics_names.py
checks every panel's query against this file).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

LATENCY_BOUNDARIES = [0.1, 0.5, 1, 2, 5, 10, 30, 60, 120]
DRIVER_PHASES = ("generate", "train", "sync", "eval", "checkpoint", "idle")

# name: (kind, description, tag keys)
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # engine (actors/conductor_engine.py)
    "conductor_engine_generated_tokens_total": ("counter", "completion tokens generated", ("run", "replica")),
    "conductor_engine_running_requests": ("gauge", "sequences being generated", ("run", "replica")),
    "conductor_engine_policy_version": ("gauge", "policy version served (-1: awaiting weights)", ("run", "replica")),
    # rollout actor (actors/rollout_actor.py)
    "conductor_rollouts_total": ("counter", "rollouts scored, by outcome (correct, wrong, format_error, "
                                 "infra_error)", ("run", "actor", "outcome")),
    "conductor_rollout_episode_seconds": ("histogram", "one episode: workers + verifier", ("run", "actor")),
    "conductor_rollout_format_rate": ("gauge", "format rate of the last request", ("run", "actor")),
    # pool (actors/worker_pool.py)
    "conductor_pool_calls_total": ("counter", "worker API calls by outcome", ("run", "provider", "worker", "outcome")),
    "conductor_pool_rate_limited_total": ("counter", "429 answers", ("run", "provider")),
    "conductor_pool_retries_total": ("counter", "retried attempts", ("run", "provider", "worker")),
    "conductor_pool_tokens_total": ("counter", "tokens used", ("run", "provider", "worker", "kind")),
    "conductor_pool_cost_usd_total": ("counter", "USD spent", ("run", "provider", "worker")),
    "conductor_pool_latency_seconds": ("histogram", "call latency incl. retries", ("run", "provider", "worker")),
    "conductor_pool_cooling_down": ("gauge", "1 while the provider's circuit breaker pauses calls",
                                    ("run", "provider")),
    "conductor_pool_rpm_limit": ("gauge", "requests per window in force (configured or learned from 429s)",
                                 ("run", "provider")),
    "conductor_pool_cache_lookups_total": ("counter", "response-cache lookups by outcome (hit: served from the "
                                           "cache, nothing spent; miss)", ("run", "provider", "worker", "outcome")),
    # learner (learner/learner_rank.py, rank 0)
    "conductor_learner_step_seconds": ("gauge", "last training step inside the rank", ("run",)),
    "conductor_learner_grad_norm": ("gauge", "gradient norm of the last step", ("run",)),
    "conductor_learner_tokens_per_second": ("gauge", "tokens (prompt + completion) trained per second", ("run",)),
    "conductor_learner_steps_total": ("counter", "optimizer steps", ("run",)),
    # driver (cluster/grpo_recipe.py)
    "conductor_train_phase": ("gauge", "1 for the phase the driver is in", ("run", "phase")),
    "conductor_train_staleness": ("gauge", "policy versions between the learner and the oldest trained group",
                                  ("run",)),
    "conductor_train_queue_depth": ("gauge", "rollout requests in flight", ("run",)),
    "conductor_train_faults_total": ("counter", "actor restarts, re-issued requests, lost work, by kind (the "
                                     "faults of summary.json)", ("run", "kind")),
}
DRIVER_GAUGES = ("mean_reward", "accuracy", "format_rate", "steps_per_workflow", "cost_usd_per_rollout", "step_s",
                 "val_accuracy", "policy_version",
                 "spent_usd", "forecast_usd", "forecast_low_usd", "forecast_high_usd")  # conductor/cost_forecast.py
for _key in DRIVER_GAUGES:
    FAMILIES[f"conductor_train_{_key}"] = ("gauge", f"training: {_key} of the last step", ("run",))


def family(name: str) -> Any:
    from ray.util import metrics  # recorded by the Ray worker this runs in

    kind, description, tags = FAMILIES[name]
    if kind == "counter":
        return metrics.Counter(name, description, tag_keys=tags)
    if kind == "gauge":
        return metrics.Gauge(name, description, tag_keys=tags)
    return metrics.Histogram(name, description, boundaries=LATENCY_BOUNDARIES, tag_keys=tags)


class GaugeKeeper:
    """Records every gauge's last value again while the process lives. Ray's metrics agent drops a gauge
    that is not reported again within two report intervals (20 s by default), so a value set once per
    training step (minutes on a 7B model) would blink in and out of Prometheus; a Prometheus gauge keeps
    its last value. One daemon thread per process, every half report interval."""

    _instance: GaugeKeeper | None = None
    _create = threading.Lock()

    def __init__(self, period_s: float | None = None):
        if period_s is None:
            import ray

            period_s = max(0.25, ray._config.metrics_report_interval_ms() / 2000)
        self.period_s = period_s
        self.values: dict[tuple[int, frozenset], tuple[Any, float, dict[str, str]]] = {}
        self.lock = threading.Lock()  # a set and the loop's re-record never interleave: the newest value wins
        self.stopped = threading.Event()
        threading.Thread(target=self._loop, name="gauge-keeper", daemon=True).start()

    @classmethod
    def shared(cls) -> GaugeKeeper:
        with cls._create:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def set(self, gauge: Any, value: float, tags: dict[str, str]) -> None:
        with self.lock:
            gauge.set(value, tags=tags)
            self.values[(id(gauge), frozenset(tags.items()))] = (gauge, value, tags)

    def stop(self) -> None:
        self.stopped.set()

    def _loop(self) -> None:
        while not self.stopped.wait(self.period_s):
            with self.lock:
                for key, (gauge, value, tags) in list(self.values.items()):
                    try:
                        gauge.set(value, tags=tags)
                    except Exception:  # best effort: this series can no longer be recorded; the rest go on
                        del self.values[key]


class Families:
    """The families whose names start with ``prefix``, with fixed tags (e.g. run and replica) applied."""

    def __init__(self, prefix: str, **tags: str):
        self.tags = tags
        self.items = {name: family(name) for name in FAMILIES if name.startswith(prefix)}

    def inc(self, name: str, value: float = 1.0, **tags: str) -> None:
        if value:
            self.items[name].inc(value, tags={**self.tags, **tags})

    def set(self, name: str, value: float, **tags: str) -> None:
        GaugeKeeper.shared().set(self.items[name], float(value), {**self.tags, **tags})

    def observe(self, name: str, value: float, **tags: str) -> None:
        self.items[name].observe(value, tags={**self.tags, **tags})


class PhaseGauge:
    """The driver's phase as one gauge per phase (1 now, 0 otherwise), which Grafana shows as a state
    timeline: ``with phase("train"): ...`` marks a span and returns to the phase it interrupted."""

    def __init__(self, families: Families):
        self.families, self.current = families, "idle"
        self._show("idle")

    def _show(self, phase: str) -> None:
        for name in DRIVER_PHASES:
            self.families.set("conductor_train_phase", 1.0 if name == phase else 0.0, phase=name)
        self.current = phase

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        previous = self.current
        self._show(phase)
        try:
            yield
        finally:
            self._show(previous)
