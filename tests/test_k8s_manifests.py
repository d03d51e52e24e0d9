"""The KubeRay deployment in k8s/, checked offline (no cluster, no Ray, no network): every manifest
validates (Ray kinds against the KubeRay CRDs in ../shared/k8s-crds, core kinds and pod templates with
kubernetes-validate) and a broken copy of each fails naming the broken field; tests/test_k8s_config_agreement.py
checks that they agree with the training config they run.
Two RayJobs: rayjob-train.yaml (GPUs, real worker APIs) and rayjob-toy.yaml (CPU only, the simulated
pool; tests/test_cluster_job.py runs its entrypoint against a loopback Ray head)."""

from __future__ import annotations

import pytest

from tests.support.crd_schema import errors
from tests.support.k8s_docs import (
    CORE_DOCUMENTS,
    DOCUMENTS,
    K8S,
    MANIFESTS,
    RAY_DOCUMENTS,
    REPO,
    S3_ENDPOINT,
    TOY_JOB,
    TRAIN_JOB,
    all_errors,
    cluster_spec,
    core_errors,
    crd_errors,
    doc_id,
    load,
    template_errors,
    worker_group,
)
from tests.support.k8s_docs import rename_field as _rename
from tests.support.k8s_docs import set_field as _set

# -- every document validates --------------------------------------------------------------------------

def test_the_deployment_has_the_expected_documents():
    kinds = {(name, doc["kind"]) for name, _, doc in DOCUMENTS}
    assert {(TRAIN_JOB, "RayJob"), (TOY_JOB, "RayJob"), ("raycluster.yaml", "RayCluster"),
            ("secrets.example.yaml", "Secret"), (S3_ENDPOINT, "ConfigMap")} <= kinds
    assert (K8S / "Dockerfile").is_file() and (REPO / ".dockerignore").is_file()


@pytest.mark.parametrize("entry", RAY_DOCUMENTS, ids=doc_id)
def test_ray_documents_validate_against_the_kuberay_crd(entry):
    assert crd_errors(entry[2]) == []


@pytest.mark.parametrize("entry", RAY_DOCUMENTS, ids=doc_id)
def test_ray_pod_templates_validate_as_core_pod_templates(entry):
    assert template_errors(entry[2]) == []


@pytest.mark.parametrize("entry", CORE_DOCUMENTS, ids=doc_id)
def test_core_documents_validate_with_kubernetes_validate(entry):
    assert core_errors(entry[2]) == []


# -- a broken copy of each manifest fails, naming the field --------------------------------------------

def _container(doc: dict, group: int = 0) -> dict:
    return cluster_spec(doc)["workerGroupSpecs"][group]["template"]["spec"]["containers"][0]


