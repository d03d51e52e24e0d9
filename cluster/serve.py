"""Serve a trained Conductor behind an OpenAI-compatible endpoint (conductor/serving/).

    python -m cluster.serve --config configs/serve-paper7.yaml --set serve.policy=runs/train-paper7/policy

``serve.runtime: standalone`` (the default) runs it in this process: uvicorn, the Conductor on an in-process
vLLM engine, the pool's clients in-process. ``serve.runtime: ray_serve`` deploys it on the Ray cluster at
``RAY_ADDRESS`` (or a local one): a ``ConductorEngine`` deployment (vLLM, ``serve.deployment.engine_replicas``)
and an autoscaled ``ConductorIngress`` deployment (the HTTP app), whose replicas share the pool's
WorkerPool actors (actors/worker_pool.py), so a provider's rate limits hold across all of them, and each
caller key's rate limit is one ``KeyLimitActor``'s (actors/key_limit_actor.py).
With no ``pool.workers`` configured, the simulated pool (``simulator.*``) is served from this process
on loopback; keep the process running. A policy trained with the cost dial (its cost_dial.json,
conductor/cost_dial.py) takes ``conductor.cost_quality`` per request; one without refuses it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

from conductor.config import Config
from conductor.config_loader import config_from_cli
from conductor.cost_dial import policy_card
from conductor.rollout import Sample, SamplingSettings

log = logging.getLogger("conductor.serve")


def policy_dir(config: Config) -> str:
    from conductor.run_output import local_copy

    if not config.serve.policy:
        raise ValueError("serve.policy is not set: point it at a trained Conductor (a run's policy/ dir)")
    path = local_copy(config.serve.policy, config.output.storage_options)
    if not Path(path, "config.json").is_file():
        raise ValueError(f"serve.policy {config.serve.policy!r} is not a model directory (no config.json)")
    return path


def freeze_startup_heap() -> None:
    """Collect once, then move every object alive to the collector's permanent generation, as vLLM's own API
    server does after startup: with torch, transformers and vLLM loaded, a full collection walks ~730k
    long-lived objects (~270 ms measured on this 2-core machine; 0 ms once frozen), a pause every in-flight
    request pays. Called when a server process has built everything it keeps."""
    import gc

    gc.collect()
    gc.freeze()


def with_pool(config: Config, stack: contextlib.ExitStack) -> Config:
    """The config with a pool: the configured one, or the simulated one started here on loopback."""
    from conductor.simulator.embedded_pool import with_simulated_pool

    config, sim = with_simulated_pool(config, stack)
    if sim:
        log.info("simulated pool (%s) on %s", sim.state.preset.name, sim.base_url)
    return config


class LocalServer:
    """The standalone stack as a context manager: ``.app`` is the ASGI app, ``.config`` the config it runs."""

    def __init__(self, config: Config):
        self.config = config
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> LocalServer:
        from transformers import AutoTokenizer

        from conductor.local_pool import LocalPool
        from conductor.serving.app import create_app
        from conductor.serving.orchestrator import Orchestrator
        from conductor.vllm_sampler import AsyncVllmGenerator, BatchedGenerator, VllmSampler

        try:
            self.config = with_pool(self.config, self.stack)
            path = policy_dir(self.config)
            if self.config.serve.engine_frontend == "async":
                generator = AsyncVllmGenerator(path, self.config.engine, self.config.seed)
                self.stack.callback(generator.shutdown)
            else:
                generator = BatchedGenerator(VllmSampler(path, self.config.engine, self.config.seed,
                                                         for_training=False))
            self.pool = LocalPool(self.config.pool, seed=self.config.seed)
            orchestrator = Orchestrator(self.config, generator, AutoTokenizer.from_pretrained(path), self.pool,
                                        policy_card(path, self.config.reward))
            self.app = create_app(orchestrator, self.config.serve)
            freeze_startup_heap()
        except BaseException:
            self.stack.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stack.close()


def exit_on_sigterm() -> None:
    """SIGTERM as ``sys.exit(0)``: ``finally`` blocks and context managers unwind, atexit hooks run."""
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def run_standalone(config: Config) -> None:
    import uvicorn

    from conductor.serving.http_protocol import header_timeout_protocol

    # uvicorn re-raises the SIGTERM it shut down on; as SystemExit it unwinds LocalServer, which stops the
    # engine's own process (AsyncLLM's EngineCore would otherwise outlive the server)
    exit_on_sigterm()

    with LocalServer(config) as local:
        names = ", ".join(n for m in local.config.serve.models for n in m.names)
        log.info("serving %s on http://%s:%d/v1", names, config.serve.host, config.serve.port)
        limits = config.serve.limits
        # access_log off: its line carries the raw path and query (a key a caller put there); the app logs
        # each request itself (conductor/serving/request_guard.py)
        uvicorn.run(local.app, host=config.serve.host, port=config.serve.port, log_level="info",
                    timeout_keep_alive=limits.keep_alive_s, backlog=2048, access_log=False,
                    http=header_timeout_protocol(limits.header_timeout_s, limits.max_pending_connections),
                    limit_concurrency=limits.max_connections)


# -- Ray Serve --------------------------------------------------------------------------------------------


class ConductorEngine:
    """A Serve replica of the Conductor's vLLM engine; concurrent requests share batched forward passes."""

    def __init__(self, policy_path: str, config_json: str):
        from conductor.vllm_sampler import BatchedGenerator, VllmSampler

        config = Config.model_validate_json(config_json)
        self.generator = BatchedGenerator(VllmSampler(policy_path, config.engine, config.seed, for_training=False))
        freeze_startup_heap()

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        return await self.generator.generate(prompts, n, sampling)


