"""What a run needs from outside the code, checked before it spends anything, every problem at once.

A training job on a cluster meets its environment first: the output root and its credentials, the
datasets, the policy's weights, the worker APIs' keys. Any of them missing used to surface minutes in, as
a botocore or transformers traceback from whichever step touched it first. ``preflight`` looks at each
cheaply (a listing, one small write and delete, an environment lookup) and returns one line per problem
naming the config key, so a job fails in seconds with the whole list:

    cannot start: 3 problem(s)
      output.dir s3://conductor-runs: no S3 credentials (set AWS_ACCESS_KEY_ID and ...)
      policy.model_path /models/Qwen2.5-0.5B-Instruct: not found
      pool.providers[0] (openai): environment variable OPENAI_API_KEY is not set

What it cannot know (whether the cluster will grow to fit the placement, whether a key is valid) is
left to the run, which waits for its placement groups and counts worker errors.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Optional

import fsspec
from fsspec.implementations.local import LocalFileSystem

from conductor.config import Config

CREDENTIALS_HINT = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL_S3 for a non-AWS "
                    "endpoint) in the environment of every node, or output.storage_options")


class PreflightError(RuntimeError):
    """The run cannot start; the message lists every problem found."""


def preflight(config: Config) -> list[str]:
    """One line per problem, empty when the run can start."""
    problems = []
    output_options = config.output.storage_options
    problems += _writable("output.dir", config.output.dir, output_options)
    store_path, store_options = config.store()
    if not store_path.startswith(config.output.dir.rstrip("/") + "/"):
        problems += _writable("rollout.store_path", store_path, store_options)
    for index, spec in enumerate(config.data.datasets):
        problems += _readable(f"data.datasets[{index}].path", spec.path, None, file=True)  # read with env creds
    if config.policy.model_path:
        problems += _readable("policy.model_path", config.policy.model_path, output_options, file=False)
    for index, provider in enumerate(config.pool.providers):
        if provider.api_key_env and not os.environ.get(provider.api_key_env):
            problems.append(f"pool.providers[{index}] ({provider.id}): environment variable "
                            f"{provider.api_key_env} is not set")
    return problems


def require(config: Config) -> None:
    problems = preflight(config)
    if problems:
        raise PreflightError(f"cannot start: {len(problems)} problem(s)\n" + "\n".join(f"  {p}" for p in problems))


def _writable(key: str, url: str, options: Optional[dict[str, Any]]) -> list[str]:
    """Write and delete one small file under the root (a local root is created first; a bucket never is:
    s3fs's makedirs would create a missing one)."""
    try:
        fs, root = fsspec.core.url_to_fs(url, **(options or {}))
        if isinstance(fs, LocalFileSystem):
            fs.makedirs(root, exist_ok=True)
        else:  # some S3 servers (SeaweedFS) create a bucket on the first write; AWS answers NoSuchBucket
            bucket = root.split("/", 1)[0]
            try:
                fs.info(bucket)
            except FileNotFoundError:
                return [f"{key} {url}: cannot write (the bucket {bucket} does not exist)"]
        probe = f"{root.rstrip('/')}/.preflight-{uuid.uuid4().hex[:8]}"
        fs.pipe_file(probe, b"ok")
        fs.rm_file(probe)
    except Exception as exc:  # any failure here means the run cannot write its outputs
        return [f"{key} {url}: cannot write ({_reason(exc)})"]
    return []


def _readable(key: str, url: str, options: Optional[dict[str, Any]], file: bool) -> list[str]:
    try:
        fs, path = fsspec.core.url_to_fs(url, **(options or {}))
        kind = fs.info(path)["type"]  # info, not isfile: that answers False for missing credentials too
    except FileNotFoundError:
        return [f"{key} {url}: not found"]
    except Exception as exc:  # reported, not raised: the run would fail on it later
        return [f"{key} {url}: cannot read ({_reason(exc)})"]
    wanted = "file" if file else "directory"
    return [] if kind == wanted else [f"{key} {url}: not a {wanted}"]


def _reason(exc: Exception) -> str:
    """A short cause in the user's terms; credentials are never part of it."""
    name = type(exc).__name__
    if name == "NoCredentialsError":
        return f"no S3 credentials: {CREDENTIALS_HINT}"
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError"):
        return f"S3 endpoint unreachable: {exc}"
    text = str(exc)
    if "NoSuchBucket" in text:
        return "the bucket does not exist"
    if "AccessDenied" in text or "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text or \
            isinstance(exc, PermissionError):
        return "access denied: check the credentials and the bucket's policy"
    return f"{name}: {text}"[:300]
