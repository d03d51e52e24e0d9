"""The endpoint's section of the config (``serve.*``): the model names it serves, auth, limits, deployment.

Each served model is a *variant* of one trained Conductor: the workers it may call, its step and round
limits. ``mini`` and ``ultra`` are the two the presets ship (configs/serve-*.yaml); any number may be
configured. Keys are never in the config: ``auth.key_hashes`` holds SHA-256 digests, and plaintext keys
come from the environment variable ``auth.keys_env`` and are hashed as they are read.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from conductor.config_section import Section
from conductor.workflow_constraint import MAX_CONSTRAINED_STEPS

MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"


class ServedModel(Section):
    """One model name of the endpoint: a Conductor variant over (a subset of) the pool."""

    name: str = Field(pattern=MODEL_NAME)
    aliases: list[str] = Field(default_factory=list, description="other names for it, e.g. dated snapshots "
                               "(conductor-mini-2026-11-24)")
    description: str = ""
    workers: Optional[list[str]] = Field(default=None, description="worker ids it may call (default: the whole "
                                         "pool); a request may narrow them further, never widen them")
    max_steps: int = Field(default=5, ge=1, le=32)
    max_rounds: int = Field(default=0, ge=0, le=8, description="recursive rounds after the root workflow")
    temperature: float = Field(default=0.0, ge=0, le=2, description="the Conductor's sampling; 0 = greedy")
    constrain_format: bool = Field(
        default=False, description="decode the Conductor under the workflow expression over the request's "
        "workers and step cap (conductor/workflow_constraint.py): every workflow that ends parses")
    cost_quality: Optional[int] = Field(default=None, ge=0, le=10, description="the cost dial's setting a "
                                        "request gets unless it sets conductor.cost_quality: 0 cheapest .. 10 best "
                                        "(conductor/cost_dial.py); null: the policy's default (5). Only for a "
                                        "policy trained with the dial")

    @model_validator(mode="after")
    def _constrainable(self) -> ServedModel:
        if self.constrain_format and self.max_steps > MAX_CONSTRAINED_STEPS:
            raise ValueError(f"constrain_format spells out every access list: max_steps {self.max_steps} > "
                             f"{MAX_CONSTRAINED_STEPS}")
        return self

    @property
    def names(self) -> list[str]:
        return [self.name, *self.aliases]


class ServeAuth(Section):
    required: bool = Field(default=True, description="false only for a local trial: anyone may call")
    key_hashes: list[str] = Field(default_factory=list, description="sha256:<hex> of each accepted key "
                                  "(python -m conductor.serving.api_keys reads a key on stdin, prints it)")
    keys_env: Optional[str] = Field(default="CONDUCTOR_API_KEYS", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                    description="env var with comma-separated plaintext keys, hashed on read")

    @model_validator(mode="after")
    def _hashes(self) -> ServeAuth:
        bad = [h for h in self.key_hashes if not (h.startswith("sha256:") and len(h) == 71)]
        if bad:
            raise ValueError(f"{len(bad)} key hash(es) are not sha256:<64 hex digits>")
        return self


class ServeLimits(Section):
    requests_per_minute: Optional[float] = Field(default=600, gt=0, description="per key, across the endpoint (on "
                                                 "Ray Serve every ingress replica asks one actor: "
                                                 "actors/key_limit_actor.py); None = no limit")
    burst: int = Field(default=20, ge=1, description="requests a key may make at once after being idle")
    max_cost_usd: Optional[float] = Field(default=None, gt=0, description="per request, whatever it asks")
    request_timeout_s: float = Field(default=900.0, gt=0, description="whole request; workers can be slow")
    max_body_bytes: int = Field(default=4 * 2**20, ge=1024, description="a larger declared body is a 413 before "
                                "anything is read; a larger streamed one when the count passes it")
    header_timeout_s: float = Field(default=10.0, gt=0, description="standalone: a connection whose request "
                                    "headers have not all arrived this long after its first byte (or after it "
                                    "opened) is closed (conductor/serving/http_protocol.py)")
    body_timeout_s: float = Field(default=30.0, gt=0, description="the whole body must arrive this long after the "
                                  "headers, or the request is a 408 and the connection closed")
    max_connections: int = Field(default=1024, ge=1, description="standalone: open connections (uvicorn's "
                                 "limit_concurrency); a request beyond it is a 503")
    keep_alive_s: float = Field(default=15.0, gt=0, description="standalone: an idle connection between requests "
                                "is closed after this long (it holds one of max_connections)")
    max_pending_connections: int = Field(default=256, ge=1, description="standalone: connections still sending "
                                         "their headers (none authenticated yet); past it the oldest is closed")


class ServeDeployment(Section):
    """Ray Serve knobs (cluster/serve.py); the standalone server ignores them."""

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=4, ge=1)
    target_ongoing_requests: float = Field(default=64, gt=0, description="per ingress replica, for autoscaling")
    max_ongoing_requests: int = Field(default=256, ge=1)
    engine_replicas: int = Field(default=1, ge=1, description="Conductor engine (vLLM) replicas")
    ingress_num_cpus: float = Field(default=0.5, ge=0)
    route_prefix: str = "/"


class ServeConfig(Section):
    policy: Optional[str] = Field(default=None, description="the trained Conductor: an HF dir (a run's policy/)")
    runtime: Literal["standalone", "ray_serve"] = Field(default="standalone", description="one process "
                                                       "(uvicorn), or Ray Serve deployments on a cluster")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    models: list[ServedModel] = Field(default_factory=list)
    strongest_first: list[str] = Field(default_factory=list, description="worker ids, strongest first: who "
                                       "answers when the Conductor's output cannot be parsed (default: by "
                                       "output price, highest first)")
    conductor_max_new_tokens: int = Field(default=256, ge=16)
    engine_frontend: Literal["batched", "async"] = Field(default="async", description="standalone: vLLM's AsyncLLM "
                                                         "with the engine core in a process of its own (async), or "
                                                         "its LLM on a thread of the server (batched: the model's "
                                                         "Python then shares the server's GIL; p99 overhead 22 ms "
                                                         "against 13 in bench/serve_load.py)")
    auth: ServeAuth = Field(default_factory=ServeAuth)
    limits: ServeLimits = Field(default_factory=ServeLimits)
    deployment: ServeDeployment = Field(default_factory=ServeDeployment)

    @model_validator(mode="after")
    def _unique_names(self) -> ServeConfig:
        names = [n for m in self.models for n in m.names]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"model names served twice: {duplicates}")
        return self