class EngineHandleGenerator:
    """The orchestrator's ``Generator`` over a handle to the engine deployment."""

    def __init__(self, handle: Any):
        self.handle = handle

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        return await self.handle.generate.remote(prompts, n, sampling)


class ConductorIngress:
    """A Serve replica of the HTTP app; the app is built on the replica (``__serve_build_asgi_app__``)."""

    def __init__(self, config_json: str, policy_path: str, engine: Any):
        from transformers import AutoTokenizer

        from actors.key_limit_actor import SharedKeyLimiter
        from actors.worker_pool import RayPool
        from conductor.serving.app import create_app
        from conductor.serving.orchestrator import Orchestrator

        config = Config.model_validate_json(config_json)
        pool = RayPool(config.pool, seed=config.seed, run_name=f"serve-{config.run_name}", detached=True)
        orchestrator = Orchestrator(config, EngineHandleGenerator(engine), AutoTokenizer.from_pretrained(policy_path),
                                    pool, policy_card(policy_path, config.reward))
        limiter = SharedKeyLimiter(config.serve.limits, scope=config.run_name)  # one set, whatever the replicas
        self.conductor_app = create_app(orchestrator, config.serve, limiter)  # `app` is the Serve wrapper's own
        freeze_startup_heap()

    def __serve_build_asgi_app__(self) -> Any:
        return self.conductor_app


def ray_serve_app(config: Config, policy_path: str) -> Any:
    """The Serve application: the ingress bound to the engine, with the config's replica and autoscaling knobs."""
    from ray import serve

    knobs = config.serve.deployment
    engine = serve.deployment(ConductorEngine, name="ConductorEngine", num_replicas=knobs.engine_replicas,
                              max_ongoing_requests=knobs.max_ongoing_requests,
                              ray_actor_options={"num_cpus": config.engine.num_cpus,
                                                 "num_gpus": config.engine.num_gpus})
    ingress = serve.deployment(serve.ingress()(ConductorIngress), name="ConductorIngress",
                               max_ongoing_requests=knobs.max_ongoing_requests,
                               autoscaling_config={"min_replicas": knobs.min_replicas,
                                                   "max_replicas": knobs.max_replicas,
                                                   "target_ongoing_requests": knobs.target_ongoing_requests},
                               ray_actor_options={"num_cpus": knobs.ingress_num_cpus})
    config_json = replica_config(config).model_dump_json()
    return ingress.bind(config_json, policy_path, engine.bind(policy_path, config_json))


def replica_config(config: Config) -> Config:
    """The config the replicas get: the caller keys of ``serve.auth.keys_env`` already hashed here, so no
    plaintext key travels through Ray (deployment args are visible in the dashboard) and the replicas need
    no copy of that env var."""
    from conductor.serving.api_keys import KeyRing

    auth = config.serve.auth
    hashes = ["sha256:" + digest.hex() for digest in KeyRing(auth).digests]
    serve_section = config.serve.model_copy(update={"auth": auth.model_copy(update={"key_hashes": hashes,
                                                                                     "keys_env": None})})
    return config.model_copy(update={"serve": serve_section})


def app_builder(args: dict[str, Any]) -> Any:
    """The Serve application for ``serve run`` / a RayService's ``serveConfigV2``
    (``import_path: cluster.serve:app_builder``): ``args`` are ``config`` (a YAML preset) and ``set``
    (dotted overrides). A deployed application's pool is real providers: a simulated pool lives only as
    long as the process that starts it."""
    from conductor.config_loader import load_config

    config = load_config(args.get("config"), list(args.get("set") or []))
    if not config.pool.workers:
        raise ValueError("a deployed application needs pool.workers (real providers); the simulated pool is for "
                         "`python -m cluster.serve`, which keeps it running")
    return ray_serve_app(config, policy_dir(config))


def run_ray_serve(config: Config, block: bool = True) -> Optional[contextlib.ExitStack]:
    import ray
    from ray import serve

    stack = contextlib.ExitStack()
    config = with_pool(config, stack)
    path = policy_dir(config)
    ray.init(address=os.environ.get("RAY_ADDRESS") or "local", ignore_reinit_error=True, namespace="conductor-serve")
    serve.start(http_options={"host": config.serve.host, "port": config.serve.port})
    serve.run(ray_serve_app(config, path), name="conductor", route_prefix=config.serve.deployment.route_prefix)
    log.info("serving on http://%s:%d/v1 (Ray Serve)", config.serve.host, config.serve.port)
    if not block:
        return stack
    exit_on_sigterm()  # a clean exit: Ray's atexit stops a local cluster
    try:
        while True:
            time.sleep(3600)
    finally:
        serve.shutdown()
        stack.close()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    config = config_from_cli(argv, default_config="configs/serve-toy.yaml", description=__doc__)
    try:
        if config.serve.runtime == "ray_serve":
            run_ray_serve(config)
        else:
            run_standalone(config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
