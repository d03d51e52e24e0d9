"""The code sandbox: ordinary programs run, resource limits stop runaway ones, the host is unharmed, and
isolation is part of the result (a run refused for missing isolation is an infrastructure error).
Attacks by a program that is trying to escape are in test_sandbox_attacks.py."""

import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conductor.config import VerifierConfig
from conductor.tasks.task import Task
from conductor.verifiers import task_cgroup
from conductor.verifiers.sandbox import LAYERS, SandboxLimits, SandboxResult, host_isolation, run_python
from conductor.verifiers.verify import verify

REPO = Path(__file__).resolve().parents[1]
LIMITS = SandboxLimits(wall_s=3, cpu_s=3, memory_mb=512, require_isolation=True)
requires_every_layer = pytest.mark.skipif(not all(host_isolation().values()),
                                          reason=f"this kernel lacks a sandbox layer: {host_isolation()}")


def test_the_host_reports_every_layer_by_name():
    assert set(host_isolation()) == set(LAYERS)


@requires_every_layer
def test_normal_program_runs_with_stdin_and_full_isolation():
    result = run_python("print(input()[::-1])", stdin="abc\n", limits=LIMITS)
    assert result.ok and result.stdout.strip() == "cba" and result.infra_error is None
    assert result.isolation == {layer: True for layer in LAYERS}


@requires_every_layer
def test_large_program_stdin_and_stdout_cross_the_boundary_intact():
    payload = "x" * 3_000_000  # larger than any pipe buffer, both ways
    program = "import sys\ndata = sys.stdin.read()\nsys.stdout.write(data)\n# " + "y" * 200_000
    result = run_python(program, stdin=payload, limits=SandboxLimits(wall_s=10, cpu_s=10, output_mb=8))
    assert result.ok and result.stdout == payload


@requires_every_layer
def test_asyncio_programs_still_work():
    """asyncio needs a connected socket pair for its self-pipe: allowed, since it reaches nothing."""
    program = "import asyncio\nasync def f():\n    await asyncio.sleep(0)\n    return 7\nprint(asyncio.run(f()))"
    result = run_python(program, limits=LIMITS)
    assert result.ok and result.stdout.strip() == "7"


@requires_every_layer
def test_a_program_that_copies_its_own_files_still_works():
    """shutil.copy sets the copy's mode and copy2 its times too: those calls succeed without effect, rather
    than fail a correct program (they are refused their effect so that no host file's mode can change)."""
    program = ("import shutil, pathlib\npathlib.Path('a').write_text('x')\nshutil.copy('a', 'b')\n"
               "shutil.copy2('a', 'c')\npathlib.Path('d').mkdir()\nshutil.copytree('d', 'e')\n"
               "print(open('b').read() + open('c').read())")
    result = run_python(program, limits=LIMITS)
    assert result.ok and result.stdout.strip() == "xx", result.stderr


def test_infinite_loop_is_stopped():
    result = run_python("while True:\n    pass", limits=LIMITS)
    assert result.timed_out and not result.ok and result.duration_s < LIMITS.wall_s + 2


def test_output_printed_before_a_timeout_is_kept():
    result = run_python("import time\nprint('started', flush=True)\ntime.sleep(60)", limits=LIMITS)
    assert result.timed_out and result.stdout == "started\n"


def test_memory_bomb_is_stopped():
    result = run_python("x = bytearray(8 * 1024 ** 3)\nprint('allocated')", limits=LIMITS)
    assert not result.ok and "allocated" not in result.stdout and "MemoryError" in result.stderr


def test_fork_bomb_is_refused():
    result = run_python("import os\nwhile True:\n    os.fork()", limits=LIMITS)
    assert not result.ok and "PermissionError" in result.stderr


THREAD_BOMB = """
import threading
threading.stack_size(32768)  # small stacks: the address-space limit alone lets hundreds start
release = threading.Event()
started = 0
try:
    while started < 2000:
        threading.Thread(target=release.wait).start()
        started += 1
except RuntimeError:
    pass
release.set()
print(started)
"""


