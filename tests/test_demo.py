import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_demo_runs_end_to_end_and_prints_the_trace():
    result = subprocess.run([sys.executable, "-m", "cluster.demo", "--config", "configs/demo.yaml"], cwd=REPO,
                            capture_output=True, text=True, timeout=120,
                            env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Round 0" in out and "Round 1" in out and "accepted the previous answer" in out
    assert "0 (planner)" in out and "2 (checker)" in out
    assert "correct=True" in out and "reward=1.0" in out


def test_demo_rejects_a_bad_override():
    result = subprocess.run([sys.executable, "-m", "cluster.demo", "--set", "executor.max_steps=-1"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "executor.max_steps" in result.stderr
