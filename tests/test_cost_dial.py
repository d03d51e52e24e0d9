"""The cost dial (conductor/cost_dial.py), Ray-free: the setting-to-weight mapping, the per-group seeded
draw, the reward at each question's weight, the one prompt line that SFT, rollouts, evaluation and serving
all state, and the endpoint's ``conductor.cost_quality`` through the official openai client on a real
loopback server (the Conductor's output scripted, as in test_serve_orchestrator.py)."""

import asyncio
import contextlib
import socket
import threading
import time

import openai
import pytest
import uvicorn
from pydantic import ValidationError

from cluster.warm_start import at_every_setting, sft_prompts
from conductor.baselines import FixedRouter
from conductor.config import Config, PoolConfig, WorkerSpec
from conductor.cost_dial import (
    CARD_FILE,
    DialCard,
    card_of,
    check_setting,
    draw_setting,
    read_card,
    resolve_setting,
    setting_line,
    weight_of,
)
from conductor.episode import EpisodeRunner
from conductor.evaluation.conductor_method import ConductorMethod, ConductorPolicy
from conductor.executor import WorkflowExecutor
from conductor.prompt_builder import PromptBuilder
from conductor.prompts import conductor_messages
from conductor.rewards import RewardConfig
from conductor.rollout import RolloutRunner, SamplingSettings
from conductor.rollout_record import from_table, to_table
from conductor.rollout_summary import worker_tokens
from conductor.roster import Roster
from conductor.scripted_pool import ScriptedPool
from conductor.serve_config import ServeConfig, ServedModel
from conductor.serving.api_schema import Controls
from conductor.serving.app import create_app
from conductor.serving.orchestrator import Orchestrator, ServeRequest
from conductor.tasks.toy import toy_tasks
from conductor.token_budget import TokenBudget
from conductor.workflow_prior import menu_prior, priced_mean
from tests.test_serve_orchestrator import ScriptedConductor

RANGE = (0.0, 20.0)
WORKERS = [WorkerSpec(id="cheap", description="cheap model", price_in_per_m=0.1, price_out_per_m=0.4),
           WorkerSpec(id="dear", description="dear model", price_in_per_m=10.0, price_out_per_m=40.0)]
ONE_STEP = 'model_id = [0]\nsubtasks = ["Solve it."]\naccess_list = [[]]'
PRICE = 0.0005  # $ a worker token in the scripted pool: a toy episode costs ~$0.01-0.05


