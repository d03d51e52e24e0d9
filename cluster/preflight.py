"""What a run needs from outside the code, checked before it spends anything, every problem at once.

A training job on a cluster meets its environment first: the output root and its credentials, the
datasets and their reward servers, the policy's weights, the worker APIs' keys. Any of them missing used
to surface minutes in, as a botocore or transformers traceback from whichever step touched it first.
``preflight`` looks at each cheaply (a listing, one small write and delete, an environment lookup, a
connection) and returns one line per problem naming the config key, so a job fails in seconds with the
whole list:

    cannot start: 4 problem(s)
      output.dir s3://conductor-runs: no S3 credentials (set AWS_ACCESS_KEY_ID and ...)
      data.datasets[1].reward_server.url http://10.0.0.5:8000/score: cannot connect (ConnectionRefusedError)
      policy.model_path /models/Qwen2.5-0.5B-Instruct: not found
      pool.providers[0] (openai): environment variable OPENAI_API_KEY is not set

What it cannot know (whether the cluster will grow to fit the placement, whether a key is valid) is
left to the run, which waits for its placement groups and counts worker errors.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

import fsspec
from fsspec.implementations.local import LocalFileSystem

from conductor.config import Config
from conductor.config_section import shown_env_name
from conductor.simulator.preset_file import preset_datasets, read_preset_file
from conductor.verifiers.http_reward import RewardServer, shown_url
from learner.gguf_policy import is_gguf_source, resolve_gguf

CREDENTIALS_HINT = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL_S3 for a non-AWS "
                    "endpoint) in the environment of every node")
# One quick attempt per check: an unreachable endpoint should fail the check in seconds, not after
# botocore's and s3fs's retries (minutes when packets are dropped).
S3_QUICK = {"config_kwargs": {"connect_timeout": 5, "read_timeout": 15, "retries": {"max_attempts": 1}}}
ACCESS_DENIED = ("accessdenied", "access denied", "invalidaccesskeyid", "signaturedoesnotmatch",
                 "signature we calculated", "forbidden")
REWARD_SERVER_CONNECT_S = 5.0  # a reward server that takes no connection in this long is reported
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")  # "org/name": from_pretrained fetches it from the Hugging Face Hub


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
        if spec.reward_server is not None:
            problems += _reward_server(f"data.datasets[{index}].reward_server", spec.reward_server)
    if not (config.data.datasets and config.pool.workers):  # the simulated preset's task files are read
        problems += _preset_files(config)
    if config.data.datasets and not config.pool.workers and not problems:
        problems += _unknown_to_the_simulator(config)
    model = config.policy.model_path
    if is_gguf_source(model):
        try:
            resolve_gguf(model)
        except (FileNotFoundError, ValueError) as exc:
            problems.append(f"policy.model_path {model}: {exc}")
    elif model and not (HUB_ID.match(model) and not os.path.exists(model)):
        problems += _readable("policy.model_path", model, output_options, file=False)
    used = {worker.provider for worker in (*config.pool.workers, *config.pool.judges)}  # none: the simulated pool
    for index, provider in enumerate(config.pool.providers):
        if provider.id in used and provider.api_key_env and not os.environ.get(provider.api_key_env):
            problems.append(f"pool.providers[{index}] ({provider.id}): environment variable "
                            f"{shown_env_name(provider.api_key_env)} is not set")
    return problems


def _preset_files(config: Config) -> list[str]:
    """The files of the simulator preset's task sets, their ``{data_dir}`` filled in."""
    problems, preset = [], config.simulator.preset
    spec = read_preset_file(preset)
    for where, source in (("tasks", spec.tasks), ("unseen", spec.unseen)):
        for index, entry in enumerate(preset_datasets(source, config.simulator.model_dump(), where) if source else ()):
            problems += _readable(f"simulator.preset {preset}: {where}.datasets[{index}].path", entry.path, None,
                                  file=True)
    return problems


def _unknown_to_the_simulator(config: Config) -> list[str]:
    """A run's own questions on the simulated pool must be among its preset's tasks, word for word (prompt
    and instruction): the simulated workers know an item by its prompt, and would answer any other one
    wrong, so the run would train on nothing and report 0 without saying why."""
    from conductor.simulator.presets import load_preset
    from conductor.tasks.loader import load_tasks

    try:
        known = {task.prompt for task in load_preset(config.simulator).tasks}
    except ValueError as exc:  # a bad row of the preset's own files: that is the problem to name
        return [f"simulator.preset {config.simulator.preset}: {exc}"]
    problems = []
    for index, spec in enumerate(config.data.datasets):
        try:
            unknown = [task for task in load_tasks(spec) if task.prompt not in known]
        except ValueError as exc:  # a row that lacks a field, an empty question, a repeated id
            problems.append(f"data.datasets[{index}] ({spec.path}): {exc}")
            continue
        if unknown:
            problems.append(f"data.datasets[{index}] ({spec.path}): {len(unknown)} question(s) are not among "
                            f"simulator.preset {config.simulator.preset}'s tasks (first: {unknown[0].id}), so the "
                            "simulated workers would not know them; list the same entry, instruction and all, "
                            "under the preset's tasks.datasets")
    return problems


