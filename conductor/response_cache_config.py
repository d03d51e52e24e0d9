"""The ``pool.cache`` section: the worker-response cache (conductor/response_cache.py), in the pool's section
because every pool that calls a provider (the cluster's pool actors, the driver's in-process pools) wraps its
calls in it. A path is needed once the cache is on, and it is a local directory or an ``s3://`` URL."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from conductor.config_section import Section

CacheMode = Literal["off", "read-write", "replay-only"]
SCHEMES = ("s3://",)


class ResponseCacheConfig(Section):
    mode: CacheMode = Field(default="off", description="off: every call goes to the provider; read-write: a "
                            "cached answer is served, a new one is stored; replay-only: only cached answers, a "
                            "miss stops the run (nothing is spent)")
    path: Optional[str] = Field(default=None, description="local dir or s3://bucket/prefix, shared by runs that "
                                "replay each other (not under the run's own directory: a new run archives that)")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options (no keys: use env)")
    share_identical: bool = Field(default=False, description="identical requests within a run share one answer; "
                                  "off: the n-th identical request gets the n-th answer (a group's samples stay "
                                  "independent draws, and a re-run replays them in order)")
    flush_every: int = Field(default=256, ge=1, description="new answers a pool holds before writing them as a "
                             "shard (and at the end of the run)")

    @model_validator(mode="after")
    def _path_when_on(self) -> ResponseCacheConfig:
        if self.mode == "off":
            return self
        if not self.path:
            raise ValueError(f"pool.cache.path is required with pool.cache.mode {self.mode}: a local directory or "
                             "s3://bucket/prefix")
        if "://" in self.path and not self.path.startswith(SCHEMES):
            raise ValueError(f"pool.cache.path {self.path!r}: a local directory or s3://bucket/prefix")
        return self
