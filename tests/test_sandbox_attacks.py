"""Attacks on the code sandbox, each written the way a program that is *trying* would write it.

Every attack runs twice:
- with every layer required (``require_isolation=True``): contained, or (on a kernel missing a layer)
  refused as an infrastructure error before the program runs;
- on a host whose policy forbids user namespaces (as Docker's default seccomp profile does; a real
  kernel refusal, see tests/support/without_user_namespaces.py), with isolation not required: the run
  is *reported* weaker (no namespaces, no private disk) and the remaining layers still contain the attack.
  Attacks only a private disk stops (disk filling) are marked and skipped there, never silently passed.

In every case the host is unharmed (its victim process, its descriptors, its temp dir) and the call
returns within the wall limit plus a small grace, whatever the program leaves behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from conductor.verifiers.sandbox import SandboxLimits, SandboxResult, host_isolation, run_python
from tests.support.sandbox_attack_programs import ATTACKS

REPO = Path(__file__).resolve().parents[1]
WALL_S = 4.0
GRACE_S = 3.0
LIMITS = SandboxLimits(wall_s=WALL_S, cpu_s=WALL_S, memory_mb=512, require_isolation=True)
SECRET = "s3cr3t-" + uuid.uuid4().hex

# What each attack must not achieve, by marker in its output; plus checks on the host below.
FORBIDDEN = {name: ("SENT", "CONNECTED", "GOT", "WROTE", "DID", "ALLOWED", "SURVIVED", SECRET) for name in ATTACKS}
NEEDS_PRIVATE_DISK = {"fill_the_disk", "many_files"}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The host's state an attack aims at: a same-user victim process holding a secret in its
    environment, a secret file, Unix sockets (pathname, datagram, abstract), a TCP listener, a Ray-like
    session directory."""
    root = tmp_path_factory.mktemp("host")
    secret_path = root / "credentials"
    secret_path.write_text(SECRET)
    victim = subprocess.Popen(["sleep", "600"], env={"AWS_SECRET_ACCESS_KEY": SECRET}, start_new_session=True)
    servers = []

    def listen(family, kind, address):
        server = socket.socket(family, kind)
        server.bind(address)
        if kind == socket.SOCK_STREAM:
            server.listen()
        server.settimeout(0.2)
        servers.append(server)
        return server

    unix = listen(socket.AF_UNIX, socket.SOCK_STREAM, str(root / "service.sock"))
    dgram = listen(socket.AF_UNIX, socket.SOCK_DGRAM, str(root / "log.sock"))
    abstract_name = "\0conductor-attack-" + uuid.uuid4().hex
    abstract = listen(socket.AF_UNIX, socket.SOCK_STREAM, abstract_name)
    tcp = listen(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
    ray_dir = root / "ray" / "session_latest"
    (ray_dir / "sockets").mkdir(parents=True)
    (ray_dir / "session.json").write_text(SECRET)
    listen(socket.AF_UNIX, socket.SOCK_STREAM, str(ray_dir / "sockets" / "raylet"))
    for path in (root, secret_path, ray_dir):  # readable to anyone: only the sandbox's own layers stop it
        path.chmod(0o777 if path.is_dir() else 0o644)
    values = {"SECRET_PATH": repr(str(secret_path)), "VICTIM": str(victim.pid), "HOST": str(os.getpid()),
              "UNIX_PATH": repr(str(root / "service.sock")), "DGRAM_PATH": repr(str(root / "log.sock")),
              "ABSTRACT_NAME": repr(abstract_name), "TCP_PORT": str(tcp.getsockname()[1]),
              "RAY_DIR": repr(str(ray_dir)), "OUTSIDE_PATH": repr(str(root / "escape.txt"))}
    state = {"victim": victim, "unix": unix, "dgram": dgram, "abstract": abstract, "tcp": tcp, "root": root,
             "values": values}
    yield state
    victim.kill()
    victim.wait()
    for server in servers:
        server.close()


def program_for(name: str, host) -> str:
    text = ATTACKS[name]
    for key, value in host["values"].items():
        text = text.replace(key, value)
    return text


def assert_host_unharmed(host, result: SandboxResult) -> None:
    assert host["victim"].poll() is None, "the victim process was killed"
    with open(f"/proc/{host['victim'].pid}/stat") as stat:
        assert stat.read().split(") ")[1][0] not in "tT", "the victim process was stopped or traced"
    for server in (host["unix"], host["abstract"], host["tcp"]):
        with pytest.raises((socket.timeout, BlockingIOError)):
            server.accept()  # nothing reached a listening socket
    with pytest.raises((socket.timeout, BlockingIOError)):
        host["dgram"].recv(64)
    assert not (host["root"] / "escape.txt").exists()
    assert not Path("/tmp/conductor-escape").exists() and not Path("/dev/shm/conductor-escape").exists()
    assert result.pid is not None and not _group_alive(result.pid), "a sandbox process outlived the run"


def _group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def assert_contained(name: str, result: SandboxResult, duration_s: float) -> None:
    output = result.stdout + result.stderr
    assert duration_s < WALL_S + GRACE_S, f"the host was blocked {duration_s:.1f}s"
    for marker in FORBIDDEN[name]:
        assert marker not in output, f"{name}: {marker!r} in the output:\n{output[-2000:]}"


def open_fds() -> set[str]:
    """This process's descriptors of the kinds run_python opens (pipes, the sealed memfds): the session's other
    threads (a Ray driver's, s3fs's clients) open and close sockets and files of their own meanwhile."""
    kinds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between the listing and the look
            continue
        if target.startswith(("pipe:", "/memfd:")):
            kinds.add(f"{fd} {target}")
    return kinds


def sandbox_dirs() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("conductor-sbx-")}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_contained_with_every_layer(name, host, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sandbox's work dirs: this test's alone
    fds_before, dirs_before = open_fds(), sandbox_dirs()
    started = time.monotonic()
    result = run_python(program_for(name, host), limits=LIMITS)
    duration = time.monotonic() - started
    if result.infra_error:  # a kernel without some layer: refused before the program ran, and said so
        assert result.infra_error.startswith("refused") and not result.stdout
        assert not all(host_isolation().values())
        pytest.skip(f"this kernel lacks a layer; the run was refused: {result.infra_error}")
    assert all(result.isolation.values()) and set(result.isolation) == set(host_isolation())
    assert_contained(name, result, duration)
    assert_host_unharmed(host, result)
    # Nothing leaked, nothing left on disk. Only new descriptors count: the session's own clients (s3fs's
    # keep-alive connections to the test S3 server) may close theirs meanwhile.
    assert not open_fds() - fds_before and sandbox_dirs() == dirs_before
    check_evidence(name, result)
    if name == "forge_report_and_host_fds":
        assert result.isolation == host_isolation()


EXPECTED_EVIDENCE = {  # positive evidence that the attack ran and was stopped where we say it is
    "symlinked_output_files": lambda r: "read PermissionError" in r.stdout,
    "fifo_output_files": lambda r: r.timed_out,
    "signal_host_processes": lambda r: r.stdout.count("refused") == 8,
    "ptrace_and_read_host_memory": lambda r: "attach -1 1" in r.stdout and "vm_readv -1" in r.stdout,
    "read_other_processes_proc": lambda r: r.stdout.count("refused") == 9,
    "parent_environment": lambda r: "AWS_SECRET" not in r.stdout and "refused parent" in r.stdout,
    "connect_pathname_unix_socket": lambda r: r.stdout.count("refused") == 4,
    "connect_abstract_unix_socket": lambda r: "refused PermissionError" in r.stdout,
    "network_any_family": lambda r: r.stdout.count("refused") == 4,
    "read_ray_session_dir": lambda r: r.stdout.count("refused") == 3,
    "hard_link_host_file": lambda r: "refused" in r.stdout,
    "write_outside_work_dir": lambda r: r.stdout.count("refused") == 3,
    "fill_the_disk": lambda r: "stopped OSError" in r.stdout and int(r.stdout.split()[-2]) <= 64,
    "many_files": lambda r: "stopped OSError" in r.stdout and int(r.stdout.split()[-1]) <= 1024,
    "fd_exhaustion": lambda r: "stopped OSError" in r.stdout and "no pipe" in r.stdout,
    "outlive_the_parent": lambda r: r.timed_out and r.returncode is None,
    "kernel_attack_surface": lambda r: "all refused" in r.stdout,
    "foreign_syscall_abi": lambda r: r.returncode == -signal.SIGSYS,
    "forge_report_and_host_fds": lambda r: r.ok,
    "change_host_file_metadata": lambda r: r.stdout.count("refused") == 2 and r.stdout.count("ignored") == 2,
    "sysv_shared_memory": lambda r: r.stdout.count("refused") == 3,
    "raw_clone_thread_bomb": lambda r: "stopped after" in r.stdout and int(r.stdout.split()[2]) < LIMITS.max_tasks,
}


def check_evidence(name: str, result: SandboxResult) -> None:
    assert EXPECTED_EVIDENCE[name](result), f"{name}: unexpected result {result}"


@pytest.fixture(scope="module")
def without_user_namespaces(host):
    """Every attack, run once on a host that forbids user namespaces (isolation not required)."""
    programs = {name: program_for(name, host) for name in ATTACKS}
    snippet = (
        "import json, sys, time\nfrom dataclasses import asdict\n"
        "from conductor.verifiers.sandbox import SandboxLimits, run_python\n"
        f"limits = SandboxLimits(wall_s={WALL_S}, cpu_s={WALL_S}, memory_mb=512, require_isolation=False)\n"
        "out = {}\n"
        "for name, program in json.loads(sys.stdin.read()).items():\n"
        "    started = time.monotonic(); result = run_python(program, limits=limits)\n"
        "    out[name] = {'result': asdict(result), 'host_duration_s': time.monotonic() - started}\n"
        "print(json.dumps(out))\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "tests.support.without_user_namespaces", "-c", snippet],
                          input=json.dumps(programs), capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout)
    return {name: (SandboxResult(**run["result"]), run["host_duration_s"]) for name, run in runs.items()}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_without_namespaces_is_reported_weaker_and_still_contained(name, host, without_user_namespaces):
    result, host_duration_s = without_user_namespaces[name]
    missing = {layer for layer, applied in result.isolation.items() if not applied}
    assert missing == {"user_namespace", "network_namespace", "pid_namespace", "private_disk"}, result.isolation
    assert result.infra_error is None  # not required, so it ran: weaker, and the result says how
    if name in NEEDS_PRIVATE_DISK:
        pytest.skip("only the private tmpfs bounds the disk; without it this run is reported, not contained")
    assert_contained(name, result, host_duration_s)
    assert_host_unharmed(host, result)
    check_evidence(name, result)
