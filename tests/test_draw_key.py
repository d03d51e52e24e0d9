"""A rollout group's random draws come from the run's seed and the group's draw key (conductor/draw_key.py),
never from the process that runs it: two rollout actors with different seeds, given the same request key
under other batch ids, draw the same rosters, sampling seeds, recursive rounds and recursive-turn seeds. The
engine side (a seeded prompt samples alone in its batch) is tested on a real vLLM engine in
test_constrained_decoding.py."""

import asyncio
import json

from conductor.baselines import FixedRouter
from conductor.config import Config, PoolConfig, WorkerSpec
from conductor.draw_key import group_key, request_key, seed_of
from conductor.rollout import RolloutRunner, SamplingSettings
from conductor.scripted_pool import ScriptedPool
from conductor.tasks.splits import TaskSampler
from conductor.tasks.toy import toy_tasks
from tests.test_cost_dial import TextTokenizer, decode

WORKERS = [WorkerSpec(id=f"w{i}", description=f"worker {i}") for i in range(4)]


class RecordingRouter(FixedRouter):
    """Worker 0 for every sample; notes each generate call's prompts, n and seed."""

    def __init__(self):
        super().__init__(lambda: 0)
        self.calls = []

    async def generate(self, prompts, n, sampling):
        self.calls.append(([decode(p) for p in prompts], n, sampling.seed))
        return await super().generate(prompts, n, sampling)


def draws(actor_seed, batch_id, draw_key, sampling=None):
    config = Config(pool=PoolConfig(workers=WORKERS, subset_size=2), prompt={"num_fewshot": 0},
                    executor={"max_steps": 2, "max_rounds": 1}, rollout={"recursive_fraction": 0.5})
    router = RecordingRouter()
    pool = ScriptedPool({w.id: "#### 1" for w in WORKERS})
    records = asyncio.run(RolloutRunner(config, TextTokenizer(), router, pool, seed=actor_seed).run(
        toy_tasks(4, seed=0)[:6], group_size=4, batch_id=batch_id, draw_key=draw_key, sampling=sampling))
    root, *turns = router.calls
    return {"prompts": root[0], "seed": root[2], "rounds": [r.recursion_rounds for r in records],
            "turn_seeds": sorted((seed for _, _, seed in turns), key=str)}


def test_the_same_key_draws_alike_in_any_actor_and_another_key_does_not():
    key = request_key({"epoch": 0, "position": 12})
    first, second = draws(1, "segment-a-3", key), draws(2, "segment-b-7", key)
    assert first == second
    assert first["seed"] == seed_of(Config().seed, key, "sample")
    assert 0 < sum(first["rounds"]) < len(first["rounds"])  # some samples got a recursive round, some did not
    assert len(set(first["turn_seeds"])) == sum(first["rounds"])  # each recursive turn its own seed
    other = draws(1, "segment-a-3", request_key({"epoch": 0, "position": 18}))
    assert other["seed"] != first["seed"] and other["rounds"] != first["rounds"]
    assert other["prompts"] != first["prompts"]  # the same questions: only the rosters drawn can differ


def test_a_caller_seed_or_greedy_decoding_is_left_alone_and_no_key_means_the_batch_id():
    fixed = draws(1, "b", None, SamplingSettings(temperature=1.0, seed=7))
    assert fixed["seed"] == 7 and None not in fixed["turn_seeds"]
    assert draws(1, "b", None, SamplingSettings(temperature=0.0))["seed"] is None
    assert draws(1, "b", None) == draws(2, "b", "b")


def test_a_request_key_is_the_question_samplers_state_before_its_draw():
    sampler = TaskSampler(toy_tasks(4, seed=0), seed=3)
    keys = []
    for _ in range(3):
        keys.append(request_key(sampler.state()))
        sampler.next(4)
    resumed = TaskSampler(toy_tasks(4, seed=0), seed=3, **json.loads(keys[1]))
    assert len(set(keys)) == 3 and request_key(resumed.state()) == keys[1]
    assert group_key(keys[0], 2) == keys[0] + "-q2"
    assert seed_of(0, "k", "sample") == seed_of(0, "k", "sample") != seed_of(1, "k", "sample")
    assert seed_of(0, "k", "sample") != seed_of(0, "k", "roster")
