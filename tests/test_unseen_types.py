"""The paper-7 preset's unseen task types (issue 36, scope 3; conductor/simulator/unseen.py): the seen tasks,
and every worker's calibrated answer on them, stay exactly what the committed paper-7 results were made with;
nothing that trains reads an unseen item; each worker scores its assumed accuracy; the Conductor sees the
question and no label."""

import hashlib
import json
from collections import Counter

import pytest

from conductor.config import SimulatorConfig, VerifierConfig
from conductor.config_loader import load_config
from conductor.evaluation.paper_reference import TABLE2, UNSEEN_DOMAINS, UNSEEN_LABELS
from conductor.prompt_builder import PromptBuilder
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.simulator.unseen import left_out, unseen_accuracy
from conductor.tasks.splits import configured_splits
from conductor.verifiers.verify import verify

# Pinned at c369f48, before the unseen types were added to conductor/simulator/presets.py: the 1,264 seen
# tasks (id, domain, prompt, answer, verifier) and each worker's solved-or-not on each of them.
SEEN_TASKS_SHA256 = "2659f65a41c9075697ac1d5da531e707e48f87c0b564c8d2fdc2bd5647492b64"
SEEN_SOLVED_SHA256 = "e49ef69a87b6cbaaab4aed61849d07d98d3fdcfaec5da25fd6decd8d1ce8b035"
UNSEEN_SUBJECTS = {"college_physics", "conceptual_physics", "high_school_physics", "college_chemistry",
                   "high_school_chemistry"}


@pytest.fixture(scope="module")
def paper7(shared_data):
    config = SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=600)
    preset = load_preset(config)
    return preset, Oracle(preset, config)


def test_the_seen_tasks_and_their_calibration_are_unchanged(paper7):
    preset, oracle = paper7
    tasks = hashlib.sha256()
    for t in preset.tasks:
        tasks.update(json.dumps([t.id, t.domain, t.prompt, t.answer, t.verifier], ensure_ascii=False).encode()
                     + b"\n")
    assert len(preset.tasks) == 1264 and tasks.hexdigest() == SEEN_TASKS_SHA256
    solved = hashlib.sha256()
    for w in preset.workers:
        for t in preset.tasks:
            solved.update(f"{w.name}|{t.id}|{int(oracle.base_correct[(w.name, t.id)])}\n".encode())
    assert solved.hexdigest() == SEEN_SOLVED_SHA256


def test_three_unseen_types_of_the_planned_sizes(paper7):
    preset, _ = paper7
    sizes = Counter(t.domain for t in preset.unseen)
    assert sizes == {"aime": 30, "physchem": 780, "mbpp": 427 - len(left_out()["mbpp"])}
    assert {t.verifier for t in preset.unseen if t.domain == "mbpp"} == {"mbpp"}
    assert {t.meta["subject"] for t in preset.unseen if t.domain == "physchem"} == UNSEEN_SUBJECTS
    assert len({t.id for t in preset.unseen}) == len(preset.unseen)


def test_no_unseen_item_or_subject_is_in_any_training_pool(paper7, shared_data):
    preset, oracle = paper7
    seen_ids, seen_prompts = {t.id for t in preset.tasks}, {t.prompt for t in preset.tasks}
    assert not any(t.id in seen_ids or t.prompt in seen_prompts for t in preset.unseen)
    assert not {t.meta.get("subject") for t in preset.tasks if t.domain == "mmlu"} & UNSEEN_SUBJECTS
    # however many MMLU rows a preset takes, the unseen subjects stay out
    every_row = load_preset(SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=5000))
    mmlu = [t for t in every_row.tasks if t.domain == "mmlu"]
    assert len(mmlu) == 3018 - 791 and not {t.meta["subject"] for t in mmlu} & UNSEEN_SUBJECTS
    # every prompt is distinct, and the simulator finds each task from its prompt, as a worker sees it
    known = preset.tasks + preset.unseen
    assert len({t.prompt for t in known}) == len(known)
    assert all(oracle.find_task([{"role": "user", "content": f"Question:\n{t.prompt}\n\nSolve it."}]) is t
               for t in known)


