"""Where a toy policy routes each held-out question, and what its plan line said when it routed wrong:

    .venv/bin/python scripts/toy_plan_lines.py runs/train-toy/policy [--set seed=3 ...]

Greedy decoding, as validation and the held-out evaluation decode. Prints, per domain, how many questions
went to the domain's specialist, then each misrouted question's opening and the completion's first line.
This is how docs/experiments.md "#toy-plan-drift" found that a kept policy restated another domain's words.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cluster.rollouts import tasks_for  # noqa: E402
from conductor.config_loader import load_config  # noqa: E402
from conductor.prompt_builder import PromptBuilder  # noqa: E402
from conductor.simulator.presets import load_preset, simulated_pool_config  # noqa: E402
from conductor.tasks.splits import configured_splits  # noqa: E402
from conductor.workflow import WorkflowParseError, parse_workflow  # noqa: E402


def main() -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("policy", help="an HF policy directory (a run's policy/ or sft/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="a dotted config override")
    args = parser.parse_args()
    config = load_config(REPO / "configs" / "train-toy.yaml", args.overrides)
    preset = load_preset(config.simulator)
    config = config.model_copy(update={"pool": simulated_pool_config(preset, "http://127.0.0.1:1/v1")})
    specialist = {w.name: max(w.accuracy, key=w.accuracy.get) for w in preset.workers}
    tokenizer = AutoTokenizer.from_pretrained(args.policy)
    model = AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32).eval()
    builder = PromptBuilder(config, tokenizer, seed=config.seed)
    roster, end = builder.roster(), tokenizer.convert_tokens_to_ids("<|im_end|>")
    counts: collections.Counter = collections.Counter()
    for task in configured_splits(tasks_for(config), config.train).heldout:
        prompt = torch.tensor([builder.task_prompt_ids(task, roster)])
        with torch.no_grad():
            out = model.generate(prompt, do_sample=False, max_new_tokens=config.rollout.max_new_tokens,
                                 eos_token_id=end, pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)
        try:
            workflow = parse_workflow(text, num_workers=len(roster), max_steps=config.executor.max_steps)
            routed = specialist[roster.worker_ids[workflow.steps[-1].worker]]
        except WorkflowParseError:
            routed = "no workflow"
        counts[task.domain, routed == task.domain] += 1
        if routed != task.domain:
            print(f"{task.domain} -> {routed}: {task.prompt.split(chr(10))[0][:40]!r} wrote {text.split(chr(10))[0]!r}")
    for domain in sorted({domain for domain, _ in counts}):
        print(f"{domain}: {counts[domain, True]} of {counts[domain, True] + counts[domain, False]} to its specialist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
