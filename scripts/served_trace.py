"""Ask a running endpoint one held-out question of each domain, trace on, and write what came back: the
answer, the usage and the Conductor's trace (its own workflow text, each step's worker, subtask and output).
This is how docs/results/smollm2-paper7/trace.json was made:

    CONDUCTOR_API_KEYS=sk-local-1 .venv/bin/python -m cluster.serve --config configs/serve-smollm2.yaml &
    CONDUCTOR_API_KEY=sk-local-1 .venv/bin/python scripts/served_trace.py --config configs/smollm2-paper7.yaml \
        --model conductor-ultra --out docs/results/smollm2-paper7/trace.json

The questions are the first of each domain in the config's held-out split (train.heldout_questions, seed),
so the trace shows questions the policy was never trained or validated on. The caller's key is read from
the environment and never written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import openai

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cluster.rollouts import tasks_for  # noqa: E402
from conductor.config_loader import load_config  # noqa: E402
from conductor.tasks.splits import configured_splits  # noqa: E402
from conductor.tasks.task import Task  # noqa: E402


def first_of_each_domain(config_path: Path) -> list[Task]:
    config = load_config(config_path)
    train = config.train
    heldout = configured_splits(tasks_for(config), train).heldout
    chosen = {}
    for task in heldout:
        chosen.setdefault(task.domain, task)
    return [chosen[domain] for domain in sorted(chosen)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="the training config: its held-out split")
    parser.add_argument("--model", default="conductor-ultra")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    key = os.environ.get("CONDUCTOR_API_KEY")
    if not key:
        parser.error("set CONDUCTOR_API_KEY to one of the endpoint's caller keys")
    client = openai.OpenAI(base_url=args.base_url, api_key=key, max_retries=0, timeout=300)
    records = []
    for task in first_of_each_domain(args.config):
        reply = client.chat.completions.create(model=args.model, messages=[{"role": "user", "content": task.prompt}],
                                               extra_body={"conductor": {"trace": True}})
        extra = reply.model_extra or {}
        records.append({"domain": task.domain, "question": task.prompt, "answer": reply.choices[0].message.content,
                        "usage": reply.usage.model_dump(), "conductor_trace": extra.get("conductor_trace")})
        print(f"{task.domain}: {extra.get('conductor_trace', {}).get('rounds', [{}])[0].get('conductor_output')!r}")
    args.out.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
