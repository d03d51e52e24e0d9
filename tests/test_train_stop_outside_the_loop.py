"""`ray job stop` (SIGTERM to the driver) outside the training loop, where no step can finish first: while the
held-out baselines' paid calls are in flight, then, resumed, while the closing held-out evaluation's are. Each
time the driver stops where it is and exits 143, with what the calls cost in the run's ledger and (the
baselines') their answers in the response cache (conductor/stop_request.py's ``interrupting``, cluster/train.py).
Before, the first died on Python's default for SIGTERM and the second on Ray's, with neither recorded, so a
resumed run's spend cap did not know the money was spent. The pool is a simulator started here, one 300 ms call
at a time, so the test signals once it has served calls in that phase, not after a guessed delay. Resumed
again, the run has no step left: it evaluates and summarises, with every segment's spend."""

import json
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from conductor.config_loader import load_config
from conductor.response_store import ResponseStore
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer
from tests.support.toy_warm_start import TOY_WARM_START
from tests.support.train_cli import run_train, start_train

pytestmark = pytest.mark.slow
TOY = Path(__file__).resolve().parents[1] / "configs" / "train-toy.yaml"
RUN = [*TOY_WARM_START, "run_name=stopped", "train.steps=1", "train.questions_per_step=3", "rollout.group_size=4",
       "learner.micro_batch_size=4", "train.format_floor=0", "train.refill_rounds=0", "train.plot=false",
       "train.max_staleness=0"]


def spent(run: Path) -> float:
    return json.loads((run / "spend.json").read_text())["spent_usd"]


def stop_when(sim: SimulatorServer, tmp_path: Path, config: Path, overrides: list[str], name: str,
              ready: Callable[[str], bool], calls_after: int) -> tuple[int, str, float]:
    """Start the driver, and once a line satisfies ``ready`` and the simulator has served ``calls_after`` more
    calls, SIGTERM it. Its exit code, its log, and the ledger's figure when that line was read."""
    driver = start_train(tmp_path, config, overrides, stderr=tmp_path / f"{name}.err")
    log, at_line = [], None
    try:
        for line in driver.stdout:
            log.append(line)
            if ready(line):
                run = tmp_path / "runs" / "stopped"
                at_line = spent(run) if (run / "spend.json").exists() else 0.0
                break
        served = sum(sim.state.counts.values())
        deadline = time.monotonic() + 300
        while sum(sim.state.counts.values()) < served + calls_after and driver.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert at_line is not None and driver.poll() is None, "".join(log)[-3000:]
        driver.send_signal(signal.SIGTERM)
        log.append(driver.stdout.read())
        driver.wait(timeout=300)
    finally:
        driver.kill()
        driver.stdout.close()
    errors = (tmp_path / f"{name}.err").read_text()
    log = "".join(log)
    assert driver.returncode == 128 + signal.SIGTERM, log[-3000:] + errors[-3000:]
    assert "Traceback" not in errors, errors[-3000:]
    return driver.returncode, log, at_line


@pytest.mark.timeout(1800)  # three driver runs, two with a cluster: ~110 s alone here, 240 s on a loaded machine
def test_sigterm_outside_the_loop_stops_at_once_with_what_the_calls_cost_kept(tmp_path, toy_warm_start):
    base = load_config(TOY, [*RUN, "simulator.fixed_latency_ms=300"])
    run = tmp_path / "runs" / "stopped"
    shutil.copytree(toy_warm_start, run / "sft")
    with SimulatorServer(base.simulator.model_copy(update={"port": 0})) as sim:
        pool = simulated_pool_config(sim.state.preset, sim.base_url, max_concurrency=1)
        cache = tmp_path / "cache"
        pool = pool.model_copy(update={"cache": pool.cache.model_copy(update={
            "mode": "read-write", "path": str(cache), "flush_every": 100000})})  # written as the pool closes
        config = tmp_path / "stopped.yaml"
        config.write_text(yaml.safe_dump(yaml.safe_load(TOY.read_text()) | {"pool": pool.model_dump(mode="json")}))

        # the baselines: right after the warm start is reused, once three of their calls are served
        _, log, _ = stop_when(sim, tmp_path, config, RUN, "baselines", lambda line: "SFT warm start: reusing" in line,
                              calls_after=3)
        assert "SIGTERM before training: stopped" in log
        assert spent(run) > 0 and not (run / "baselines.json").exists() and not (run / "summary.json").exists()
        assert len(ResponseStore(str(cache)).load(pool.providers[0].id)) >= 2  # the third's may be in flight

        # resumed: it trains its step, then the closing held-out evaluation is stopped after its first call
        _, log, before = stop_when(sim, tmp_path, config, [*RUN, "train.resume=true"], "heldout",
                                   lambda line: line.startswith("evaluating the best validated policy"), calls_after=1)
        assert "SIGTERM after training: stopped before the summary" in log and "step-1" in log, log[-3000:]
        assert spent(run) > before  # the held-out calls it made are in the ledger
        assert not (run / "summary.json").exists()
        assert json.loads((run / "checkpoints" / "latest.json").read_text())["tag"] == "step-1"

        # resumed again with every step trained: it evaluates and summarises, the spend carried over
        carried = spent(run)
        done = run_train(tmp_path, config, [*RUN, "train.resume=true"])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "resumed from step-1" in done.stdout and "step 1 " not in done.stdout  # nothing trained again
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == 1 and summary["stopped"] is None
        assert summary["segment_spend_usd"]["training_steps"] == 0 and summary["segment_spend_usd"]["closing"] > 0
        assert summary["spent_usd"] == pytest.approx(carried + sum(summary["segment_spend_usd"].values()))
