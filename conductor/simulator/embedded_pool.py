"""The simulated pool a command starts for itself when its config names no workers: the simulator on a free
loopback port for as long as ``stack`` is open, and the config's pool spec pointed at it. One function for
every command (train, rollouts, evaluate, calibrate, serve), so they call the simulator alike: with the key
it demands (``simulator.api_key_env``), the client limits a run is configured to keep (``client_*``), and the
configured response cache."""

from __future__ import annotations

import contextlib
from typing import Optional

from conductor.config import Config
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer


def with_simulated_pool(config: Config, stack: contextlib.ExitStack) -> tuple[Config, Optional[SimulatorServer]]:
    """``config`` unchanged when it has workers (and no simulator); otherwise the config calling the
    simulator started here, and that simulator (its preset, its URL for the log)."""
    if config.pool.workers:
        return config, None
    settings = config.simulator
    sim = stack.enter_context(SimulatorServer(settings.model_copy(update={"port": 0})))
    key = {"api_key_env": settings.api_key_env} if settings.api_key_env else {}
    pool = simulated_pool_config(sim.state.preset, sim.base_url, **settings.client_limits(), **key)
    return config.model_copy(update={"pool": pool.model_copy(update={"cache": config.pool.cache})}), sim
