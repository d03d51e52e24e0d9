"""k8s/rayservice.yaml, checked offline like the other manifests (test_k8s_manifests.py validates every
document against the KubeRay CRDs and as core pod templates): broken copies fail naming the field, and
the manifest agrees with the config it deploys, configs/serve-gpu.yaml (its Serve application, the GPU
pods its engine replicas need, the keys its pods get)."""

import pytest
import yaml

from conductor.config_loader import load_config
from tests.support.k8s_docs import REPO, all_errors, cluster_spec, load, rename_field, set_field

MANIFEST = "rayservice.yaml"


def service():
    return load(MANIFEST)[0]


def group(doc, name):
    return next(g for g in cluster_spec(doc)["workerGroupSpecs"] if g["groupName"] == name)


BROKEN = {
    "rayservice-num-gpus-not-a-string": (set_field(lambda d: group(d, "gpu")["rayStartParams"], "num-gpus", 1),
                                         "spec.rayClusterConfig.workerGroupSpecs[1].rayStartParams.num-gpus"),
    "rayservice-misspelled-serve-config": (rename_field(lambda d: d["spec"], "serveConfigV2", "serveConfigv2"),
                                           "spec.serveConfigv2"),
    "rayservice-threshold-not-a-number": (set_field(lambda d: d["spec"], "serviceUnhealthySecondThreshold", "15m"),
                                          "spec.serviceUnhealthySecondThreshold"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_copy_fails_naming_the_field(case):
    breaks, expected = BROKEN[case]
    doc = service()
    assert all_errors(doc) == []
    breaks(doc)
    found = all_errors(doc)
    assert any(expected in message for message in found), f"{case}: no error names {expected!r}: {found}"


def test_the_serve_application_is_the_endpoint_with_its_config():
    serve_config = yaml.safe_load(service()["spec"]["serveConfigV2"])
    [app] = serve_config["applications"]
    assert app["import_path"] == "cluster.serve:app_builder" and app["route_prefix"] == "/"
    config = load_config(REPO / app["args"]["config"], app["args"]["set"])
    assert config.serve.runtime == "ray_serve" and config.pool.workers  # real providers, not the simulator
    assert config.serve.policy.startswith("s3://")  # the pods share no volume
    assert serve_config["http_options"]["port"] == config.serve.port
    assert serve_config["http_options"]["request_timeout_s"] >= config.serve.limits.request_timeout_s
    names = {n for m in config.serve.models for n in m.names}
    assert {"conductor-mini", "conductor-ultra"} <= names


def test_the_pods_hold_what_the_deployments_ask_for_and_get_the_keys():
    doc = service()
    config = load_config(REPO / yaml.safe_load(doc["spec"]["serveConfigV2"])["applications"][0]["args"]["config"])
    knobs = config.serve.deployment
    gpu = group(doc, "gpu")
    per_pod = float(gpu["rayStartParams"]["num-gpus"])
    assert gpu["minReplicas"] * per_pod >= knobs.engine_replicas * config.engine.num_gpus
    assert float(gpu["rayStartParams"]["num-cpus"]) >= config.engine.num_cpus
    limits = gpu["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert float(limits["nvidia.com/gpu"]) == per_pod
    cpu = group(doc, "cpu")
    assert cpu["maxReplicas"] * float(cpu["rayStartParams"]["num-cpus"]) >= knobs.max_replicas * knobs.ingress_num_cpus
    assert cluster_spec(doc)["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    wanted = {p.api_key_env for p in config.pool.providers if p.api_key_env} | {config.serve.auth.keys_env}
    for template in [cluster_spec(doc)["headGroupSpec"]["template"]] + [g["template"] for g in
                                                                          cluster_spec(doc)["workerGroupSpecs"]]:
        env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
        assert wanted <= set(env)
        assert all("valueFrom" in env[name] for name in wanted)  # from Secrets, never inline


def test_the_secrets_example_holds_the_endpoint_keys():
    secrets = {doc["metadata"]["name"]: doc for doc in load("secrets.example.yaml")}
    assert "CONDUCTOR_API_KEYS" in secrets["conductor-endpoint-keys"]["stringData"]
