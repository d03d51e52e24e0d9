"""Run untrusted Python (a worker's code answer) in a locked-down child process.

The child is ``python -I sandbox_bootstrap.py`` in a fresh temp dir with a scrubbed environment (no API
keys, no PYTHON* variables), its own session (so the whole group is killed on timeout) and stdout/stderr
going to size-capped files. The bootstrap applies rlimits, a private network namespace, Landlock and
seccomp before the program runs (see sandbox_bootstrap.py). ``require_isolation`` refuses to run when a
kernel layer is unavailable (e.g. a container that forbids user namespaces) instead of running weaker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

BOOTSTRAP = Path(__file__).with_name("sandbox_bootstrap.py")
ISOLATION_UNAVAILABLE_EXIT = 97
_SAFE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 1024
    output_mb: int = 8
    require_isolation: bool = False


@dataclass
class SandboxResult:
    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    isolation: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def run_python(program: str, stdin: str = "", limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run ``program`` as ``__main__`` with ``stdin``; never raises for anything the program does."""
    with tempfile.TemporaryDirectory(prefix="conductor-sbx-") as workdir:
        program_file = Path(workdir, "solution.py")
        program_file.write_text(program, encoding="utf-8")
        stdout_path, stderr_path = Path(workdir, ".stdout"), Path(workdir, ".stderr")
        report_read, report_write = os.pipe()
        env = dict(_SAFE_ENV, HOME=workdir, TMPDIR=workdir)
        config = {"memory_mb": limits.memory_mb, "cpu_s": limits.cpu_s, "file_mb": limits.output_mb,
                  "require_isolation": limits.require_isolation, "report_fd": report_write}
        started = time.monotonic()
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-I", str(BOOTSTRAP), workdir, json.dumps(config), str(program_file)],
                stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=workdir, env=env,
                start_new_session=True, pass_fds=(report_write,), close_fds=True,
            )
        os.close(report_write)
        timed_out = False
        try:
            process.communicate(stdin.encode("utf-8", "replace"), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except (BrokenPipeError, OSError):
            pass  # the program exited without reading its stdin
        finally:
            _kill_group(process)
        duration = time.monotonic() - started
        with os.fdopen(report_read) as report:
            isolation = _parse_report(report.read())
        cap = limits.output_mb * 1024 * 1024
        return SandboxResult(
            returncode=None if timed_out else process.returncode,
            stdout=stdout_path.read_bytes()[:cap].decode("utf-8", "replace"),
            stderr=stderr_path.read_bytes()[:cap].decode("utf-8", "replace"),
            timed_out=timed_out, duration_s=duration, isolation=isolation,
        )


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _parse_report(text: str) -> dict[str, bool]:
    try:
        report = json.loads(text)
        return {str(k): bool(v) for k, v in report.items()} if isinstance(report, dict) else {}
    except ValueError:
        return {}
