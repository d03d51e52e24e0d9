"""The metric families (conductor/metrics.py) are valid Prometheus names and labels, and the shipped
Grafana dashboard queries exactly these families: no panel on a name that does not exist, no family
without a panel."""

import json
import re
from pathlib import Path

import pytest

from conductor.metrics import DRIVER_PHASES, FAMILIES

DASHBOARD = Path(__file__).resolve().parents[1] / "k8s" / "grafana-dashboard.json"
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_is_a_valid_prometheus_metric(name):
    kind, description, tags = FAMILIES[name]
    assert NAME.match(name) and name.startswith("conductor_") and description
    assert name.endswith("_total") == (kind == "counter"), "counters, and only counters, end in _total"
    if kind == "histogram":
        assert name.endswith("_seconds")
    assert "run" in tags and len(set(tags)) == len(tags)
    assert all(LABEL.match(tag) and not tag.startswith("__") and tag not in ("le", "quantile") for tag in tags)


def dashboard_queries() -> list[str]:
    def walk(panels):
        for panel in panels:
            yield from (target["expr"] for target in panel.get("targets", []))
            yield from walk(panel.get("panels", []))

    return list(walk(json.loads(DASHBOARD.read_text())["panels"]))


def test_the_dashboard_queries_every_family_and_only_those():
    used = set()
    for query in dashboard_queries():
        for token in re.findall(r"\bray_(conductor_[a-z_]+)", query):
            base = re.sub(r"_(bucket|sum|count)$", "", token)
            assert base in FAMILIES, f"the dashboard queries {token}, which conductor/metrics.py does not define"
            if base != token:
                assert FAMILIES[base][0] == "histogram", f"{token}: only histograms have _bucket/_sum/_count"
            used.add(base)
            assert '{run=~"$run"}' in query, f"{query}: every panel follows the run selector"
    assert used == set(FAMILIES), f"families without a panel: {sorted(set(FAMILIES) - used)}"


def test_the_driver_phases_cover_the_loop():
    assert set(DRIVER_PHASES) >= {"generate", "train", "sync", "eval", "checkpoint"}


def test_a_gauges_last_value_is_recorded_again_until_the_process_ends():
    """Ray's agent drops a gauge not reported for two report intervals; the keeper reports it again."""
    import threading

    from conductor.metrics import GaugeKeeper

    class Recorded:
        def __init__(self):
            self.calls, self.event = [], threading.Event()

        def set(self, value, tags):
            self.calls.append((value, dict(tags)))
            if len(self.calls) >= 6:
                self.event.set()

    class Broken:  # recorded once, then Ray is gone
        def __init__(self):
            self.calls = 0

        def set(self, value, tags):
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("Ray is gone")

    keeper, gauge = GaugeKeeper(period_s=0.01), Recorded()
    try:
        keeper.set(gauge, 1.0, {"run": "r"})
        keeper.set(gauge, 2.0, {"run": "r"})  # the newer value of the same series replaces the older
        keeper.set(gauge, 5.0, {"run": "other"})
        broken = Broken()
        keeper.set(broken, 1.0, {"run": "r"})
        assert gauge.event.wait(timeout=30)  # re-recorded by the loop, which a failing series does not stop
    finally:
        keeper.stop()
    assert gauge.calls[:3] == [(1.0, {"run": "r"}), (2.0, {"run": "r"}), (5.0, {"run": "other"})]
    assert all(call in [(2.0, {"run": "r"}), (5.0, {"run": "other"})] for call in gauge.calls[3:]), gauge.calls
    assert broken.calls == 2  # dropped after its first failure
