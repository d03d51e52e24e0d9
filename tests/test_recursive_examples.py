"""The recursive round in the SFT warm start (conductor/recursive_examples.py, ``sft.recursive_share``): its
prompt is the one the episode builds, its stand-in final response is right or wrong by a fair draw, and its
targets accept or write a workflow, both parsable as a recursive turn; with no recursive share the warm
start's examples are drawn exactly as before."""

import random

import pytest
from transformers import AutoTokenizer

from conductor.config import SftConfig
from conductor.config_loader import load_config
from conductor.example_workflows import random_workflow
from conductor.prompt_builder import PromptBuilder
from conductor.prompts import recursive_messages
from conductor.recursive_examples import ACCEPT, recursive_prompt_ids, stand_in_response
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.tasks.toy import toy_tasks
from conductor.verifiers.verify import verify
from conductor.workflow import parse_workflow
from learner.sft import _Examples
from learner.tiny_policy import build_tiny_policy


def test_a_stand_in_response_is_right_or_wrong_by_a_fair_draw():
    rng, tasks = random.Random(0), toy_tasks(20, seed=0)
    workers = load_preset(load_config(None, []).simulator).workers
    verdicts = [verify(task, stand_in_response(task, rng, workers)).correct for task in tasks]
    assert 0.3 < sum(verdicts) / len(verdicts) < 0.7  # 60 fair draws: outside this about once in 50


def test_the_recursive_prompt_is_the_one_the_episode_builds(tokenizer):
    config = load_config(None, [])
    config = config.model_copy(update={"pool": simulated_pool_config(load_preset(config.simulator), "http://x/v1")})
    builder = PromptBuilder(config, tokenizer)
    task, roster = toy_tasks(1)[0], builder.roster()
    [ids] = recursive_prompt_ids(builder, [task], [roster], ["model_id = [1]"], random.Random(3))
    response = stand_in_response(task, random.Random(3))
    messages = recursive_messages(task.prompt, roster, builder.fewshot, previous_plan="model_id = [1]",
                                  final_response=response, max_steps=config.executor.max_steps)
    expected = builder.prompt_ids(messages)
    assert ids == expected
    with pytest.raises(ValueError, match="1 tasks, 1 rosters and 2 previous plans"):
        recursive_prompt_ids(builder, [task], [roster], ["a", "b"], random.Random(3))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(build_tiny_policy(tmp_path_factory.mktemp("tiny") / "policy"))


def examples_of(tokenizer, settings, recursive_prompts, draws=200):
    prompts = [[1, n] for n in range(4)]
    examples, rng = _Examples(prompts, None, None, 3, settings, None, recursive_prompts), random.Random(5)
    drawn = []
    for _ in range(draws):
        index = examples.prompt(rng)
        recursive = examples.asks_recursive(rng)
        target = tokenizer.decode(examples.target(index, tokenizer, rng, 0, recursive)[:-1])
        drawn.append((examples.prompt_ids(index, recursive), target, recursive))
    return drawn


def test_recursive_examples_accept_or_write_a_workflow_after_the_recursive_prompt(tokenizer):
    recursive_prompts = [[2, n] for n in range(4)]
    settings = SftConfig(shapes={"solve": 1.0, "verify": 1.0}, recursive_share=0.5, recursive_accept=0.5)
    drawn = examples_of(tokenizer, settings, recursive_prompts)
    recursive = [(prompt, target) for prompt, target, asked in drawn if asked]
    root = [(prompt, target) for prompt, target, asked in drawn if not asked]
    assert 60 < len(recursive) < 140 and all(prompt[0] == 2 for prompt, _ in recursive)
    assert all(prompt[0] == 1 for prompt, _ in root)
    accepts = [parse_workflow(t, num_workers=3, max_steps=5, recursive_round=True).accepts_previous
               for _, t in recursive]
    assert 0.25 < sum(accepts) / len(accepts) < 0.75  # both answers, about as often
    assert all(target != ACCEPT and parse_workflow(target, num_workers=3, max_steps=5).steps for _, target in root)


def test_without_a_recursive_share_the_examples_are_drawn_as_before(tokenizer):
    """The draws before recursive examples existed: a prompt, then a workflow, nothing in between."""
    settings = SftConfig(shapes={"solve": 1.0, "verify": 1.0})
    rng, before = random.Random(5), []
    for _ in range(200):
        index = rng.randrange(4)
        before.append(([1, index], random_workflow(settings.shapes, 3, rng).render(), False))
    assert examples_of(tokenizer, settings, [[2, n] for n in range(4)]) == before
