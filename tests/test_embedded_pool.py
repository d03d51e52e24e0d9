"""A command with no workers configured starts the simulator and calls it as its config says
(conductor/simulator/embedded_pool.py): with the key the simulator demands, the configured client limits and
response cache; every command (train, rollouts, evaluate, calibrate, serve) goes through this one function."""

import contextlib
import secrets
from pathlib import Path

from cluster.rollouts import tasks_for
from conductor.baselines import run_baselines
from conductor.config_loader import load_config
from conductor.simulator.embedded_pool import with_simulated_pool

TOY = Path(__file__).resolve().parents[1] / "configs" / "train-toy.yaml"
KEY_ENV = "CONDUCTOR_TEST_SIM_KEY"


class FakeTokenizer:
    """Prompt ids without a model: the fixed routers never read them."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return list(range(sum(len(m["content"]) for m in messages) // 50))


def test_the_simulated_pool_carries_the_key_the_limits_and_the_cache_and_answers(monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, "sk-sim-" + secrets.token_hex(16))
    config = load_config(TOY, ["simulator.toy_items_per_domain=10", "simulator.latency_scale=0",
                               f"simulator.api_key_env={KEY_ENV}", "simulator.client_rpm=600",
                               "pool.cache.mode=read-write", f"pool.cache.path={tmp_path / 'cache'}"])
    with contextlib.ExitStack() as stack:
        called, sim = with_simulated_pool(config, stack)
        provider = called.pool.providers[0]
        assert sim is not None and provider.base_url == sim.base_url
        assert provider.api_key_env == KEY_ENV and provider.rpm == 600
        assert called.pool.cache == config.pool.cache and len(called.pool.workers) == len(sim.state.preset.workers)
        figures, _ = run_baselines(called, list(tasks_for(called))[:3], FakeTokenizer())
        assert sim.state.counts["unauthorized"] == 0 and sum(sim.state.counts.values()) >= 3
        assert all(stats["infra_errors"] == 0 for name, stats in figures.items() if "infra_errors" in stats)

        unchanged, none = with_simulated_pool(called, stack)  # a config with workers is left as it is
        assert unchanged is called and none is None
