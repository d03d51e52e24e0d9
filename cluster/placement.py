"""Placement of the policy engines: one bundle per replica ({"CPU": n} here, {"CPU": n, "GPU": g} on GPU
nodes), packed, so replicas land where their resources are reserved before any model loads."""

from __future__ import annotations

import ray
from ray.util.placement_group import PlacementGroup, placement_group

from conductor.config import EngineConfig


def engine_bundles(config: EngineConfig) -> list[dict[str, float]]:
    bundle = {"CPU": config.num_cpus}
    if config.num_gpus > 0:
        bundle["GPU"] = config.num_gpus
    return [dict(bundle) for _ in range(config.replicas)]


def engine_placement_group(config: EngineConfig, timeout_s: float = 120.0) -> PlacementGroup:
    group = placement_group(engine_bundles(config), strategy="PACK", name="conductor-engines")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        ray.util.remove_placement_group(group)
        raise RuntimeError(f"cluster cannot place {config.replicas} engine replicas with "
                           f"{engine_bundles(config)[0]} each within {timeout_s:g}s")
    return group