@requires_every_layer
def test_thread_bomb_stops_at_the_task_limit():
    """On a root host RLIMIT_NPROC does not bind (the kernel exempts a real uid of root): the run's pids
    cgroup must. Without it, 481 threads started here as root (memory stopped them, not a limit)."""
    limits = SandboxLimits(wall_s=20, cpu_s=20, memory_mb=512, max_tasks=16, require_isolation=True)
    result = run_python(THREAD_BOMB, limits=limits)
    assert result.ok and result.isolation["task_limit"], result.stderr
    assert 0 < int(result.stdout) < limits.max_tasks


@requires_every_layer
def test_no_run_cgroup_outlives_its_run():
    parent = task_cgroup.pids_parent()
    for program in ("pass", "while True: pass", THREAD_BOMB):
        run_python(program, limits=SandboxLimits(wall_s=2, cpu_s=2, memory_mb=512, max_tasks=8))
    assert not list(parent.glob(f"{task_cgroup.PREFIX}{os.getpid()}-*"))


def _pids_in(cgroup: Path) -> list[str]:
    """The pids in a cgroup, none if it is gone since it was listed (a run that ended, a probe)."""
    try:
        return (cgroup / "cgroup.procs").read_text().split()
    except FileNotFoundError:
        return []


@requires_every_layer
def test_a_run_left_by_a_killed_host_is_killed_and_removed_once_past_its_deadline():
    """A host killed mid-run leaves its program running (nothing ties the two) in a busy cgroup: a later
    sweep, past the run's wall limit and grace, kills what is left and removes the cgroup; before, it waits."""
    program = "import time; print('up', flush=True); time.sleep(10 ** 6)"
    host = subprocess.Popen([sys.executable, "-c", "from conductor.verifiers.sandbox import SandboxLimits, run_python\n"
                             f"run_python({program!r}, limits=SandboxLimits(wall_s=5, memory_mb=512))"],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    parent = task_cgroup.pids_parent()
    try:
        deadline = time.monotonic() + 60
        while True:
            runs = [run for run in parent.glob(f"{task_cgroup.PREFIX}{host.pid}-*")
                    if not run.name.endswith("-probe")]  # the host's first look at the parent, gone at once
            tasks = [int(pid) for run in runs for pid in _pids_in(run)]
            if len(tasks) >= 2 or time.monotonic() > deadline:  # the bootstrap and the program, pid 1 of its own
                break
            time.sleep(0.1)
    finally:
        host.kill()
        host.wait()
    assert len(runs) == 1 and len(tasks) >= 2
    task_cgroup.sweep_expired(parent)
    assert runs[0].exists() and all(Path(f"/proc/{pid}").exists() for pid in tasks)  # not past its deadline
    foreign = parent / f"{task_cgroup.PREFIX}not-a-run-of-ours-0"  # a name not of the module's form: left alone
    foreign.mkdir()
    try:
        task_cgroup.sweep_expired(parent, now=time.time() + 5 + task_cgroup.GRACE_S + 1)
        assert foreign.exists()
    finally:
        task_cgroup.remove(foreign)
    assert not runs[0].exists() and not any(Path(f"/proc/{pid}/stat").exists() and
                                            Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
                                            for pid in tasks)


@requires_every_layer
def test_concurrent_first_runs_each_get_a_cgroup_and_a_taken_name_is_left_alone():
    """Eight threads making a fresh process's first cgroups at once all get one; a cgroup already named as
    this process would name one (pid reuse, another container) is neither used nor removed."""
    snippet = ("import os, threading\nfrom conductor.verifiers import task_cgroup\n"
               "out = [None] * 8\nbarrier = threading.Barrier(8)\n"
               "def go(i):\n    barrier.wait()\n    out[i] = task_cgroup.create(8, 5)\n"
               "threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]\n"
               "[t.start() for t in threads]; [t.join() for t in threads]\n"
               "print(sum(p is not None for p in out), len(set(out)))\n"
               "[task_cgroup.remove(p) for p in out]\n")
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert done.stdout.split() == ["8", "8"], done.stderr[-2000:]
    parent = task_cgroup.pids_parent()
    theirs = parent / f"{task_cgroup.PREFIX}{os.getpid()}-00000000-{int(time.time()) + 3600}"  # another's, live
    theirs.mkdir()
    try:
        result = run_python("print('ran')", limits=SandboxLimits(wall_s=5, cpu_s=5, memory_mb=512))
        assert result.ok and result.isolation["task_limit"] and theirs.exists()
    finally:
        task_cgroup.remove(theirs)


def test_without_a_cgroup_the_task_limit_is_reported_only_where_rlimit_nproc_binds(monkeypatch):
    monkeypatch.setattr(task_cgroup, "create", lambda max_tasks, wall_s: None)  # a host that gives no cgroup
    result = run_python("print('ran')", limits=SandboxLimits(wall_s=5, cpu_s=5, memory_mb=512))
    if result.isolation.get("user_namespace"):
        assert result.isolation["task_limit"] == (os.getuid() != 0)
    else:
        assert not result.isolation["task_limit"]


def test_subprocess_is_refused():
    result = run_python("import subprocess\nsubprocess.run(['true'])\nprint('ran')", limits=LIMITS)
    assert not result.ok and "ran" not in result.stdout


def test_huge_output_is_capped_while_the_program_runs():
    started = time.monotonic()
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
                        limits=SandboxLimits(wall_s=20, cpu_s=20, memory_mb=512, output_mb=1))
    assert result.output_truncated and not result.ok and len(result.stdout) == 1024 * 1024
    assert time.monotonic() - started < 10  # stopped at the cap, not at the wall limit


