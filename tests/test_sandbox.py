"""The code sandbox refuses or stops each attack, and the test process is unharmed."""

import resource
import socket
import threading

import pytest

from conductor.verifiers.sandbox import SandboxLimits, run_python

LIMITS = SandboxLimits(wall_s=3, cpu_s=3, memory_mb=512, require_isolation=True)


def test_normal_program_runs_with_stdin_and_full_isolation():
    result = run_python("print(input()[::-1])", stdin="abc\n", limits=LIMITS)
    assert result.ok and result.stdout.strip() == "cba"
    assert result.isolation == {"network": True, "filesystem": True, "processes": True}


def test_infinite_loop_is_stopped():
    result = run_python("while True:\n    pass", limits=LIMITS)
    assert result.timed_out and not result.ok and result.duration_s < LIMITS.wall_s + 2


def test_memory_bomb_is_stopped():
    result = run_python("x = bytearray(8 * 1024 ** 3)\nprint('allocated')", limits=LIMITS)
    assert not result.ok and "allocated" not in result.stdout and "MemoryError" in result.stderr


def test_fork_bomb_is_refused():
    result = run_python("import os\nwhile True:\n    os.fork()", limits=LIMITS)
    assert not result.ok and "PermissionError" in result.stderr


def test_subprocess_is_refused():
    result = run_python("import subprocess\nsubprocess.run(['true'])\nprint('ran')", limits=LIMITS)
    assert not result.ok and "ran" not in result.stdout


def test_socket_to_loopback_is_refused():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    result = run_python(program, limits=LIMITS)
    assert not result.ok and "connected" not in result.stdout
    with pytest.raises(socket.timeout):
        server.accept()  # nothing ever reached the listening server
    server.close()


def test_write_outside_the_temp_dir_is_refused(tmp_path):
    target = tmp_path / "escape.txt"
    result = run_python(f"open({str(target)!r}, 'w').write('x')\nprint('wrote')", limits=LIMITS)
    assert not result.ok and "PermissionError" in result.stderr and not target.exists()
    inside = run_python("open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())", limits=LIMITS)
    assert inside.ok and inside.stdout.strip() == "ok"


def test_secrets_are_not_visible(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    secret_file = tmp_path / "credentials"
    secret_file.write_text("aws_secret_access_key=xyz")
    program = f"import os\nprint(sorted(os.environ))\nprint(open({str(secret_file)!r}).read())"
    result = run_python(program, limits=LIMITS)
    assert "OPENAI_API_KEY" not in result.stdout and "sk-secret" not in result.stdout + result.stderr
    assert "xyz" not in result.stdout and "PermissionError" in result.stderr


def test_huge_output_is_capped():
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
                        limits=SandboxLimits(wall_s=5, cpu_s=5, memory_mb=512, output_mb=1))
    assert not result.ok and len(result.stdout) <= 1024 * 1024


def test_host_process_is_unharmed():
    before = {name: resource.getrlimit(getattr(resource, name)) for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NOFILE")}
    threads_before = threading.active_count()
    for program in ("while True: pass", "import os\nos.fork()", "x = bytearray(8 * 1024 ** 3)"):
        run_python(program, limits=LIMITS)
    after = {name: resource.getrlimit(getattr(resource, name)) for name in before}
    assert before == after and threading.active_count() == threads_before
    probe = socket.create_connection  # the host can still use the network stack
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    probe(server.getsockname(), timeout=1).close()
    server.close()
