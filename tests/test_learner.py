"""The DeepSpeed learner group on a real local Ray cluster: its GRPO step equals a plain-torch step on
the whole batch whatever the ZeRO stage, rank count and micro-batch split; and a run killed after a
checkpoint resumes to exactly the losses and weights of an uninterrupted run (model, optimizer, lr
schedule and the replay-store cursor all restored)."""

import dataclasses

import pytest
import ray
import s3fs
import torch
from transformers import AutoModelForCausalLM

from conductor.config import LearnerConfig
from conductor.replay_store import Cursor, ReplayStore
from conductor.rollout_record import from_table
from conductor.run_output import RunOutput
from learner.grpo import GrpoSettings, policy_loss
from learner.learner_group import LearnerGroup
from learner.tiny_policy import build_tiny_policy
from learner.train_batch import build_sequences, collate, token_logprobs
from tests.support.rollouts import make_records

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return str(build_tiny_policy(tmp_path_factory.mktemp("learner") / "tiny"))


def batch(version, count=24):
    """Records whose groups share a prompt, as a real group's samples do (the shared-prompt forward's
    case), except the last group, whose prompts all differ (and are shorter)."""
    records = make_records(count, version, seed=version, prompt_tokens=20, completion_tokens=8)
    first = {}
    for index, r in enumerate(records):
        shared = first.setdefault(r.group_id, r.prompt_token_ids)
        prompt = shared if index < count - 8 else shared[:6 + index % 8]
        records[index] = dataclasses.replace(r, prompt_token_ids=prompt)
    return records


def plain_torch_step(policy, records, config):
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=config.betas,
                                  weight_decay=config.weight_decay)
    sequences, _ = build_sequences(records)
    micro = collate(sequences, model.config.pad_token_id)
    logprobs = token_logprobs(model(input_ids=micro.input_ids, attention_mask=micro.attention_mask).logits,
                              micro.input_ids)
    loss, _ = policy_loss(logprobs, logprobs.detach(), micro.advantages, micro.completion_mask, GrpoSettings())
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip))
    optimizer.step()
    return {name: p.detach() for name, p in model.named_parameters()}, grad_norm


@pytest.mark.parametrize("stage,ranks", [(2, 1), (3, 2)])
def test_step_equals_plain_torch_on_the_whole_batch(ray_local, policy, stage, ranks):
    config = LearnerConfig(zero_stage=stage, ranks=ranks, num_cpus_per_rank=0.5, lr=1e-2, warmup_steps=0,
                           micro_batch_size=3, grad_clip=0.05)  # clipping active: the global norm must be right
    records = batch(0)
    expected, expected_norm = plain_torch_step(policy, records, config)
    learners = LearnerGroup(policy, config, total_steps=1, sequences_per_step=len(records))
    try:
        stats, _ = learners.train_step(records)
        # Adam's update is scale-free, so the gradient's scale is checked through its norm
        assert stats.grad_norm == pytest.approx(expected_norm, rel=1e-5)
        got = learners.full_state_dict()
    finally:
        learners.shutdown()
    initial = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32).state_dict()
    assert set(got) == set(expected)
    for name, tensor in expected.items():
        assert not torch.equal(tensor, initial[name]) or name.endswith("bias")
        # Adam's first step is ~lr * sign(g): float-order noise on near-zero gradients moves a few
        # elements by ~1e-5 (lr 1e-2); a wrong batch split would move many by ~lr
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=5e-5, msg=lambda m, name=name: f"{name}: {m}")


def run(learners, store, cursor, versions):
    losses = []
    for version in versions:
        table, cursor = store.read(max_version=version, cursor=cursor)
        stats, _ = learners.train_step(from_table(table))
        losses.append((stats.loss, stats.grad_norm, stats.lr))
    return losses, cursor