def _duplicate_first_container(doc: dict) -> None:
    containers = cluster_spec(doc)["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    containers.append(dict(containers[0]))


BROKEN = {
    # wrong type: rayStartParams values are strings ("4"), not numbers
    "rayjob-num-gpus-not-a-string": (TRAIN_JOB, 0,
                                     _set(lambda d: worker_group(d, "gpu")["rayStartParams"], "num-gpus", 4),
                                     "spec.rayClusterSpec.workerGroupSpecs[1].rayStartParams.num-gpus"),
    # a misspelled optional field: plain JSON Schema would accept it, the API server drops it
    "rayjob-misspelled-shutdown": (TRAIN_JOB, 0, _rename(lambda d: d["spec"], "shutdownAfterJobFinishes",
                                                         "shutdownAfterJobFinish"), "spec.shutdownAfterJobFinish"),
    # int32 overflow on a format: int32 field
    "rayjob-deadline-overflows-int32": (TRAIN_JOB, 0, _set(lambda d: d["spec"], "activeDeadlineSeconds", 2**31),
                                        "spec.activeDeadlineSeconds"),
    # a GPU limit that is neither an integer nor a string (x-kubernetes-int-or-string)
    "rayjob-gpu-limit-is-a-list": (TRAIN_JOB, 0, _set(lambda d: _container(d, 1)["resources"]["limits"],
                                                      "nvidia.com/gpu", [4]),
                                   "spec.rayClusterSpec.workerGroupSpecs[1].template.spec.containers[0]"
                                   ".resources.limits.nvidia.com/gpu"),
    # a misspelled required field
    "raycluster-misspelled-group-name": ("raycluster.yaml", 0,
                                         _rename(lambda d: d["spec"]["workerGroupSpecs"][0], "groupName", "groupname"),
                                         "spec.workerGroupSpecs[0]: 'groupName' is a required property"),
    # two containers named alike in one pod (x-kubernetes-list-type: map, keyed by name)
    "raycluster-duplicate-container": ("raycluster.yaml", 0, _duplicate_first_container,
                                       "spec.workerGroupSpecs[0].template.spec.containers[1]"),
    # a pod-template field only the core schema knows: a mount path must be a string
    "raycluster-mount-path-not-a-string": ("raycluster.yaml", 0,
                                           _set(lambda d: _container(d, 1)["volumeMounts"][0], "mountPath", 5),
                                           "spec.workerGroupSpecs[1].template.spec.containers[0].volumeMounts[0]"
                                           ".mountPath"),
    "secret-value-not-a-string": ("secrets.example.yaml", 0, _set(lambda d: d["stringData"], "OPENAI_API_KEY", 12),
                                  "stringData.OPENAI_API_KEY"),
    "secret-misspelled-string-data": ("secrets.example.yaml", 1, _rename(lambda d: d, "stringData", "stringdata"),
                                      "'stringdata' was unexpected"),
    "configmap-value-not-a-string": (S3_ENDPOINT, 0, _set(lambda d: d["data"], "AWS_DEFAULT_REGION", 1),
                                     "data.AWS_DEFAULT_REGION"),
    # a list given as one item: a core list field inside a pod template (it was a PVC's accessModes)
    "rayjob-tolerations-not-a-list": (TRAIN_JOB, 0,
                                      _set(lambda d: worker_group(d, "gpu")["template"]["spec"], "tolerations",
                                           {"key": "nvidia.com/gpu", "operator": "Exists"}),
                                      "spec.rayClusterSpec.workerGroupSpecs[1].template.spec.tolerations"),
    # the toy job: a Ray CPU count given as a number (the CRD's rayStartParams are strings)
    "rayjob-toy-num-cpus-not-a-string": (TOY_JOB, 0,
                                         _set(lambda d: worker_group(d, "cpu")["rayStartParams"], "num-cpus", 3),
                                         "spec.rayClusterSpec.workerGroupSpecs[0].rayStartParams.num-cpus"),
    # the toy job, core schema: the ConfigMap reference misspelled in a worker's envFrom
    "rayjob-toy-misspelled-config-map-ref": (TOY_JOB, 0, _rename(lambda d: _container(d)["envFrom"][0], "configMapRef",
                                                                 "configmapRef"),
                                             "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0]"
                                             ".envFrom[0]"),
}


BROKEN_ELSEWHERE = {"rayservice.yaml"}  # tests/test_k8s_rayservice.py


def test_every_manifest_has_a_broken_copy():
    assert {name for name, *_ in BROKEN.values()} | BROKEN_ELSEWHERE == set(MANIFESTS)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_copy_fails_naming_the_field(case):
    name, index, breaks, expected = BROKEN[case]
    doc = load(name)[index]
    assert all_errors(doc) == [], "the intact document must be valid for this test to mean anything"
    breaks(doc)
    found = all_errors(doc)
    assert found, f"{case}: the broken copy validated"
    assert any(expected in message for message in found), f"{case}: no error names {expected!r}: {found}"


# -- the validator's Kubernetes extensions -------------------------------------------------------------

def test_int_or_string_nullable_and_list_map_keys_follow_kubernetes():
    schema = {"type": "object", "properties": {
        "q": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
        "bare": {"x-kubernetes-int-or-string": True},
        "n": {"type": "string", "nullable": True},
        "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}
    good = ({"q": 4, "bare": "500m"}, {"q": "4Gi", "bare": 1}, {"n": None}, {"items": [{"name": "a"}, {"name": "b"}]})
    for ok in good:
        assert errors(schema, ok) == [], ok
    for bad, where in (({"q": 1.5}, "q"), ({"bare": True}, "bare"), ({"bare": [1]}, "bare"),
                       ({"items": [{"name": "a"}, {"name": "a"}]}, "items[1]"), ({"x": 1}, "x")):
        found = errors(schema, bad)
        assert found and found[0].startswith(f"{where}: "), (bad, found)
