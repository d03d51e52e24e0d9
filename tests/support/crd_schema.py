"""Validate a custom resource against its CRD's openAPIV3Schema offline, as the API server would.

A CRD schema is OpenAPI v3 with Kubernetes extensions, not plain JSON Schema, so Draft 7 alone is too
lenient in four places, each handled here:
- unknown fields: CRD schemas are structural and never say ``additionalProperties: false``; the API server
  drops unknown fields, and ``kubectl apply`` (``--validate=strict``, its default) refuses them. A typo in
  an optional field (``shutdownAfterJobFinish``) would pass plain JSON Schema silently; here it is an error.
- ``x-kubernetes-int-or-string: true``: an integer or a string, nothing else (resource quantities, ports).
- ``x-kubernetes-list-type: map|set``: list items must be unique by ``x-kubernetes-list-map-keys``
  (containers by name, env by name) or as a whole.
- ``format: int32/int64``: range checked (JSON Schema treats these formats as unknown and ignores them).
``nullable: true`` admits null. ``x-kubernetes-validations`` (CEL rules) cannot be evaluated here, so a
manifest that sets a field carrying them fails with the rules quoted: check those by hand or drop them.
Stricter than the API server in one place: it applies defaults before checking ``required``; this does not
(``workerGroupSpecs[].minReplicas``/``maxReplicas`` are required with defaults, so the manifests set them).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator, FormatChecker, ValidationError, validators

CRD_FILES = {"RayJob": "ray.io_rayjobs.yaml", "RayCluster": "ray.io_rayclusters.yaml",
             "RayService": "ray.io_rayservices.yaml"}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are 1-1.4 MB: the C loader is ~10x faster
_DRAFT7 = Draft7Validator.VALIDATORS


def _type(validator: Any, types: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if instance is None and schema.get("nullable"):
        return
    yield from _DRAFT7["type"](validator, types, instance, schema)


def _properties(validator: Any, properties: dict, instance: Any, schema: dict) -> Iterator[ValidationError]:
    yield from _DRAFT7["properties"](validator, properties, instance, schema)
    if (not validator.is_type(instance, "object") or "additionalProperties" in schema
            or schema.get("x-kubernetes-preserve-unknown-fields")):
        return
    for key in instance:
        if key not in properties:
            yield ValidationError(f"unknown field {key!r} (known: {', '.join(sorted(properties))})", path=[key])


def _int_or_string(validator: Any, value: bool, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if value and (isinstance(instance, bool) or not isinstance(instance, (int, str))):
        yield ValidationError(f"{instance!r} is not an integer or a string (x-kubernetes-int-or-string)")


def _list_type(validator: Any, list_type: str, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "array") or list_type not in ("map", "set"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", []) if list_type == "map" else []
    seen: dict[str, int] = {}
    for index, item in enumerate(instance):
        by_key = keys and isinstance(item, dict)
        identity = repr({k: item.get(k) for k in keys} if by_key else item)
        if identity in seen:
            yield ValidationError(f"duplicate {'key ' + identity if by_key else 'item'}: entries {seen[identity]} "
                                  f"and {index} (x-kubernetes-list-type: {list_type})", path=[index])
        seen.setdefault(identity, index)


def _cel(validator: Any, rules: list, instance: Any, schema: dict) -> Iterator[ValidationError]:
    quoted = "; ".join(rule.get("rule", "?") for rule in rules)
    yield ValidationError(f"sets a field guarded by CEL rules this offline check cannot evaluate: {quoted}")


FORMATS = FormatChecker()


@FORMATS.checks("int32")
def _int32(value: Any) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@FORMATS.checks("int64")
def _int64(value: Any) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


CrdValidator = validators.extend(Draft7Validator, {
    "type": _type, "properties": _properties, "x-kubernetes-int-or-string": _int_or_string,
    "x-kubernetes-list-type": _list_type, "x-kubernetes-validations": _cel})


@cache
def crd_schema(crd_dir: Path, kind: str, api_version: str) -> dict:
    """The openAPIV3Schema of ``kind`` at ``api_version`` (``ray.io/v1``) from its CRD file."""
    group, _, version = api_version.partition("/")
    crd = yaml.load((crd_dir / CRD_FILES[kind]).read_text(), Loader=_LOADER)
    names = crd["spec"]["names"]
    if crd["spec"]["group"] != group or names["kind"] != kind:
        raise ValueError(f"{CRD_FILES[kind]} defines {crd['spec']['group']}/{names['kind']}, not {group}/{kind}")
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            if not entry.get("served", False):
                raise ValueError(f"{kind} {api_version} is not served")
            return entry["schema"]["openAPIV3Schema"]
    raise ValueError(f"{CRD_FILES[kind]} has no version {version!r}")


def field_path(parts: Any) -> str:
    """``spec.workerGroupSpecs[1].rayStartParams.num-gpus``: the path as a manifest author writes it."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<document>"


def errors(schema: dict, document: dict) -> list[str]:
    """Every problem as ``field.path: message``, sorted by path; empty when the document is valid."""
    found = CrdValidator(schema, format_checker=FORMATS).iter_errors(document)
    return sorted(f"{field_path(error.absolute_path)}: {error.message}" for error in found)