@pytest.mark.parametrize("stage,ranks,where", [(2, 2, "local"), (3, 2, "s3")])
def test_kill_and_resume_matches_an_uninterrupted_run(ray_local, policy, tmp_path, request, stage, ranks, where):
    """Checkpoints on a local disk, or on S3 (SeaweedFS): every rank uploads its files and downloads them."""
    out = RunOutput(str(tmp_path / "out"), "r")
    if where == "s3":
        server = request.getfixturevalue("s3_server")
        s3fs.S3FileSystem(**server.storage_options).mkdirs("ckpts", exist_ok=True)
        out = RunOutput("s3://ckpts", tmp_path.name, server.storage_options)
    config = LearnerConfig(zero_stage=stage, ranks=ranks, num_cpus_per_rank=0.5, lr=5e-3, warmup_steps=2,
                           lr_schedule="cosine", micro_batch_size=4, mini_batches=2)
    store = ReplayStore(str(tmp_path / "store"))
    for version in range(4):
        store.write(batch(version))

    def group():
        return LearnerGroup(policy, config, total_steps=4, sequences_per_step=24)

    straight = group()
    try:
        expected_losses, _ = run(straight, store, Cursor(), range(4))
        expected_weights = straight.full_state_dict()
    finally:
        straight.shutdown()

    first = group()
    losses, cursor = run(first, store, Cursor(), range(2))
    assert first.save_checkpoint(out, "step-2", {"cursor": cursor.to_json(), "policy_version": 2}) == \
        out.path("checkpoints", "step-2")
    assert out.exists("checkpoints", "step-2", "rng-rank1.pt")
    for rank in first.ranks:  # killed, not shut down cleanly
        ray.kill(rank, no_restart=True)
    ray.util.remove_placement_group(first.placement)

    second = group()
    try:
        state = second.load_checkpoint(out, "step-2")
        assert state["policy_version"] == 2
        more, _ = run(second, store, Cursor.from_json(state["cursor"]), range(2, 4))
        weights = second.full_state_dict()
    finally:
        second.shutdown()
    flat = [value for step in losses + more for value in step]
    assert flat == pytest.approx([value for step in expected_losses for value in step], rel=1e-6, abs=1e-9)
    assert abs(expected_losses[3][0]) > 1e-4  # the second mini-batch's ratios differ from 1: a real loss
    for name, tensor in expected_weights.items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=0, msg=lambda m, name=name: f"{name}: {m}")
    if where == "local":  # resumed with a new lr: the configured lr wins, at the restored point of the schedule
        config = config.model_copy(update={"lr": 2 * config.lr})  # group() builds from it
        third = group()
        try:
            third.load_checkpoint(out, "step-2")
            (_, _, lr), = run(third, store, Cursor.from_json(state["cursor"]), range(2, 3))[0]
        finally:
            third.shutdown()
        assert lr == pytest.approx(2 * expected_losses[2][2], rel=1e-9)


def two_steps(policy, batches, stage=2, **kl_settings):
    """The stats of two training steps on ``batches(0)`` then ``batches(1)``, with a KL term configured."""
    config = LearnerConfig(zero_stage=stage, num_cpus_per_rank=0.5, lr=1e-2, warmup_steps=0, micro_batch_size=8,
                           **kl_settings)
    learners = LearnerGroup(policy, config, total_steps=2, sequences_per_step=24)
    try:
        return learners.train_step(batches(0))[0], learners.train_step(batches(1))[0]
    finally:
        learners.shutdown()


@pytest.mark.parametrize("stage", [2, 3])
def test_kl_to_a_frozen_reference_is_zero_at_first_and_grows(ray_local, policy, stage):
    """Under ZeRO-3 too: its reference, loaded while the stage's config was live, came out partitioned and
    empty, and the first step failed."""
    first, second = two_steps(policy, batch, stage=stage, kl_coef=0.1)
    assert first.kl == pytest.approx(0.0, abs=1e-9)  # the policy is the reference before any update
    assert second.kl > 1e-6


def fixed_completion(policy, text):
    """``batch`` with every completion replaced by ``text`` (tokenised by the policy's tokenizer)."""
    from transformers import AutoTokenizer

    completion = AutoTokenizer.from_pretrained(policy)(text, add_special_tokens=False)["input_ids"]

    def workflows(version):
        return [dataclasses.replace(r, completion_token_ids=completion, completion_logprobs=[-1.0] * len(completion))
                for r in batch(version)]

    return workflows


def test_a_kl_on_the_worker_choice_alone_reads_the_tokens_that_name_a_worker(ray_local, policy):
    """learner.worker_id_kl_coef: the learner finds the model_id digits in each completion itself."""
    workflows = fixed_completion(policy, 'model_id = [1, 0]\nsubtasks = ["x", "y"]\naccess_list = [[], ["all"]]')
    first, second = two_steps(policy, workflows, worker_id_kl_coef=0.1)
    assert first.worker_id_kl == pytest.approx(0.0, abs=1e-9) and first.kl == pytest.approx(0.0, abs=1e-9)
    assert second.worker_id_kl > 1e-6


def test_a_plan_line_kept_out_of_the_loss_changes_what_the_step_trains_on(ray_local, policy):
    """learner.train_plan_line false: the learner finds each completion's plan line itself and leaves it out."""
    workflows = fixed_completion(policy, 'The question is of kind code.\nmodel_id = [1]\nsubtasks = ["x"]\n'
                                         'access_list = [[]]')
    trained, _ = two_steps(policy, workflows)
    untrained, _ = two_steps(policy, workflows, train_plan_line=False)
    assert untrained.grad_norm != pytest.approx(trained.grad_norm, rel=1e-3)  # the same batch, fewer tokens trained


def test_the_later_workers_kl_coefficient_reaches_the_step(ray_local, policy):
    """learner.later_worker_kl_coef: the learner finds the checker's digits itself and weighs their KL apart."""
    workflows = fixed_completion(policy, 'model_id = [1, 0]\nsubtasks = ["x", "y"]\naccess_list = [[], ["all"]]')
    _, held = two_steps(policy, workflows, kl_coef=0.5)
    _, freed = two_steps(policy, workflows, kl_coef=0.5, later_worker_kl_coef=0.0)
    assert held.kl > 1e-6 and freed.kl > 1e-6
    assert freed.grad_norm != pytest.approx(held.grad_norm, rel=1e-4)  # the checker's KL gradient is gone
