"""GRPO advantages and loss against hand-computed values."""

import math

import pytest
import torch

from learner.grpo import GrpoSettings, aggregate, group_advantages, policy_loss


def test_group_advantages_hand_computed():
    # rewards 1, 0.5, 0.5, 0: mean 0.5, population std sqrt(0.125) = 0.353553...
    advantages = group_advantages([1.0, 0.5, 0.5, 0.0], eps=0.0)
    assert advantages == pytest.approx([1 / math.sqrt(0.125) * 0.5, 0.0, 0.0, -1 / math.sqrt(0.125) * 0.5])
    assert advantages[0] == pytest.approx(1.4142135, rel=1e-6)


def test_all_equal_groups_contribute_no_gradient():
    assert group_advantages([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]
    assert group_advantages([0.0] * 8) == [0.0] * 8
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = policy_loss(logprobs, logprobs.detach(), torch.tensor([0.0]), torch.ones(1, 2))
    loss.backward()
    assert loss.item() == 0.0 and torch.all(logprobs.grad == 0)


def single(ratio, advantage, settings=None):
    settings = settings or GrpoSettings()
    old = torch.tensor([[0.0]])
    new = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, stats = policy_loss(new, old, torch.tensor([advantage]), torch.ones(1, 1), settings)
    loss.backward()
    return loss.item(), new.grad.item(), stats


@pytest.mark.parametrize("ratio, advantage, expected_loss, has_gradient", [
    (1.0, 1.0, -1.0, True),      # on-policy: -A
    (1.5, 1.0, -1.2, False),     # positive advantage, ratio above 1 + eps_high: clipped, no gradient
    (0.5, 1.0, -0.5, True),      # positive advantage, ratio below 1 - eps_low: min picks the unclipped term
    (0.5, -1.0, 0.8, False),     # negative advantage, ratio below 1 - eps_low: clipped at 0.8
    (1.5, -1.0, 1.5, True),      # negative advantage, ratio above 1 + eps_high: unclipped (pessimistic)
])
def test_clip_at_both_edges(ratio, advantage, expected_loss, has_gradient):
    loss, gradient, _ = single(ratio, advantage)
    assert loss == pytest.approx(expected_loss)
    assert (abs(gradient) > 0) == has_gradient


def test_asymmetric_clip_edges():
    loss, gradient, stats = single(1.25, 1.0, GrpoSettings(eps_low=0.2, eps_high=0.28))
    assert loss == pytest.approx(-1.25) and gradient != 0 and stats["clip_fraction"] == 0.0
    loss, gradient, stats = single(1.3, 1.0, GrpoSettings(eps_low=0.2, eps_high=0.28))
    assert loss == pytest.approx(-1.28) and gradient == 0 and stats["clip_fraction"] == 1.0


def test_token_versus_sequence_aggregation():
    per_token = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    assert aggregate(per_token, mask, "token").item() == pytest.approx((4 * 1.0 + 4.0) / 5)
    assert aggregate(per_token, mask, "sequence").item() == pytest.approx((1.0 + 4.0) / 2)
    with pytest.raises(ValueError):
        aggregate(per_token, mask, "nope")


def test_truncated_importance_weight_and_kl():
    old = torch.tensor([[-1.0, -1.0]])
    behaviour = torch.tensor([[-1.0 - math.log(3.0), -1.0]])  # first token: old/behaviour = 3
    loss, _ = policy_loss(old.clone(), old, torch.tensor([1.0]), torch.ones(1, 2),
                          GrpoSettings(tis_cap=2.0), behaviour_logprobs=behaviour)
    assert loss.item() == pytest.approx(-(2.0 + 1.0) / 2)  # weight capped at 2 on the first token
    reference = torch.tensor([[-1.5, -1.0]])
    loss, stats = policy_loss(old.clone(), old, torch.tensor([0.0]), torch.ones(1, 2),
                              GrpoSettings(kl_coef=0.1), ref_logprobs=reference)
    k3 = math.exp(-0.5) + 0.5 - 1
    assert stats["kl"] == pytest.approx(k3 / 2) and loss.item() == pytest.approx(0.1 * k3 / 2)
    with pytest.raises(ValueError, match="reference"):
        policy_loss(old, old, torch.tensor([0.0]), torch.ones(1, 2), GrpoSettings(kl_coef=0.1))


@pytest.mark.parametrize("how", ["token", "sequence"])
def test_micro_batches_with_the_whole_batch_normaliser_sum_to_the_whole_batch_gradient(how):
    from learner.grpo import normaliser_count

    torch.manual_seed(0)
    logprobs = torch.randn(4, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.float32)
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.0])
    settings = GrpoSettings(aggregation=how)
    whole, _ = policy_loss(logprobs, logprobs.detach() + 0.1, advantages, mask, settings)
    (expected,) = torch.autograd.grad(whole, logprobs)
    total = normaliser_count(mask, how)
    parts = [policy_loss(logprobs[rows], logprobs.detach()[rows] + 0.1, advantages[rows], mask[rows], settings,
                         normaliser=total)[0] for rows in (slice(0, 1), slice(1, 4))]
    (got,) = torch.autograd.grad(sum(parts), logprobs)
    assert torch.allclose(got, expected, atol=1e-7)
    assert total == (11.0 if how == "token" else 4.0)


def test_unscaled_advantages_keep_a_small_cost_penalty_small():
    """All right, rewards apart only by a token penalty: std scaling makes that unit-size, as large as
    right against wrong; unscaled (Dr. GRPO) it stays the penalty's size."""
    all_right = [1.0 - 0.04 * 1.9, 1.0 - 0.04 * 0.6]          # a 2-step and a 1-step workflow, both right
    right_wrong = [1.0 - 0.04 * 1.9, 0.0 - 0.04 * 0.6]
    assert abs(group_advantages(all_right)[0]) == pytest.approx(abs(group_advantages(right_wrong)[0]), rel=1e-4)
    unscaled = group_advantages(all_right, scale="none")
    assert unscaled == pytest.approx([-0.026, 0.026])
    assert group_advantages(right_wrong, scale="none")[0] == pytest.approx(0.474)
    assert group_advantages([0.3, 0.3], scale="none") == [0.0, 0.0]
