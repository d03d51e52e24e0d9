"""From records to learner tensors: infra errors excluded, zero-spread groups dropped, the shift between
logits and completion tokens, even sharding; and the weight-sync bucket plan."""

import dataclasses

import pytest
import torch

from conductor.rollout_record import RolloutRecord
from conductor.weight_transfer import bucket_plan, flatten, unflatten
from learner.grpo import GrpoSettings, policy_loss
from learner.train_batch import TrainSequence, build_sequences, collate, shard, split, token_logprobs


def record(group, reward, infra=None, completion=(7, 8)):
    return RolloutRecord(rollout_id=f"{group}-{reward}-{infra}-{len(completion)}-{id(completion)}", group_id=group,
                         question_id="q", policy_version=0, prompt_token_ids=[1, 2, 3],
                         completion_token_ids=list(completion), completion_logprobs=[-0.5] * len(completion),
                         completion_text="x", format_ok=True, correct=reward == 1.0, reward=reward, infra_error=infra)


def test_infra_errors_are_excluded_before_advantages():
    records = [record("a", 1.0), record("a", 0.0), record("a", None, infra="worker down")]
    sequences, stats = build_sequences(records)
    assert stats.infra_errors == 1 and len(sequences) == 2
    assert sorted(s.advantage for s in sequences) == pytest.approx([-1.0, 1.0], abs=1e-5)


def test_zero_spread_groups_are_dropped_or_kept_with_zero_advantage():
    records = [record("same", 0.5), record("same", 0.5), record("mixed", 1.0), record("mixed", 0.5)]
    dropped, stats = build_sequences(records)
    assert stats.zero_spread_groups == 1 and len(dropped) == 2
    kept, _ = build_sequences(records, filter_zero_spread=False)
    assert len(kept) == 4 and [s.advantage for s in kept[:2]] == [0.0, 0.0]


def test_a_recursive_turn_is_trained_with_its_episode_advantage_and_the_root_weighted():
    turn = {"prompt_token_ids": [1, 2, 3, 7, 8, 4], "completion_token_ids": [9, 9], "completion_logprobs": [-0.1, -0.2],
            "policy_version": 0}
    recursive = dataclasses.replace(record("g", 1.0), recursive_turns=[turn])
    sequences, stats = build_sequences([recursive, record("g", 0.0)], advantage_scale="none", first_round_weight=0.25)
    by_prompt = {s.prompt_ids: s for s in sequences}
    assert len(sequences) == 3 and stats.sequences == 3
    assert by_prompt[(1, 2, 3, 7, 8, 4)].advantage == pytest.approx(0.5)  # the turn that decided the answer
    assert by_prompt[(1, 2, 3, 7, 8, 4)].behaviour_logprobs == (-0.1, -0.2)
    assert sorted(s.advantage for s in sequences if s.prompt_ids == (1, 2, 3)) == pytest.approx([-0.5, 0.125])


def test_collate_aligns_completion_tokens_with_the_logits_that_score_them():
    sequences, _ = build_sequences([record("g", 1.0, completion=(7, 8, 9)), record("g", 0.0, completion=(5,))])
    batch = collate(sequences, pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 7, 8, 9], [1, 2, 3, 5, 0, 0]]
    assert batch.completion_mask.tolist() == [[0, 0, 1, 1, 1], [0, 0, 1, 0, 0]]
    logits = torch.full((2, 6, 10), -1e4)
    for row in range(2):
        for t in range(5):
            logits[row, t, batch.input_ids[row, t + 1]] = 0.0  # a model certain of the next token
    logprobs = token_logprobs(logits, batch.input_ids)
    assert torch.all((logprobs * batch.completion_mask).abs() < 1e-6)
    loss, _ = policy_loss(logprobs, logprobs, batch.advantages, batch.completion_mask, GrpoSettings())
    assert torch.isfinite(loss)


def test_shards_are_even_in_count_and_tokens_and_splits_cover_everything():
    sequences, _ = build_sequences([record(f"g{i // 4}", float(i % 2), completion=tuple(range(i + 1)))
                                    for i in range(16)])
    shards = shard(sequences, 2)
    assert [len(s) for s in shards] == [8, 8]
    tokens = [sum(len(x.completion_ids) for x in s) for s in shards]
    assert abs(tokens[0] - tokens[1]) <= 8
    assert [len(p) for p in split(list(range(7)), 3)] == [3, 2, 2]
    assert [len(p) for p in split([1], 3)] == [1, 0, 0]


def test_shards_keep_a_prompts_samples_together_when_it_fits():
    sequences = [TrainSequence((g,) * (10 + g), (1,) * (1 + i), (0.0,) * (1 + i), 0.0)
                 for g in range(6) for i in range(4)]
    shards = shard(sequences, 2)
    assert [len(s) for s in shards] == [12, 12]
    for s in shards:
        prompts = [x.prompt_ids for x in s]
        assert all(prompts.count(p) == 4 for p in prompts)  # every group whole, on one rank
    tokens = [sum(len(x.prompt_ids) + len(x.completion_ids) for x in s) for s in shards]
    assert abs(tokens[0] - tokens[1]) <= 15


def test_bucket_plan_keeps_transformer_blocks_whole_and_respects_the_size():
    specs = [("model.embed_tokens.weight", (100, 8), "float32")]
    for layer in range(3):
        specs += [(f"model.layers.{layer}.self_attn.{p}_proj.weight", (8, 8), "float32") for p in "qkv"]
    specs += [("model.norm.weight", (8,), "float32"), ("lm_head.weight", (100, 8), "float32")]
    plan = bucket_plan(specs, bucket_bytes=2 * 3 * 8 * 8 * 4)  # room for two layers
    assert [len(b) for b in plan] == [1, 6, 4, 1]
    for bucket in plan:
        layers = {name.split(".")[2] for name, _, _ in bucket if ".layers." in name}
        for layer in layers:
            assert sum(f"layers.{layer}." in name for name, _, _ in bucket) == 3  # never split
    assert [spec for bucket in plan for spec in bucket] == specs


def test_flatten_round_trips_and_mismatched_plans_fail():
    bucket = [("a", torch.arange(6.0).view(2, 3)), ("b", torch.ones(4))]
    flat = flatten(bucket)
    back = unflatten(flat, [("a", (2, 3), "float32"), ("b", (4,), "float32")])
    assert all(torch.equal(x, y) for (_, x), (_, y) in zip(bucket, back))
    with pytest.raises(ValueError, match="covers"):
        unflatten(flat, [("a", (2, 3), "float32")])


def test_the_token_normaliser_counts_only_the_tokens_the_loss_trains():
    """Plan-line tokens kept out of the loss (``learner.train_plan_line: false``) were counted in its
    denominator: the gradient shrank by trained/all tokens, a factor that moved from step to step."""
    from learner.train_batch import plan_step

    sequences = [TrainSequence((1, 2), (3, 4, 5, 6, 7), (0.0,) * 5, 1.0, untrained=(0, 1, 2)),
                 TrainSequence((1, 2), (3, 4, 5), (0.0,) * 3, -1.0)]
    assert plan_step(sequences, 1, 1, "token").normalisers == [5.0]  # 2 + 3 trained tokens
    assert plan_step(sequences, 1, 1, "sequence").normalisers == [2.0]
