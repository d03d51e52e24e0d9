"""`ray job stop` (SIGTERM to the driver) before training, while the held-out baselines' paid calls are in
flight: the driver stops there and exits 143, with what those calls cost in the run's ledger and their answers
in the response cache (conductor/stop_request.py's ``interrupting``, cluster/train.py). Python's default for
SIGTERM would end it with neither, and a resumed run's spend cap would not know the money was spent. The pool
is a simulator started here, so the test signals once it has served calls, not after a guessed delay."""

import json
import signal
import time
from pathlib import Path

import pytest
import yaml

from conductor.config_loader import load_config
from conductor.response_store import ResponseStore
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer
from tests.support.train_cli import start_train

pytestmark = pytest.mark.slow
TOY = Path(__file__).resolve().parents[1] / "configs" / "train-toy.yaml"
SMALL = ["run_name=stopped", "sft.steps=0", "simulator.toy_items_per_domain=10", "train.val_questions=6",
         "train.heldout_questions=6"]


@pytest.mark.timeout(600)
def test_sigterm_during_the_baselines_exits_143_with_their_spend_and_answers_kept(tmp_path):
    base = load_config(TOY, [*SMALL, "simulator.fixed_latency_ms=300"])
    with SimulatorServer(base.simulator.model_copy(update={"port": 0})) as sim:
        pool = simulated_pool_config(sim.state.preset, sim.base_url, max_concurrency=1)  # one 300 ms call at a time
        cache = tmp_path / "cache"
        pool = pool.model_copy(update={"cache": pool.cache.model_copy(update={
            "mode": "read-write", "path": str(cache), "flush_every": 100000})})  # written as the pool closes
        config = yaml.safe_load(TOY.read_text()) | {"pool": pool.model_dump(mode="json")}
        (tmp_path / "stopped.yaml").write_text(yaml.safe_dump(config))
        driver = start_train(tmp_path, tmp_path / "stopped.yaml", SMALL, stderr=tmp_path / "driver.err")
        try:
            deadline = time.monotonic() + 300
            while sum(sim.state.counts.values()) < 3 and driver.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert driver.poll() is None, "the driver ended before the baselines' calls"
            driver.send_signal(signal.SIGTERM)
            log = driver.stdout.read()
            driver.wait(timeout=120)
        finally:
            driver.kill()
            driver.stdout.close()
        errors = (tmp_path / "driver.err").read_text()
        assert driver.returncode == 128 + signal.SIGTERM, log[-2000:] + errors[-3000:]
        run = tmp_path / "runs" / "stopped"
        assert "SIGTERM before training: stopped" in log and "Traceback" not in errors, log[-2000:] + errors[-3000:]
        assert json.loads((run / "spend.json").read_text())["spent_usd"] > 0
        assert not (run / "baselines.json").exists() and not (run / "summary.json").exists()
        assert len(ResponseStore(str(cache)).load(pool.providers[0].id)) >= 2  # the third's may be in flight