def require(config: Config) -> None:
    problems = preflight(config)
    if problems:
        raise PreflightError(f"cannot start: {len(problems)} problem(s)\n" + "\n".join(f"  {p}" for p in problems))


def ready_to_start(config: Config, console: Any) -> bool:
    """For an entry point's main: print every problem (exit code 2 is the caller's) or say yes."""
    try:
        require(config)
    except PreflightError as exc:
        console.print(str(exc), style="red", markup=False)
        return False
    return True


def _filesystem(url: str, options: Optional[dict[str, Any]]) -> tuple[Any, str]:
    options = dict(options or {})
    quick = url.startswith(("s3://", "s3a://"))
    if quick:
        options = {**options, "config_kwargs": {**S3_QUICK["config_kwargs"], **options.get("config_kwargs", {})}}
    fs, path = fsspec.core.url_to_fs(url, **options)
    if quick:
        fs.retries = 1  # s3fs's own retry loop (5 by default), on an instance of these options only
    return fs, path


def _writable(key: str, url: str, options: Optional[dict[str, Any]]) -> list[str]:
    """Write and delete one small file under the root (a local root is created first; a bucket never is:
    s3fs's makedirs would create a missing one)."""
    shown = _shown(url)
    try:
        fs, root = _filesystem(url, options)
        if isinstance(fs, LocalFileSystem):
            fs.makedirs(root, exist_ok=True)
        else:  # some S3 servers (SeaweedFS) create a bucket on the first write; AWS answers NoSuchBucket
            bucket = root.split("/", 1)[0]
            try:
                fs.info(bucket)
            except FileNotFoundError:
                return [f"{key} {shown}: cannot write (the bucket {bucket} does not exist)"]
            except PermissionError:
                pass  # keys scoped to a prefix may not look at the bucket: the probe below decides
        probe = f"{root.rstrip('/')}/.preflight-{uuid.uuid4().hex[:8]}"
        fs.pipe_file(probe, b"ok")
    except Exception as exc:  # any failure here means the run cannot write its outputs
        return [f"{key} {shown}: cannot write ({_reason(exc)})"]
    try:
        fs.rm_file(probe)
    except Exception as exc:  # written, but left behind: the run can go on, its archiving may not
        return [f"{key} {shown}: cannot delete what it wrote ({_reason(exc)})"]
    return []


def _readable(key: str, url: str, options: Optional[dict[str, Any]], file: bool) -> list[str]:
    shown = _shown(url)
    try:
        fs, path = _filesystem(url, options)
        kind = fs.info(path)["type"]  # info, not isfile: that answers False for missing credentials too
        if isinstance(fs, LocalFileSystem) and not os.access(path, os.R_OK | (os.X_OK if kind == "directory" else 0)):
            raise PermissionError(path)
    except FileNotFoundError:
        return [f"{key} {shown}: not found"]
    except Exception as exc:  # reported, not raised: the run would fail on it later
        return [f"{key} {shown}: cannot read ({_reason(exc)})"]
    wanted = "file" if file else "directory"
    return [] if kind == wanted else [f"{key} {shown}: not a {wanted}"]


def _reward_server(key: str, server: RewardServer) -> list[str]:
    """Its key's variable is set and it takes a connection (whether it scores is the run's to find out)."""
    problems = []
    if server.api_key_env and not os.environ.get(server.api_key_env):
        problems.append(f"{key}.api_key_env: environment variable {shown_env_name(server.api_key_env)} is not set")
    parts = urlsplit(server.url)
    try:
        socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)),
                                 timeout=REWARD_SERVER_CONNECT_S).close()
    except OSError as exc:
        problems.append(f"{key}.url {shown_url(server.url)}: cannot connect ({type(exc).__name__})")
    return problems


def _shown(url: str) -> str:
    """The URL without a user part or query, where credentials can hide (https://user:pass@..., ?token=)."""
    parts = urlsplit(url)
    if not parts.scheme or (not parts.query and "@" not in parts.netloc):
        return url
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", ""))


def _reason(exc: Exception) -> str:
    """A short cause in the user's terms; credentials are never part of it."""
    name = type(exc).__name__
    if name == "NoCredentialsError":
        return f"no S3 credentials: {CREDENTIALS_HINT}"
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionError", "ClientConnectorError"):
        return "the S3 endpoint is unreachable"
    text = str(exc)
    if "NoSuchBucket" in text:
        return "the bucket does not exist"
    if any(mark in text.lower() for mark in ACCESS_DENIED):
        return "access denied: check the credentials and the bucket's policy"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return name  # the type only: an exception's text may quote a URL or a header
