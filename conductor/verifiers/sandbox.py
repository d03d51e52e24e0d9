"""Run untrusted Python (a worker's code answer) in a locked-down child process.

The child is ``python -I -S sandbox_bootstrap.py`` with a scrubbed environment (no API keys, no PYTHON*
variables) in its own session, so the whole group is killed at the wall limit. Everything crosses the
boundary through descriptors the host opens before the program starts:

- the program and its stdin are anonymous read-only files (memfd): nothing on disk to swap;
- stdout and stderr are pipes the host reads *while the program runs*, at most ``output_mb`` in total
  (past that the program is killed and the result says ``output_truncated``);
- the bootstrap reports which isolation layers took effect on a third pipe;
- ``run_python_pair`` runs two programs, each in its own sandbox, joined by a pipe pair (``__channel__``
  in each program): a code check's judge and candidate (code_harness.py).

After the run the host follows no path inside the program's directory: the work dir is a private tmpfs
in the child's mount namespace (or, without namespaces, a host dir removed with ``shutil.rmtree``, which
never follows symlinks). The wall limit holds whatever the program does: reading stops at the deadline,
the process group is killed, and what was read so far is the result.

``require_isolation`` refuses to run when any layer is unavailable (e.g. a container that forbids user
namespaces, a kernel without Landlock scopes). A refused run is an *infrastructure* error
(``SandboxResult.infra_error``), never a wrong answer.
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from conductor.verifiers import task_cgroup

BOOTSTRAP = Path(__file__).with_name("sandbox_bootstrap.py")
ISOLATION_UNAVAILABLE_EXIT = 97
LAYERS = ("rlimits", "user_namespace", "network_namespace", "pid_namespace", "task_limit", "private_disk",
          "capabilities", "landlock_filesystem", "landlock_scopes", "seccomp")
_SAFE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
_CHUNK = 65536
_KILL_GRACE_S = 2.0
_PAIR_GRACE_S = 1.0  # the candidate's time to exit once the judge is done


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 1024
    output_mb: int = 8  # stdout + stderr, read by the host
    disk_mb: int = 64  # the program's private tmpfs
    file_mb: int = 16  # largest single file it may write
    max_files: int = 1024  # inodes in its tmpfs
    max_open_files: int = 64
    max_tasks: int = 64  # processes and threads: RLIMIT_NPROC in its user namespace, and a pids cgroup (root hosts)
    require_isolation: bool = False
    # refuse where Landlock is unavailable: the only layer that stops reads, and without it a program reads what
    # the host user can (a parent's /proc/<pid>/environ and its API keys among them)
    require_confined_reads: bool = True

    def __post_init__(self) -> None:
        if self.max_tasks < 1:
            raise ValueError(f"max_tasks must be at least 1 (got {self.max_tasks}): the program's own thread is one")

    @property
    def required_layers(self) -> tuple[str, ...]:
        """The layers without which the program is not run (the bootstrap exits first)."""
        if self.require_isolation:
            return LAYERS
        return ("landlock_filesystem",) if self.require_confined_reads else ()


@dataclass
class SandboxResult:
    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    isolation: dict[str, bool] = field(default_factory=dict)
    output_truncated: bool = False
    infra_error: Optional[str] = None  # the sandbox itself failed or refused: the run says nothing of the program
    pid: Optional[int] = None  # the bootstrap's pid, also its process group and session (killed at the end)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.output_truncated and not self.infra_error


def run_python(program: str, stdin: str = "", limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run ``program`` as ``__main__`` with ``stdin``; never raises for anything the program does."""
    started = _start(program, stdin, limits, channel=())
    return started if isinstance(started, SandboxResult) else _finish(started, limits)


def run_python_pair(judge: str, candidate: str, limits: SandboxLimits = SandboxLimits()
                    ) -> tuple[SandboxResult, SandboxResult]:
    """Run two programs, each in a sandbox of its own, joined by a pipe pair: each sees ``__channel__``, its
    (write fd, read fd) on the judge's side and (read fd, write fd) on the candidate's (remote_calls.py).
    Both share one wall limit, and the candidate is stopped once the judge is done (a thread it left running
    would otherwise hold it to the limit). Returns (the judge's result, the candidate's)."""
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    judged: _Started | SandboxResult | None = None
    try:
        judged = _start(judge, "", limits, channel=(requests_write, replies_read))
        served = _start(candidate, "", limits, channel=(requests_read, replies_write))
    except BaseException:
        if isinstance(judged, _Started):  # the candidate never started: stop the judge, its dir and cgroup
            _kill_group(judged.process, close_streams=False)
            _finish(judged, limits)
        raise
    finally:
        for fd in (requests_read, requests_write, replies_read, replies_write):
            os.close(fd)  # the children hold their ends: either one's exit is the other's end of file
    results: dict[str, SandboxResult] = {}

    def finish(name: str, run: _Started | SandboxResult) -> None:
        results[name] = run if isinstance(run, SandboxResult) else _finish(run, limits)

    candidate_thread = threading.Thread(target=finish, args=("candidate", served), daemon=True)
    candidate_thread.start()
    finish("judge", judged)
    candidate_thread.join(timeout=_PAIR_GRACE_S)
    if candidate_thread.is_alive() and isinstance(served, _Started):  # the verdict is in: it has nothing to add
        _kill_group(served.process, close_streams=False)
        candidate_thread.join()
    return results["judge"], results["candidate"]


@dataclass
class _Started:
    process: subprocess.Popen
    workdir: str
    report_read: int
    started: float
    cgroup: Optional[Path]