def test_training_and_its_tokenizer_corpus_read_no_unseen_prompt(shared_data):
    from cluster.rollouts import tasks_for

    config = load_config("configs/train-paper7.yaml", [f"simulator.data_dir={shared_data}"])
    train = config.train
    splits = configured_splits(tasks_for(config), train)
    unseen = {t.prompt for t in load_preset(config.simulator).unseen}
    assert len(splits.train) == 664 and unseen
    for split in (splits.train, splits.val, splits.heldout):
        assert not unseen & {t.prompt for t in split}


def test_each_worker_scores_its_assumed_accuracy_and_the_best_the_papers(paper7):
    preset, oracle = paper7
    workers = {w.name: w for w in preset.workers}
    assumed = unseen_accuracy({name: w.accuracy for name, w in workers.items()})
    for domain in UNSEEN_DOMAINS:
        items = [t for t in preset.unseen if t.domain == domain]
        measured = {name: sum(oracle.base_correct[(name, t.id)] for t in items) / len(items) for name in workers}
        for worker, accuracy in measured.items():
            assert workers[worker].accuracy[domain] == assumed[worker][domain]
            assert accuracy == round(assumed[worker][domain] * len(items)) / len(items)
        assert abs(100 * max(measured.values()) - TABLE2["best_single"][domain]) <= 50 / len(items)


def test_the_calibration_rule_keeps_each_workers_ratio_to_the_best():
    seen = {"a": {"math500": 0.8, "mmlu": 0.9, "code": 0.5}, "b": {"math500": 0.4, "mmlu": 0.45, "code": 0.25}}
    assumed = unseen_accuracy(seen)
    assert assumed["a"] == pytest.approx({k: TABLE2["best_single"][k] / 100 for k in UNSEEN_DOMAINS})
    assert assumed["b"] == pytest.approx({k: TABLE2["best_single"][k] / 200 for k in UNSEEN_DOMAINS})


class RecordingTokenizer:
    """Keeps the messages a prompt is built from."""

    def __init__(self):
        self.messages = []

    def apply_chat_template(self, messages, **_):
        self.messages.append(messages)
        return []


def test_the_conductor_is_shown_the_question_and_no_domain_label(paper7, shared_data):
    preset, _ = paper7
    config = load_config("configs/train-paper7.yaml", [f"simulator.data_dir={shared_data}"])
    config = config.model_copy(update={"pool": simulated_pool_config(preset, "http://127.0.0.1:9/v1")})
    tokenizer = RecordingTokenizer()
    builder = PromptBuilder(config, tokenizer)
    labels = [*UNSEEN_DOMAINS, *UNSEEN_LABELS.values(), "AIME", "GPQA", "BigCodeBench", "MBPP", "physchem"]
    for domain in UNSEEN_DOMAINS:
        task = next(t for t in preset.unseen if t.domain == domain)
        builder.task_prompt_ids(task, builder.roster())
        text = "\n".join(m["content"] for m in tokenizer.messages[-1])
        assert task.prompt in text
        around = text.replace(task.prompt, "")
        assert not [label for label in labels if label.lower() in around.lower()]


def test_a_workers_reply_on_an_unseen_item_verifies_as_the_oracle_decided(paper7):
    """Through the real verifiers (the MBPP asserts in the sandbox): a solver's reply is right, a non-solver's wrong."""
    preset, oracle = paper7
    verdicts = set()
    for domain in UNSEEN_DOMAINS:
        for task in [t for t in preset.unseen if t.domain == domain][:3]:
            for worker in ("gpt-5", "gemma-3-27b"):
                reply = oracle.answer(worker, [{"role": "user", "content": f"Question:\n{task.prompt}\n\nSolve it."}])
                assert reply.task_id == task.id and reply.correct == oracle.base_correct[(worker, task.id)]
                assert verify(task, reply.text, VerifierConfig(require_code_isolation=True)).correct == reply.correct
                verdicts.add((domain, reply.correct))
    assert verdicts == {(domain, right) for domain in UNSEEN_DOMAINS for right in (True, False)}