def test_secrets_are_not_visible(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    secret_file = tmp_path / "credentials"
    secret_file.write_text("aws_secret_access_key=xyz")
    program = f"import os\nprint(sorted(os.environ))\nprint(open({str(secret_file)!r}).read())"
    result = run_python(program, limits=LIMITS)
    assert "OPENAI_API_KEY" not in result.stdout and "sk-secret" not in result.stdout + result.stderr
    assert "xyz" not in result.stdout and "PermissionError" in result.stderr


@requires_every_layer
def test_the_work_dir_is_writable_and_private():
    result = run_python("open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())", limits=LIMITS)
    assert result.ok and result.stdout.strip() == "ok"


def test_host_process_is_unharmed():
    names = ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NOFILE")
    before = {name: resource.getrlimit(getattr(resource, name)) for name in names}
    threads_before, fds_before = threading.active_count(), set(os.listdir("/proc/self/fd"))
    for program in ("while True: pass", "import os\nos.fork()", "x = bytearray(8 * 1024 ** 3)"):
        run_python(program, limits=LIMITS)
    after = {name: resource.getrlimit(getattr(resource, name)) for name in before}
    assert before == after and threading.active_count() == threads_before
    assert set(os.listdir("/proc/self/fd")) == fds_before
    server = socket.socket()  # the host can still use the network stack
    server.bind(("127.0.0.1", 0))
    server.listen()
    socket.create_connection(server.getsockname(), timeout=1).close()
    server.close()


HUMANEVAL_TASK = Task(id="he/add", domain="code", prompt="Write add(a, b).", answer="", verifier="humaneval",
                      meta={"prompt": "def add(a, b):\n    \"\"\"Sum.\"\"\"\n", "entry_point": "add",
                            "test": "def check(f):\n    assert f(2, 3) == 5\n"})
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"


def on_a_host_without_user_namespaces(snippet: str) -> dict:
    """Run ``snippet`` (which prints one JSON line) where the kernel refuses user namespaces."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "tests.support.without_user_namespaces", "-c", snippet],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_missing_isolation_is_refused_as_an_infrastructure_error_never_a_wrong_answer():
    """Under ``require_code_isolation=true`` a host without user namespaces refuses to run the code:
    a verdict with ``infra_error`` (not ``correct=False`` alone), the missing layers named, the program
    never started. Without the requirement the same code runs and the verdict reports the weaker layers."""
    snippet = """
import json
from conductor.config import VerifierConfig
from conductor.verifiers.sandbox import SandboxLimits, run_python
from conductor.verifiers.verify import verify
from tests.test_sandbox import HUMANEVAL_TASK, RIGHT
required = verify(HUMANEVAL_TASK, RIGHT, VerifierConfig(code_timeout_s=5, require_code_isolation=True))
reported = verify(HUMANEVAL_TASK, RIGHT, VerifierConfig(code_timeout_s=5, require_code_isolation=False))
ran = run_python("open('ran', 'w'); print('ran')", limits=SandboxLimits(wall_s=5, require_isolation=True))
print(json.dumps({"required": [required.correct, required.infra_error, dict(required.isolation)],
                  "reported": [reported.correct, reported.infra_error, dict(reported.isolation)],
                  "ran": [ran.stdout, ran.returncode, ran.infra_error]}))
"""
    out = on_a_host_without_user_namespaces(snippet)
    correct, infra_error, isolation = out["required"]
    assert correct is False and infra_error.startswith("refused: isolation layers unavailable")
    assert "user_namespace" in infra_error and "private_disk" in infra_error
    assert isolation["user_namespace"] is False and isolation["seccomp"] is True
    correct, infra_error, isolation = out["reported"]
    assert correct is True and infra_error is None and isolation["pid_namespace"] is False
    stdout, returncode, infra_error = out["ran"]
    assert stdout == "" and returncode == 97 and infra_error


@requires_every_layer
def test_a_verdict_carries_the_layers_applied():
    verdict = verify(HUMANEVAL_TASK, RIGHT, VerifierConfig(code_timeout_s=5, require_code_isolation=True))
    assert verdict.correct and verdict.infra_error is None and dict(verdict.isolation) == host_isolation()


def test_a_work_dir_too_deep_for_rmtree_is_still_removed(tmp_path):
    """Without the private tmpfs a program's tree lands on the host disk; 1,500 levels made shutil.rmtree
    raise RecursionError out of run_python and leave the tree behind."""
    import os

    from conductor.verifiers.sandbox import _remove

    workdir = tmp_path / "conductor-sbx-deep"
    workdir.mkdir()
    fd = os.open(workdir, os.O_RDONLY)
    for _ in range(1500):  # relative to a descriptor: no path grows past PATH_MAX
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    _remove(str(workdir))
    assert not workdir.exists()


def test_where_landlock_is_missing_code_is_refused_unless_the_config_allows_it(tmp_path):
    """Landlock is the one layer that stops reads (a kernel before 5.13, or one without the LSM, has none):
    without it the program read the host's files and a parent's environment. Refused by default; run, and
    reported, when the user allows it. Its absence is a real kernel refusal here (a seccomp filter makes
    ``landlock_create_ruleset`` fail as an old kernel does), not a mock."""
    snippet = (
        "import ctypes, errno, json, sys\nimport pyseccomp as seccomp\n"
        "rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)\n"
        "rules.add_rule(seccomp.ERRNO(errno.ENOSYS), 'landlock_create_ruleset')\n"
        "ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)\nrules.load()\n"
        "from dataclasses import asdict\nfrom conductor.verifiers.sandbox import SandboxLimits, run_python\n"
        "program = sys.stdin.read()\n"
        "print(json.dumps([asdict(run_python(program, limits=SandboxLimits(wall_s=10, cpu_s=10, "
        "require_confined_reads=confined))) for confined in (True, False)]))\n")
    secret = "s3cr3t-" + uuid.uuid4().hex
    (tmp_path / "credentials").write_text(secret)
    (tmp_path / "credentials").chmod(0o644)
    program = f"print(open({str(tmp_path / 'credentials')!r}).read())"
    done = subprocess.run([sys.executable, "-c", snippet], input=program, capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    refused, allowed = (SandboxResult(**run) for run in json.loads(done.stdout))
    assert refused.infra_error.startswith("refused: Landlock is unavailable") and secret not in refused.stdout
    assert not allowed.infra_error and not allowed.isolation["landlock_filesystem"]  # run, and said so
