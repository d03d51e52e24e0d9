"""The tokens that name a worker, found as the workflow parser reads the lists, and the KL term the learner
puts on them alone (learner.worker_id_kl_coef)."""

import math

import pytest
import torch

from conductor.worker_choice_tokens import TokenTexts, later_worker_positions, worker_choice_positions
from learner.grpo import GrpoSettings, policy_loss
from learner.shared_prompt import collate_shared
from learner.tiny_policy import build_tiny_policy
from learner.train_batch import TrainSequence, collate


def test_the_digits_of_the_last_model_id_list_are_the_choice():
    pieces = ["The question asks: Sort", "\n", "model_id", " = [", "1", ", ", "12", "]\n", "subtasks = [\"Do 3\"]"]
    assert worker_choice_positions(pieces) == (4, 6)
    again = ["model_id = [0]\n", "model_id = [", "2", "]"]  # the parser reads the last assignment only
    assert worker_choice_positions(again) == (2,)
    merged = ["model_id = [3", ", 4]"]  # a token that carries a digit with other text counts
    assert worker_choice_positions(merged) == (0, 1)


def test_the_first_scope_names_the_first_entry_alone():
    pieces = ["model_id", " = [", "1", ", ", "12", ", ", "3", "]"]
    assert worker_choice_positions(pieces, first_only=True) == (2,)
    assert worker_choice_positions(["model_id = [", "4", "]"], first_only=True) == (1,)
    assert worker_choice_positions(["model_id = [3", ", 4]"], first_only=True) == (0,)


def test_the_later_workers_are_every_entry_past_the_first():
    pieces = ["model_id", " = [", "1", ", ", "12", ", ", "3", "]"]
    assert later_worker_positions(pieces) == (4, 6)
    assert later_worker_positions(["model_id = [", "4", "]"]) == ()  # one worker: nobody after it
    assert later_worker_positions(["model_id = [3", ", 4", "]"]) == (1,)
    assert later_worker_positions(["model_id = [3, 4]"]) == ()  # a token that names the first is the first's
    assert later_worker_positions(["no lists here"]) == ()


@pytest.mark.parametrize("text", ["no lists here", "model_id = [", "model_id = []", "subtasks = [\"1\"]"])
def test_no_list_or_no_digit_names_no_token(text):
    assert worker_choice_positions([text]) == ()


def test_positions_from_a_real_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_policy(tmp_path / "tiny"))
    text = ('The question asks: Compute 72 *\nmodel_id = [2, 0]\nsubtasks = ["Solve 12", "Check"]\n'
            'access_list = [[], ["all"]]')
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    texts = TokenTexts(tokenizer)
    positions = texts.choice_positions(ids)
    assert "".join(texts(ids)) == tokenizer.decode(ids)
    assert "".join(texts([ids[p] for p in positions])).replace(" ", "").replace(",", "") == "20"
    first = texts.choice_positions(ids, first_only=True)
    assert set(first) < set(positions)
    assert "".join(texts([ids[p] for p in first])).replace(" ", "").replace(",", "") == "2"


def test_the_kl_term_falls_on_the_named_tokens_only():
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    reference = torch.tensor([[-1.5, -1.5, -1.5]])
    choice = torch.tensor([[0.0, 1.0, 0.0]])
    settings = GrpoSettings(worker_id_kl_coef=0.2)
    loss, stats = policy_loss(old.clone(), old, torch.tensor([0.0]), torch.ones(1, 3), settings,
                              ref_logprobs=reference, worker_choice_mask=choice)
    k3 = math.exp(-0.5) + 0.5 - 1
    assert loss.item() == pytest.approx(0.2 * k3 / 3)  # one token of three carries it; token mean
    assert stats["worker_id_kl"] == pytest.approx(k3) and stats["kl"] == pytest.approx(k3)
    both, _ = policy_loss(old.clone(), old, torch.tensor([0.0]), torch.ones(1, 3),
                          GrpoSettings(kl_coef=0.1, worker_id_kl_coef=0.2), ref_logprobs=reference,
                          worker_choice_mask=choice)
    assert both.item() == pytest.approx((0.1 * 3 + 0.2) * k3 / 3)
    with pytest.raises(ValueError, match="worker-choice mask"):
        policy_loss(old, old, torch.tensor([0.0]), torch.ones(1, 3), settings, ref_logprobs=reference)


