"""The shared style: ruff, with the rules in pyproject.toml, passes on the whole repository."""

import subprocess
import sys
from pathlib import Path


def test_ruff_passes():
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(root)], capture_output=True,
                            text=True, timeout=120, cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
