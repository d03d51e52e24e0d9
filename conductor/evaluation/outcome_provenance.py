"""What a method's outcomes depend on, kept with them in ``outcomes.parquet`` (the file's metadata), so that
``evaluate.reuse`` refuses rows made under another pool, simulator or seed instead of reporting them beside
this evaluation's as if they were comparable.

Every method's ``pool`` key hashes the workers it may call (ids, models, prices, sampling; not the provider's
address), the judges, the simulator (what its workers answer, not how it is reached, paced or faulted), the
seed, and the executor, verifier and judge settings. A Conductor's row also keeps a ``policy`` key (the policy
and how it was sampled). Reused rows must share this evaluation's pool key; a reused Conductor row under a
name this evaluation's policy also writes (``evaluate.conductor_name``: its root and recursive rows, which the
report pairs) must share its policy key too, while another checkpoint's rows, under their own name, are
reused beside it by design. The question set is checked apart (earlier_outcomes.py: every question-repeat of
this evaluation, each once). A file written before keys were kept has none: its rows are reused unchecked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any, Optional

from conductor.config import Config
from conductor.evaluation.conductor_method import CONDUCTOR_METHODS, conductor_label, is_conductor

METADATA_KEY = b"conductor.provenance"
# how the simulator is reached, paced and faulted, and where its data lies: not what its workers answer
SIMULATOR_TRANSPORT = {"host", "port", "api_key_env", "latency_scale", "fixed_latency_ms", "client_max_concurrency",
                       "client_rpm", "client_tpm", "first_token_share", "rpm", "rate_window_s", "retry_after_s",
                       "rate_limit_headers", "faults", "data_dir"}
Keys = dict[str, str]  # "pool", and for a Conductor's row "policy": sha256 hex each


def _digest(material: Any) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def pool_key(config: Config) -> str:
    return _digest({
        "workers": [worker.model_dump(mode="json") for worker in config.pool.workers],
        "judges": [judge.model_dump(mode="json") for judge in config.pool.judges],
        "simulator": config.simulator.model_dump(mode="json", exclude=SIMULATOR_TRANSPORT),
        "seed": config.seed,
        **{name: getattr(config, name).model_dump(mode="json") for name in ("executor", "verifier", "judge")},
    })


def policy_key(config: Config) -> str:
    evaluate = config.evaluate
    return _digest({"policy": evaluate.policy, "temperature": evaluate.conductor_temperature,
                    "constrain_format": evaluate.constrain_format, "cost_quality": evaluate.cost_quality,
                    "max_new_tokens": config.rollout.max_new_tokens, "prompt": config.prompt.model_dump(mode="json")})


def method_keys(config: Config, method: str) -> Keys:
    return written_keys(config, [method], (), {})[method]


def written_keys(config: Config, methods: Iterable[str], reused: Container[str],
                 stored: Mapping[str, Keys]) -> dict[str, Keys]:
    """The keys an outcomes file keeps: a reused method's as its file kept them (none where it kept none), a
    method run here under ``config``."""
    pool, policy = pool_key(config), policy_key(config)
    keys = {}
    for method in methods:
        if method in reused:
            if method in stored:
                keys[method] = stored[method]
        else:
            keys[method] = {"pool": pool, **({"policy": policy} if is_conductor(method) else {})}
    return keys


def file_metadata(keys: Mapping[str, Keys]) -> dict[bytes, bytes]:
    return {METADATA_KEY: json.dumps(dict(sorted(keys.items())), sort_keys=True).encode()} if keys else {}


def keys_in(metadata: Optional[Mapping[bytes, bytes]]) -> dict[str, Keys]:
    """Each method's keys in an outcomes file's metadata; none for a file that kept none."""
    return json.loads((metadata or {}).get(METADATA_KEY, b"{}"))


def check_reused(config: Config, methods: Sequence[str], stored: Mapping[str, Keys]) -> None:
    """Every reused method made under this evaluation's pool, and, where this evaluation runs a policy, no row
    under its names made by another; else a ValueError naming them."""
    known = [m for m in methods if m in stored]
    current = pool_key(config)
    pool = sorted(m for m in known if stored[m].get("pool") != current)
    if pool:
        raise ValueError(f"evaluate.reuse: {', '.join(pool)} were evaluated with another pool, simulator, seed, "
                         "executor, verifier or judge than this evaluation's: run them again, or reuse a file made "
                         "under this config")
    own_names = {conductor_label(config.evaluate.conductor_name, kind) for kind in CONDUCTOR_METHODS}
    other = sorted(m for m in known if config.evaluate.policy and m in own_names
                   and stored[m].get("policy") != policy_key(config))
    if other:
        raise ValueError(f"evaluate.reuse: {', '.join(other)} came from another policy or sampling than "
                         "evaluate.policy's, under the names this evaluation writes (the report pairs them): name "
                         "this checkpoint with evaluate.conductor_name (e.g. conductor_new)")