class TextTokenizer:
    """A tokenizer that keeps the whole prompt: one id per character, so any path's ids decode back."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [ord(c) for m in messages for c in f"<{m['role']}>{m['content']}"]

    def get_vocab(self):
        return {"a": 97}


def decode(ids):
    return "".join(map(chr, ids))


def dial_config(**reward):
    return Config(pool=PoolConfig(workers=WORKERS), prompt={"num_fewshot": 0}, executor={"max_steps": 2},
                  reward={"wrong": 0.5, "correct": 1.0, "cost_weight_range": RANGE, **reward})


def rollouts(config, tasks, **kw):
    pool = ScriptedPool({"cheap": "#### 1", "dear": "#### 1"}, price_per_token_usd=PRICE)
    return asyncio.run(RolloutRunner(config, TextTokenizer(), FixedRouter(lambda: 0), pool).run(tasks, **kw))


def test_the_mapping_puts_best_quality_at_lo_and_cheapest_at_hi_and_refuses_what_is_not_a_setting():
    assert [weight_of(s, RANGE) for s in (10, 5, 0)] == [0.0, 10.0, 20.0]
    assert weight_of(7, (1.0, 3.0)) == pytest.approx(1.6)
    for bad in (11, -1, 2.5, True, "3", None):
        with pytest.raises(ValueError, match="cost_quality must be an integer from 0"):
            check_setting(bad)
    assert check_setting(4.0) == 4
    assert resolve_setting(None, None, "x") is None
    with pytest.raises(ValueError, match="evaluate.cost_quality: this policy was trained without the cost dial"):
        resolve_setting(None, 3, "evaluate.cost_quality")
    card = DialCard(RANGE)
    assert resolve_setting(card, None, "x") == 5 and resolve_setting(card, 0, "x") == 0


def test_the_reward_config_checks_the_range_and_the_settings():
    with pytest.raises(ValidationError, match="leave reward.cost_penalty_per_usd at 0"):
        RewardConfig(cost_weight_range=RANGE, cost_penalty_per_usd=1.0)
    with pytest.raises(ValidationError, match="0 <= lo <= hi"):
        RewardConfig(cost_weight_range=(5.0, 1.0))
    with pytest.raises(ValidationError, match="reward.cost_quality_settings must be an integer"):
        RewardConfig(cost_weight_range=RANGE, cost_quality_settings=[0, 12])
    assert RewardConfig(cost_quality_settings=[10, 0, 10]).cost_quality_settings == [0, 10]
    assert card_of(RewardConfig()) is None
    assert card_of(RewardConfig(cost_weight_range=RANGE, cost_quality_settings=[0, 5, 10])).settings == (0, 5, 10)


def test_each_group_draws_one_setting_by_seed_and_group_id_and_every_sample_is_priced_at_its_weight():
    tasks = toy_tasks(4)
    config = dial_config()
    records = rollouts(config, tasks, group_size=3, batch_id="b0")
    groups = {}
    for record in records:
        groups.setdefault(record.group_id, set()).add((record.cost_quality, record.cost_weight))
    assert len(groups) == len(tasks) and all(len(shared) == 1 for shared in groups.values())
    drawn = {group: next(iter(shared))[0] for group, shared in groups.items()}
    assert drawn == {f"b0-q{i}": draw_setting(0, f"b0-q{i}", range(11)) for i in range(len(tasks))}
    assert len(set(drawn.values())) > 1  # 12 groups over 11 settings: not all alike
    assert drawn == {r.group_id: r.cost_quality for r in rollouts(config, tasks, group_size=1, batch_id="b0")}
    other_seed = {r.group_id: r.cost_quality
                  for r in rollouts(config.model_copy(update={"seed": 1}), tasks, group_size=1, batch_id="b0")}
    assert other_seed != drawn
    for record in records:
        assert record.cost_weight == weight_of(record.cost_quality, RANGE) and record.cost_usd > 0
        base = 1.0 if record.correct else 0.5
        assert record.reward == pytest.approx(max(base - record.cost_weight * record.cost_usd, 0.0))
    fixed = rollouts(config, tasks, group_size=2, cost_quality=10)
    assert {(r.cost_quality, r.cost_weight) for r in fixed} == {(10, 0.0)}
    assert all(r.reward in (0.5, 1.0) for r in fixed)  # dollars are free at the best setting


def test_a_run_without_the_dial_draws_nothing_and_refuses_a_setting():
    plain = Config(pool=PoolConfig(workers=WORKERS), prompt={"num_fewshot": 0}, reward={"cost_penalty_per_usd": 2.0})
    [record] = rollouts(plain, toy_tasks(1)[:1], group_size=1)
    assert record.cost_quality is None and record.cost_weight is None
    assert record.reward == pytest.approx(max((1.0 if record.correct else 0.5) - 2.0 * record.cost_usd, 0.0))
    assert "Cost-quality setting" not in decode(record.prompt_token_ids)
    with pytest.raises(ValueError, match="trained without the cost dial"):
        rollouts(plain, toy_tasks(1)[:1], group_size=1, cost_quality=3)


def test_the_store_and_the_token_budget_keep_each_question_s_weight():
    records = rollouts(dial_config(), toy_tasks(3), group_size=2, batch_id="b1")
    again = from_table(to_table(records))
    assert [(r.cost_quality, r.cost_weight) for r in again] == [(r.cost_quality, r.cost_weight) for r in records]
    settings = RewardConfig(wrong=0.5, cost_weight_range=RANGE, worker_token_budget=10**6,
                            cost_penalty_per_1k_worker_tokens=0.0)
    repriced = TokenBudget.of(settings, multiplier=0.1).reprice(again)
    for before, after in zip(records, repriced):
        penalty = 0.1 * worker_tokens(before) / 1000
        base = 1.0 if before.correct else 0.5
        assert after.reward == pytest.approx(max(base - before.cost_weight * before.cost_usd - penalty, 0.0))


def test_the_warm_start_s_menu_is_priced_at_each_setting():
    records = rollouts(dial_config(), toy_tasks(2), group_size=1, cost_quality=5)
    rewards = RewardConfig(wrong=0.5, cost_weight_range=RANGE)
    free, priced = priced_mean(records, rewards, 0.0), priced_mean(records, rewards, 20.0)
    assert free > priced
    assert priced_mean(records, rewards, None) == pytest.approx(sum(r.reward for r in records) / len(records))
    cheap_item, dear_item = ("cheap",), ("dear",)
    best = menu_prior({"d": {cheap_item: 0.6, dear_item: 0.9}}, {"solve": 1}, 0.02)["d"]
    cheapest = menu_prior({"d": {cheap_item: 0.6, dear_item: 0.3}}, {"solve": 1}, 0.02)["d"]
    assert best[dear_item] > 0.99 and cheapest[cheap_item] > 0.99


def test_sft_rollout_evaluation_and_serving_state_the_same_line_in_the_same_prompt():
    config = dial_config()
    tokenizer = TextTokenizer()
    task = toy_tasks(1)[0]
    roster = Roster.full(WORKERS)

    def expected(setting):
        return decode(tokenizer.apply_chat_template(conductor_messages(task.prompt, roster, (), max_steps=2,
                                                                       cost_quality=setting)))

    [rollout] = rollouts(config, [task], group_size=1, cost_quality=3)
    [sft_prompt] = sft_prompts(PromptBuilder(config, tokenizer), [task], [roster], [3])

    class Recording(FixedRouter):
        def __init__(self, choose):
            super().__init__(choose)
            self.prompts = []

        async def generate(self, prompts, n, sampling):
            self.prompts += prompts
            return await super().generate(prompts, n, sampling)

    generator = Recording(lambda: 0)
    pool = ScriptedPool({"cheap": "#### 1", "dear": "#### 1"})
    executor = WorkflowExecutor(pool)
    policy = ConductorPolicy(generator, PromptBuilder(config, tokenizer), EpisodeRunner(executor, (), max_steps=2),
                             SamplingSettings(0.0), 0, cost_quality=3)
    asyncio.run(ConductorMethod("conductor", roster, policy, 0).attempt(task, 0))

    conductor = ScriptedConductor(ONE_STEP)
    serve = config.model_copy(update={"serve": ServeConfig(models=[ServedModel(name="mini", max_steps=2)])})
    orchestrator = Orchestrator(serve, conductor, tokenizer, pool, DialCard(RANGE))
    request = ServeRequest(orchestrator.model("mini"), task.prompt, Controls(cost_quality=3))
    asyncio.run(orchestrator.answer(request))

    served = [decode(conductor.prompts[0]), decode(generator.prompts[0]), decode(rollout.prompt_token_ids)]
    assert served == [expected(3)] * 3
    assert decode(sft_prompt) == expected(3)
    assert expected(3).count(setting_line(3)) == 1 and expected(3).endswith(f"\n\n{setting_line(3)}")


def test_a_dial_run_validates_over_the_whole_dial_unless_told_one_setting():
    from conductor.cost_dial import validation_settings

    card = DialCard(RANGE)
    assert validation_settings(card, None, "evaluate.cost_quality") == (0, 5, 10)
    assert validation_settings(card, 7, "evaluate.cost_quality") == (7,)
    assert validation_settings(DialCard(RANGE, settings=(2, 5)), None, "x") == (5,)
    assert validation_settings(DialCard(RANGE, settings=(3,)), None, "x") == (5,)
    assert validation_settings(None, None, "evaluate.cost_quality") == (None,)
    with pytest.raises(ValueError, match="evaluate.cost_quality: this policy was trained without the cost dial"):
        validation_settings(None, 3, "evaluate.cost_quality")


def test_the_warm_start_shows_each_question_at_every_setting_and_its_plan_states_the_setting():
    from conductor.example_workflows import example_plans
    from conductor.workflow import parse_workflow

    tasks = toy_tasks(1)[:2]
    questions, settings = at_every_setting(tasks, card_of(dial_config().reward).settings)
    assert len(questions) == 22 and settings == list(range(11)) * 2
    assert [q.id for q in questions[:11]] == [tasks[0].id] * 11 and questions[11].id == tasks[1].id
    assert at_every_setting(tasks, None) == (tasks, [None, None])
    plans = example_plans("setting", 3, [q.prompt for q in questions], settings)
    assert plans[0] == "Cost-quality setting 0.\n" and plans[21] == "Cost-quality setting 10.\n"
    assert [step.worker for step in parse_workflow(plans[7] + ONE_STEP, num_workers=2, max_steps=2).steps] == [0]
    with pytest.raises(ValueError, match="needs a dial run"):
        example_plans("setting", 3, [q.prompt for q in tasks], [None, None])


@contextlib.contextmanager
def serving(dial, **model):
    """The endpoint app on a real loopback server (uvicorn on a thread), its Conductor scripted."""
    conductor = ScriptedConductor(*[ONE_STEP] * 20)
    config = Config(pool=PoolConfig(workers=WORKERS), prompt={"num_fewshot": 0},
                    serve=ServeConfig(models=[ServedModel(name="mini", max_steps=2, **model)],
                                      auth={"required": False}))
    app = create_app(Orchestrator(config, conductor, TextTokenizer(), ScriptedPool({"cheap": "4", "dear": "4"}),
                                  dial), config.serve)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.02)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}/v1", api_key="unused",
                               max_retries=0, timeout=60)
        yield client, conductor
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def ask(client, **controls):
    return client.chat.completions.create(model="mini", messages=[{"role": "user", "content": "What is 2+2?"}],
                                          extra_body={"conductor": {"trace": True, **controls}})


def test_the_endpoint_takes_cost_quality_per_request_and_its_trace_names_it():
    with serving(DialCard(RANGE), cost_quality=8) as (client, conductor):
        assert ask(client, cost_quality=2).model_extra["conductor_trace"]["cost_quality"] == 2
        assert setting_line(2) in decode(conductor.prompts[-1])
        assert ask(client).model_extra["conductor_trace"]["cost_quality"] == 8  # the model's default
        assert setting_line(8) in decode(conductor.prompts[-1])
        for bad in (11, -1, 2.5, "high", True):
            with pytest.raises(openai.BadRequestError) as info:
                ask(client, cost_quality=bad)
            assert info.value.status_code == 400 and info.value.body["param"] == "conductor.cost_quality"


def test_a_policy_without_the_dial_refuses_the_setting_and_its_trace_has_none():
    with serving(None) as (client, conductor):
        assert ask(client).model_extra["conductor_trace"]["cost_quality"] is None
        assert "Cost-quality setting" not in decode(conductor.prompts[-1])
        with pytest.raises(openai.BadRequestError) as info:
            ask(client, cost_quality=3)
        assert info.value.body["param"] == "conductor.cost_quality"
        assert "trained without the cost dial" in info.value.body["message"]
    with pytest.raises(ValueError, match="serve.models mini: cost_quality: this policy was trained without"):
        with serving(None, cost_quality=3):
            pass


def test_a_dial_card_round_trips_and_a_broken_one_is_named(tmp_path):
    card = DialCard((1.0, 9.0), (0, 5, 10), 5)
    (tmp_path / CARD_FILE).write_text(card.json())
    assert read_card(str(tmp_path)) == card and card.weight(5) == 5.0
    assert read_card(str(tmp_path / "missing")) is None
    (tmp_path / CARD_FILE).write_text('{"weight_range": [1]}')
    with pytest.raises(ValueError, match="not a cost dial card"):
        read_card(str(tmp_path))
