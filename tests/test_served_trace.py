"""scripts/served_trace.py asks the endpoint held-out questions only: one per domain, none the policy was
trained or validated on."""

import importlib.util
from pathlib import Path

from cluster.rollouts import tasks_for
from conductor.config_loader import load_config
from conductor.tasks.splits import configured_splits

REPO = Path(__file__).resolve().parents[1]


def test_the_traced_questions_are_the_first_held_out_question_of_each_domain():
    spec = importlib.util.spec_from_file_location("served_trace", REPO / "scripts" / "served_trace.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    config_path = REPO / "configs" / "smollm2-paper7.yaml"
    chosen = script.first_of_each_domain(config_path)

    config = load_config(config_path)
    splits = configured_splits(tasks_for(config), config.train)
    assert [task.domain for task in chosen] == ["code", "math500", "mmlu"]
    heldout_ids = [task.id for task in splits.heldout]
    assert all(task.id in heldout_ids for task in chosen)
    assert not {task.id for task in chosen} & {task.id for task in splits.train + splits.val}
    for task in chosen:
        first = next(t for t in splits.heldout if t.domain == task.domain)
        assert task.id == first.id
