"""The k8s/ manifests as documents, and their validation offline: Ray kinds against the KubeRay CRDs in
../shared/k8s-crds, core kinds and pod templates with kubernetes-validate. Shared by the manifest tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.crd_schema import CRD_FILES, crd_schema, errors, field_path

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
CRDS = REPO.parent / "shared" / "k8s-crds"
K8S_VERSION = "1.37"  # the newest schema kubernetes-validate 1.37.0 ships
TRAIN_JOB = "rayjob-train.yaml"
TOY_JOB = "rayjob-toy.yaml"
JOBS = [TRAIN_JOB, TOY_JOB]
S3_ENDPOINT = "s3-endpoint.yaml"


def load(name: str) -> list[dict]:
    """A manifest's documents; a JSON round trip unshares YAML aliases, so a broken copy breaks one place."""
    return [json.loads(json.dumps(doc)) for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


MANIFESTS = sorted(path.name for path in K8S.glob("*.yaml"))
DOCUMENTS = [(name, i, doc) for name in MANIFESTS for i, doc in enumerate(load(name))]
RAY_DOCUMENTS = [(name, i, doc) for name, i, doc in DOCUMENTS if doc["kind"] in CRD_FILES]
CORE_DOCUMENTS = [(name, i, doc) for name, i, doc in DOCUMENTS if doc["kind"] not in CRD_FILES]


def doc_id(entry: tuple) -> str:
    return f"{entry[0]}:{entry[2]['kind']}/{entry[2]['metadata']['name']}"


def crd_errors(doc: dict) -> list[str]:
    if not CRDS.is_dir():
        pytest.skip(f"no KubeRay CRDs at {CRDS} (../shared/k8s-crds beside the repository)")
    return errors(crd_schema(CRDS, doc["kind"], doc["apiVersion"]), doc)


def core_errors(doc: dict, prefix: str = "") -> list[str]:
    """kubernetes-validate (strict: unknown fields are errors) on one core object; its first error."""
    validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (test extra)")
    try:
        validate.validate(doc, K8S_VERSION, strict=True)
    except validate.ValidationError as error:
        return [f"{prefix}{field_path(error.path)}: {error.message}"]
    return []


def cluster_spec(doc: dict) -> dict:
    return {"RayJob": lambda: doc["spec"]["rayClusterSpec"], "RayCluster": lambda: doc["spec"],
            "RayService": lambda: doc["spec"]["rayClusterConfig"]}[doc["kind"]]()


def worker_group(doc: dict, name: str) -> dict:
    """The worker group ``name`` of a RayJob's or RayCluster's cluster spec."""
    return next(g for g in cluster_spec(doc)["workerGroupSpecs"] if g["groupName"] == name)


def pod_templates(doc: dict) -> list[tuple[str, dict]]:
    """(manifest path of the template, template) for the head and every worker group."""
    base = {"RayJob": "spec.rayClusterSpec", "RayCluster": "spec", "RayService": "spec.rayClusterConfig"}[doc["kind"]]
    spec = cluster_spec(doc)
    found = [(f"{base}.headGroupSpec.template", spec["headGroupSpec"]["template"])]
    found += [(f"{base}.workerGroupSpecs[{i}].template", group["template"])
              for i, group in enumerate(spec.get("workerGroupSpecs", []))]
    return found


def template_errors(doc: dict) -> list[str]:
    """Each pod template as a core PodTemplate; errors carry the template's path in the manifest."""
    found = []
    for where, template in pod_templates(doc):
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        found += [message.replace("template", where, 1) for message in core_errors(wrapped)]
    return found


def all_errors(doc: dict) -> list[str]:
    if doc["kind"] in CRD_FILES:
        return crd_errors(doc) + template_errors(doc)
    return core_errors(doc)


def set_field(path: Callable[[dict], dict], key: str, value: Any) -> Callable[[dict], None]:
    """A breaker: set ``key`` of the dict ``path`` picks."""
    return lambda doc: path(doc).__setitem__(key, value)


def rename_field(path: Callable[[dict], dict], old: str, new: str) -> Callable[[dict], None]:
    """A breaker: rename ``old`` to ``new`` in the dict ``path`` picks."""
    return lambda doc: path(doc).__setitem__(new, path(doc).pop(old))
