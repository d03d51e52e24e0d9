"""The endpoint as a user meets it, shared by tests/test_serve_api.py and tests/test_serve_hostile.py:
`python -m cluster.serve` in its own process (standalone runtime, a trained tiny Conductor on vLLM, the
simulated pool behind a worker API key), started once a session. Short header and body timeouts, so that
the transport tests wait seconds, and spare caller keys, so that a fuzz run is not rate-limited."""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai

from conductor.weight_transfer import free_port
from tests.support.served_process import start_process

SERVE_CONFIG = os.environ.get("CONDUCTOR_SERVE_TEST_CONFIG", "configs/serve-toy.yaml")
SERVE_POLICY = os.environ.get("CONDUCTOR_SERVE_TEST_POLICY")   # None: the toy warm start
HEADER_TIMEOUT_S, BODY_TIMEOUT_S, MAX_BODY_BYTES = 2.0, 3.0, 4 * 2**20
# Above test_serve_api's burst of 200 (the production default): the burst test is about the server's answers,
# not eviction, which a starved test client can trigger by connecting 200 sockets before it writes to any.
MAX_PENDING = 256
SPARE_KEYS = 20


@dataclass
class Endpoint:
    base_url: str
    key: str
    load_key: str
    flood_key: str
    spare_keys: list[str]
    worker_key: str
    log: Path
    bodies: list[str] = field(default_factory=list)  # every raw response body seen, for the key check
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=120))  # one pool: no client per call

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1].split("/")[0])

    def client(self, key=None, **kw):
        return openai.OpenAI(base_url=self.base_url, api_key=key or self.key, max_retries=0, timeout=120, **kw)

    def post(self, path, body, key=None, headers=None):
        auth = {"authorization": f"Bearer {key or self.key}"} if key != "" else {}
        response = self.http.post(self.base_url + path, json=body, headers={**auth, **(headers or {})})
        self.bodies.append(response.text)
        return response


def start_endpoint(policy: str, log: Path):
    """The server process and its Endpoint."""
    port = free_port()
    keys = ["sk-caller-" + secrets.token_hex(16) for _ in range(3 + SPARE_KEYS)]
    worker_key = "sk-worker-" + secrets.token_hex(16)
    env = {"CONDUCTOR_API_KEYS": ",".join(keys), "CONDUCTOR_TEST_WORKER_KEY": worker_key}
    command = [sys.executable, "-m", "cluster.serve", "--config", SERVE_CONFIG,
               "--set", f"serve.policy={policy}", "--set", f"serve.port={port}",
               "--set", "simulator.api_key_env=CONDUCTOR_TEST_WORKER_KEY",
               "--set", "serve.limits.requests_per_minute=600", "--set", "serve.limits.burst=250",
               "--set", f"serve.limits.header_timeout_s={HEADER_TIMEOUT_S}",
               "--set", f"serve.limits.body_timeout_s={BODY_TIMEOUT_S}",
               "--set", f"serve.limits.max_body_bytes={MAX_BODY_BYTES}",
               "--set", f"serve.limits.max_pending_connections={MAX_PENDING}"]
    server = start_process(command, log, f"http://127.0.0.1:{port}/health", env, startup_s=240)
    endpoint = Endpoint(f"http://127.0.0.1:{port}/v1", keys[0], keys[1], keys[2], keys[3:], worker_key, log)
    return server, endpoint