def _start(program: str, stdin: str, limits: SandboxLimits, channel: tuple[int, ...]) -> _Started | SandboxResult:
    workdir = tempfile.mkdtemp(prefix="conductor-sbx-")
    program_fd = _sealed_file(program.encode("utf-8"))
    stdin_fd = _sealed_file(stdin.encode("utf-8", "replace"))
    report_read, report_write = os.pipe()
    cgroup = task_cgroup.create(limits.max_tasks, limits.wall_s)
    settings = {"workdir": workdir, "program_fd": program_fd, "report_fd": report_write, "channel": list(channel),
                "memory_mb": limits.memory_mb, "cpu_s": limits.cpu_s, "file_mb": limits.file_mb,
                "disk_mb": limits.disk_mb, "max_files": limits.max_files,
                "max_open_files": limits.max_open_files, "max_tasks": limits.max_tasks,
                "task_cgroup": str(cgroup) if cgroup else None, "required_layers": list(limits.required_layers),
                "site": _host_site()}
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(BOOTSTRAP), json.dumps(settings)],
            stdin=stdin_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir,
            env=dict(_SAFE_ENV, HOME=workdir, TMPDIR=workdir), start_new_session=True,
            pass_fds=(program_fd, report_write, *channel), close_fds=True,
        )
    except OSError as exc:
        os.close(report_read)
        _remove(workdir)
        task_cgroup.remove(cgroup)
        return SandboxResult(None, "", "", False, 0.0, infra_error=f"sandbox could not start: {exc}")
    finally:
        for fd in (program_fd, stdin_fd, report_write):
            os.close(fd)
    return _Started(process, workdir, report_read, started, cgroup)


def _finish(run: _Started, limits: SandboxLimits) -> SandboxResult:
    process = run.process
    try:
        streams, timed_out, truncated = _collect(process, run.report_read, run.started + limits.wall_s,
                                                 limits.output_mb << 20)
    finally:
        _kill_group(process)
        _remove(run.workdir)
        task_cgroup.remove(run.cgroup)
    isolation = _parse_report(streams["report"])
    returncode = None if timed_out else process.returncode
    result = SandboxResult(returncode, streams["stdout"].decode("utf-8", "replace"),
                           streams["stderr"].decode("utf-8", "replace"), timed_out,
                           time.monotonic() - run.started, isolation, truncated, pid=process.pid)
    if not isolation:
        result.infra_error = "the sandbox did not start the program (no isolation report)"
    elif returncode == ISOLATION_UNAVAILABLE_EXIT and any(not isolation.get(n) for n in limits.required_layers):
        result.infra_error = _refusal(limits, isolation)
    return result


def _refusal(limits: SandboxLimits, isolation: dict[str, bool]) -> str:
    if limits.require_isolation:
        missing = ", ".join(name for name, applied in isolation.items() if not applied)
        return f"refused: isolation layers unavailable on this host: {missing}"
    return ("refused: Landlock is unavailable on this host (a kernel before 5.13, or without the LSM), so "
            "model-written code could read every file the host user can; verifier.allow_unconfined_code_reads=true "
            "runs it anyway")


def _remove(workdir: str) -> None:
    """The work dir gone, whatever the program left there: a tree too deep for shutil.rmtree's recursion
    (on a host without the private tmpfs) goes by ``rm -rf``; nothing here raises."""
    try:
        shutil.rmtree(workdir, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", workdir], check=False, timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@functools.cache
def host_isolation() -> dict[str, bool]:
    """The layers this host applies (one trivial run, cached): what summaries report."""
    return run_python("pass", limits=SandboxLimits(wall_s=30, cpu_s=10)).isolation


@functools.cache
def _host_site() -> dict:
    """What the bootstrap, started with -S, takes from this interpreter's site set-up."""
    return {"prefix": sys.prefix, "exec_prefix": sys.exec_prefix, "dirs": site.getsitepackages()}


def _sealed_file(data: bytes) -> int:
    """A read-only descriptor of an anonymous in-memory file holding ``data``."""
    writable = os.memfd_create("sandbox-input", os.MFD_CLOEXEC)
    try:
        os.write(writable, data) if len(data) < _CHUNK else _write_all(writable, data)
        return os.open(f"/proc/self/fd/{writable}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(writable)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _collect(process: subprocess.Popen, report_fd: int, deadline: float, cap: int) -> tuple[dict, bool, bool]:
    """Read stdout, stderr and the report until all close or the deadline; stop at ``cap`` bytes of
    output. Returns (bytes per stream, timed out, output truncated)."""
    names = {process.stdout.fileno(): "stdout", process.stderr.fileno(): "stderr", report_fd: "report"}
    chunks: dict[str, list[bytes]] = {name: [] for name in names.values()}
    used = 0
    timed_out = truncated = False
    with selectors.DefaultSelector() as selector:
        for fd in names:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(timeout=remaining):
                try:
                    data = os.read(key.fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    selector.unregister(key.fd)
                    continue
                name = names[key.fd]
                if name != "report":
                    data = data[:cap - used]
                    used += len(data)
                chunks[name].append(data)
                if used >= cap:
                    truncated = True
                    break
            if truncated:
                break
    os.close(report_fd)
    if not timed_out and not truncated:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True  # closed its output but kept running
    return {name: b"".join(parts) for name, parts in chunks.items()}, timed_out, truncated


def _kill_group(process: subprocess.Popen, close_streams: bool = True) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass  # unkillable (uninterruptible I/O); never block the caller past the grace
    if close_streams:
        for stream in (process.stdout, process.stderr):
            stream.close()


def _parse_report(raw: bytes) -> dict[str, bool]:
    try:
        report = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        return {}
    return {str(k): bool(v) for k, v in report.items()} if isinstance(report, dict) else {}