def test_the_later_workers_take_their_own_coefficient_in_place_of_the_all_token_one():
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    reference = torch.tensor([[-1.5, -1.5, -1.5]])
    first, later = torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([[0.0, 1.0, 0.0]])
    k3 = math.exp(-0.5) + 0.5 - 1

    def loss(**settings):
        value, _ = policy_loss(old.clone(), old, torch.tensor([0.0]), torch.ones(1, 3), GrpoSettings(**settings),
                               ref_logprobs=reference, worker_choice_mask=first, later_worker_mask=later)
        return value.item()

    assert loss(kl_coef=0.1, later_worker_kl_coef=0.0) == pytest.approx(0.1 * 2 * k3 / 3)  # the checker is free
    assert loss(kl_coef=0.1, later_worker_kl_coef=0.4) == pytest.approx((0.1 * 2 + 0.4) * k3 / 3)
    assert loss(kl_coef=0.1) == pytest.approx(0.1 * 3 * k3 / 3)  # unset: the all-token coefficient
    assert loss(kl_coef=0.0, later_worker_kl_coef=0.3) == pytest.approx(0.3 * k3 / 3)
    assert loss(kl_coef=0.1, worker_id_kl_coef=0.2, later_worker_kl_coef=0.0) == pytest.approx((0.1 * 2 + 0.2) * k3 / 3)
    with pytest.raises(ValueError, match="later-worker mask"):
        policy_loss(old, old, torch.tensor([0.0]), torch.ones(1, 3),
                    GrpoSettings(kl_coef=0.1, later_worker_kl_coef=0.0), ref_logprobs=reference)


def test_both_layouts_mark_the_same_completion_tokens():
    sequences = [TrainSequence((5, 6, 7), (1, 2, 3, 4), (0.0,) * 4, 1.0, (1, 3), later_workers=(3,)),
                 TrainSequence((5, 6), (9, 8), (0.0,) * 2, -1.0)]
    plain, shared = collate(sequences, 0), collate_shared(sequences, 0)
    for row, s in enumerate(sequences):
        for marks, positions in (("worker_choice_mask", s.worker_choice), ("later_worker_mask", s.later_workers)):
            plain_marks = getattr(plain, marks)[row][plain.completion_mask[row] > 0]
            shared_marks = getattr(shared, marks)[row][shared.completion_mask[row] > 0]
            expected = [1.0 if j in positions else 0.0 for j in range(len(s.completion_ids))]
            assert plain_marks.tolist() == expected == shared_marks.tolist()


def test_the_plan_line_is_every_token_before_the_first_model_id_and_the_one_that_starts_it():
    from conductor.worker_choice_tokens import plan_line_positions

    pieces = ["The question is of kind", " code", ".\n", "model_id", " = [", "1", "]"]
    assert plan_line_positions(pieces) == (0, 1, 2, 3)
    assert plan_line_positions(["The kind", ".\nmodel_", "id = [1]"]) == (0, 1)
    assert plan_line_positions(["model_id", " = [1]"]) == (0,)  # no plan line: the choice to write none
    assert plan_line_positions(["no lists here"]) == ()


def test_untrained_positions_carry_no_loss_in_either_layout():
    sequences = [TrainSequence((5, 6, 7), (1, 2, 3, 4), (0.0,) * 4, 1.0, untrained=(0, 1)),
                 TrainSequence((5, 6), (9, 8), (0.0,) * 2, -1.0)]
    plain, shared = collate(sequences, 0), collate_shared(sequences, 0)
    assert plain.completion_mask[0].sum().item() == 2 and plain.completion_mask[1].sum().item() == 2
    assert plain.completion_mask.sum().item() == shared.completion_mask.sum().item() == 4
    assert shared.completion_mask[0, :4].tolist() == [0.0, 0.0, 1.0, 1.0]
    assert plain.completion_mask[0, 2:6].tolist() == [0.0, 0.0, 1.0, 1.0]  # the completion starts at prompt - 1
