"""The SFT warm start's two phases: prompt-and-target loss for ``steps``, then ``target_only_steps`` on the
targets alone, which is exactly a target-only warm start of its own (fresh optimizer, schedule, seed)."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conductor.config import SftConfig
from conductor.prompt_builder import chat_ids
from learner.sft import sft_warm_start
from learner.tiny_policy import build_tiny_policy


def tiny(tmp_path):
    path = build_tiny_policy(tmp_path / "policy")
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": f"What is {n} + {n}?"}]) for n in range(4)]
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), tokenizer, prompts


def train(model, tokenizer, prompts, **settings):
    model = copy.deepcopy(model)
    config = SftConfig(batch_size=2, warmup_steps=1, shapes={"solve": 1.0, "verify": 1.0}, **settings)
    return model, sft_warm_start(model, tokenizer, prompts, 3, config, seed=7)


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_the_target_only_phase_is_a_target_only_warm_start(tmp_path):
    model, tokenizer, prompts = tiny(tmp_path)
    second, second_losses = train(model, tokenizer, prompts, steps=0, target_only_steps=3)
    alone, alone_losses = train(model, tokenizer, prompts, steps=3, prompt_loss=False)
    assert second_losses == alone_losses and same_weights(second, alone)


def test_both_phases_run_in_order(tmp_path):
    model, tokenizer, prompts = tiny(tmp_path)
    both, both_losses = train(model, tokenizer, prompts, steps=2, target_only_steps=2)
    first, first_losses = train(model, tokenizer, prompts, steps=2)
    assert len(both_losses) == 4 and both_losses[:2] == first_losses
    assert not same_weights(both, first)  # the second phase trained on
    with_prompt, _ = train(model, tokenizer, prompts, steps=2, prompt_loss=True)
    targets_only, _ = train(model, tokenizer, prompts, steps=2, prompt_loss=False)
    assert not same_weights(with_prompt, targets_only)  # the loss masks differ


def test_shared_prompt_targets_give_the_plain_target_loss(tmp_path):
    """k targets per prompt, the prompt run once: the same mean target-token loss as the plain forward of
    each (prompt, target) row."""
    import random

    from learner.sft import _Examples, _shared_prompt_loss

    model, tokenizer, prompts = tiny(tmp_path)
    config = SftConfig(batch_size=4, targets_per_prompt=2, prompt_loss=False, shapes={"solve": 1.0, "verify": 1.0})
    examples = _Examples(prompts, None, None, 3, config)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    shared = _shared_prompt_loss(model, tokenizer, examples, config, random.Random(3), end, end)
    rng, rows = random.Random(3), []
    for _ in range(2):
        index = examples.prompt(rng)
        rows += [(list(prompts[index]), examples.target(index, tokenizer, rng, end)) for _ in range(2)]
    width = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((4, width), end, dtype=torch.long)
    labels = torch.full((4, width), -100, dtype=torch.long)
    mask = torch.zeros((4, width), dtype=torch.long)
    for i, (prompt, target) in enumerate(rows):
        ids[i, :len(prompt) + len(target)] = torch.tensor(prompt + target)
        labels[i, len(prompt):len(prompt) + len(target)] = torch.tensor(target)
        mask[i, :len(prompt) + len(target)] = 1
    plain = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert torch.allclose(shared, plain, atol=1e-5)


def test_shared_prompt_targets_need_target_only_loss():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="targets_per_prompt"):
        SftConfig(targets_per_prompt=4, prompt_loss=True, steps=10)
    with pytest.raises(ValidationError, match="multiple"):
        SftConfig(targets_per_prompt=3, prompt_loss=False, batch_size=16)


def test_worker_weights_pick_each_prompts_workers(tmp_path):
    """A prompt whose weights name one worker gets examples naming that worker alone; each prompt keeps its
    own row; and without weights the seeded examples are the uniform ones they always were."""
    import random

    from conductor.workflow import parse_workflow
    from learner.sft import _Examples

    _, tokenizer, prompts = tiny(tmp_path)
    config = SftConfig(shapes={"solve": 1.0, "verify": 1.0})
    weighted = _Examples(prompts[:2], [[0, 0, 1], [1, 0, 0]], None, 3, config)
    rng, seen = random.Random(5), {0: set(), 1: set()}
    for _ in range(40):
        index = weighted.prompt(rng)
        workflow = parse_workflow(tokenizer.decode(weighted.target(index, tokenizer, rng, 0)[:-1]), num_workers=3,
                                  max_steps=5)
        seen[index] |= {step.worker for step in workflow.steps}
    assert seen == {0: {2}, 1: {0}}
    uniform, rng = _Examples(prompts, None, None, 3, config), random.Random(5)
    workers = set()
    for _ in range(40):
        target = tokenizer.decode(uniform.target(uniform.prompt(rng), tokenizer, rng, 0)[:-1])
        workers |= {step.worker for step in parse_workflow(target, num_workers=3, max_steps=5).steps}
    assert workers == {0, 1, 2}


def test_worker_weights_must_match_the_prompts(tmp_path):
    import pytest

    model, tokenizer, prompts = tiny(tmp_path)
    with pytest.raises(ValueError, match="1 rows of worker weights for 4 prompts"):
        sft_warm_start(model, tokenizer, prompts, 3, SftConfig(steps=1), worker_weights=[[1, 1, 1]])


def test_menus_draw_each_prompts_whole_workflows(tmp_path):
    """A prompt's menu gives its examples, shapes and workers both: here one prompt's menu is a single
    solver or a fixed pair, the other's one worker alone; a prompt with an empty menu (a roster that shows
    none of its workers) falls back to the shapes and uniform workers."""
    import random

    import pytest

    from conductor.workflow import parse_workflow
    from learner.sft import _Examples

    model, tokenizer, prompts = tiny(tmp_path)
    config = SftConfig(shapes={"solve": 1.0, "verify": 1.0})
    examples = _Examples(prompts[:3], None, [[((2,), 1.0), ((0, 1), 1.0)], [((1,), 1.0)], []], 3, config)
    rng, seen = random.Random(3), {0: set(), 1: set(), 2: set()}
    for _ in range(60):
        index = examples.prompt(rng)
        target = tokenizer.decode(examples.target(index, tokenizer, rng, 0)[:-1])
        seen[index].add(tuple(step.worker for step in parse_workflow(target, num_workers=3, max_steps=5).steps))
    assert seen[0] == {(2,), (0, 1)} and seen[1] == {(1,)}
    assert len(seen[2]) > 2  # uniform workers, both shapes
    with pytest.raises(ValueError, match="2 menus for 4 prompts"):
        sft_warm_start(model, tokenizer, prompts, 3, SftConfig(steps=1), menus=[[((0,), 1.0)]] * 2)
    with pytest.raises(ValueError, match="give one"):
        sft_warm_start(model, tokenizer, prompts, 3, SftConfig(steps=1), worker_weights=[[1, 1, 1]] * 4,
                       menus=[[((0,), 1.0)]] * 4)


def test_plans_come_before_each_prompts_example_workflows(tmp_path):
    """``sft.plan: restate``: each example starts with its own prompt's plan line, then a workflow that still
    parses (plan lines are free text before the lists), with the workers as uniform as without a plan."""
    import random

    import pytest

    from conductor.example_workflows import restating_plan
    from conductor.workflow import parse_workflow
    from learner.sft import _Examples

    model, tokenizer, prompts = tiny(tmp_path)
    plans = [restating_plan(f"What is {n} + {n}?", 3) for n in range(4)]
    examples, rng = _Examples(prompts, None, None, 3, SftConfig(shapes={"solve": 1.0}), plans), random.Random(2)
    workers = set()
    for _ in range(40):
        index = examples.prompt(rng)
        text = tokenizer.decode(examples.target(index, tokenizer, rng, 0)[:-1])
        assert text.startswith(f"The question asks: What is {index}\nmodel_id = [")
        workers |= {step.worker for step in parse_workflow(text, num_workers=3, max_steps=5).steps}
    assert workers == {0, 1, 2}
    with pytest.raises(ValueError, match="2 plans for 4 prompts"):
        sft_warm_start(model, tokenizer, prompts, 3, SftConfig(steps=1), plans=plans[:2])


def test_the_recursive_phase_comes_after_a_root_warm_start_left_as_it_was(tmp_path):
    """``sft.recursive_steps``: the root's phases draw and train exactly as without the round, then a last
    phase trains on the recursive prompts alone."""
    model, tokenizer, prompts = tiny(tmp_path)
    recursive_prompts = [prompt + chat_ids(tokenizer, [{"role": "user", "content": "Accept?"}]) for prompt in prompts]
    config = SftConfig(batch_size=2, warmup_steps=1, shapes={"solve": 1.0, "verify": 1.0}, steps=2,
                       target_only_steps=1, recursive_steps=2)
    with_round = copy.deepcopy(model)
    losses = sft_warm_start(with_round, tokenizer, prompts, 3, config, seed=7, recursive_prompts=recursive_prompts)
    root, root_losses = train(model, tokenizer, prompts, steps=2, target_only_steps=1)
    assert len(losses) == 5 and losses[:3] == root_losses
    assert not same_weights(with_round, root)
    with pytest.raises(ValueError, match="needs the recursive-round prompts"):
        sft_warm_start(copy.deepcopy(model), tokenizer, prompts, 3, config, seed=7)
    gentler = copy.deepcopy(model)
    slow_losses = sft_warm_start(gentler, tokenizer, prompts, 3, config.model_copy(update={"recursive_lr": 1e-5}),
                                 seed=7, recursive_prompts=recursive_prompts)
    assert slow_losses[:4] == losses[:4] and slow_losses[4] != losses[4]  # the phase's second step, at its own lr
    replayed = copy.deepcopy(model)
    replay = config.model_copy(update={"recursive_phase_share": 0.5})
    replay_losses = sft_warm_start(replayed, tokenizer, prompts, 3, replay, seed=7, recursive_prompts=recursive_prompts)
    assert replay_losses[:3] == losses[:3] and replay_losses[3:] != losses[3:]  # root examples drawn into the phase


def test_the_recursive_phase_draws_root_examples_at_its_share(tmp_path, monkeypatch):
    """``sft.recursive_phase_share``: the root's phases draw no recursive example; the last phase draws that
    share of them, and root examples for the rest."""
    from learner import sft

    model, tokenizer, prompts = tiny(tmp_path)
    recursive_prompts = [prompt + chat_ids(tokenizer, [{"role": "user", "content": "Accept?"}]) for prompt in prompts]
    drawn = []
    original = sft._Examples.prompt_ids
    monkeypatch.setattr(sft._Examples, "prompt_ids",
                        lambda self, index, recursive: drawn.append(recursive) or original(self, index, recursive))
    config = SftConfig(batch_size=8, warmup_steps=1, steps=2, recursive_steps=10, recursive_phase_share=0.5)
    sft_warm_start(model, tokenizer, prompts, 3, config, seed=3, recursive_prompts=recursive_prompts)
    root_phase, last_phase = drawn[:16], drawn[16:]
    assert not any(root_phase) and len(last_phase) == 80
    assert 20 < sum(last_phase) < 60
    with pytest.raises(ValueError):
        SftConfig(recursive_phase_share=0)
    with pytest.raises(ValueError, match="set sft.recursive_steps"):
        SftConfig(recursive_phase_share=0.5)
