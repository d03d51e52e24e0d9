"""What failed attempts cost (conductor/provider_client.py, conductor/serving/orchestrator.py): an attempt the
provider billed and then gave up on, and one sent whose bill is unknown (a timeout), are counted on the call
and its error; under a cost cap a call makes at most one such attempt, and the endpoint's usage and what is
left of its cap count them, so a worker that fails expensively cannot carry a request past its cap. Through the
real provider client and the official openai client, against a loopback reply server."""

from __future__ import annotations

import asyncio
import time

import pytest

from conductor.config import Config, PoolConfig, ProviderSpec, WorkerSpec
from conductor.executor import CANCELLED_IN_FLIGHT
from conductor.local_pool import LocalPool
from conductor.pool import ChatResult, WorkerCallError
from conductor.provider_client import ProviderClient
from conductor.serve_config import ServeConfig, ServedModel
from conductor.serving.api_schema import Controls
from conductor.serving.cost_bounds import workflow_bounds
from conductor.serving.orchestrator import Orchestrator, ServeRequest
from conductor.workflow import parse_workflow
from tests.support.reply_server import ReplyServer, Streamed, chunk, completion
from tests.test_serve_orchestrator import QUESTION, CharTokenizer, ScriptedConductor

SLOW_S = 3.0  # a reply this slow times out an attempt allowed TIMEOUT_S
TIMEOUT_S = 0.4


def ask(text):
    return [{"role": "user", "content": text}]


def provider_behaviour(answers):
    """Each model's replies in turn (the last one repeats): "abort" bills the whole max_tokens and gives up,
    "slow" answers after the attempt's timeout, "busy" is a 503 (refused before any work), "gateway" a proxy's
    504 (the provider behind it may have done the work), "ok" answers."""
    counts: dict[str, int] = {}

    def reply(body):
        model = body["model"]
        script = answers[model]
        step = script[min(counts.get(model, 0), len(script) - 1)]
        counts[model] = counts.get(model, 0) + 1
        limit = body.get("max_tokens") or 16
        if step == "abort":
            return 200, completion(model, "The answer is", "abort", completion_tokens=limit)
        if step == "busy":
            return 503, {"error": {"message": "overloaded"}}
        if step == "gateway":
            return 504, {"error": {"message": "upstream timed out"}}
        if step == "slow":
            time.sleep(SLOW_S)
        return 200, completion(model, "The answer is 42", completion_tokens=min(limit, 6))

    return reply


def spec(server, **overrides):
    return ProviderSpec(id="p", base_url=server.base_url, max_retries=3, backoff_base_s=0.01, backoff_max_s=0.02,
                        timeout_s=TIMEOUT_S, **overrides)


def priced(worker_id, price=1e3, max_tokens=16):
    return WorkerSpec(id=worker_id, description=f"{worker_id} model", provider="p", price_in_per_m=price,
                      price_out_per_m=4 * price, sampling={"max_tokens": max_tokens})


def call(server, answers_for, worker_id, **kwargs):
    client = ProviderClient(spec(server), [priced(w) for w in answers_for])

    async def main():
        try:
            return await client.chat(worker_id, ask("q"), **kwargs)
        except WorkerCallError as exc:
            return exc
        finally:
            await client.close()

    return asyncio.run(asyncio.wait_for(main(), 60)), client.stats


def test_a_call_counts_what_its_failed_attempts_were_billed_and_a_cap_stops_its_retries():
    answers = {"flaky": ["abort", "ok"], "down": ["abort"], "busy": ["busy", "busy", "ok"],
               "proxied": ["gateway", "ok"]}
    server = ReplyServer(provider_behaviour(answers))
    try:
        answered, stats = call(server, answers, "flaky")
        assert isinstance(answered, ChatResult) and answered.text == "The answer is 42"
        assert answered.failed_attempts_usd > answered.cost_usd > 0  # the billed give-up, at its whole max_tokens
        assert answered.cost_usd + answered.failed_attempts_usd == pytest.approx(stats["cost_usd"])

        failed, stats = call(server, answers, "down")  # retried three times, each billed
        assert isinstance(failed, WorkerCallError) and failed.retries == 3
        assert failed.failed_attempts_usd == pytest.approx(stats["cost_usd"]) and stats["attempts"] == 4
        assert WorkerCallError(**failed.payload()).failed_attempts_usd == failed.failed_attempts_usd  # across Ray

        sent = server.requests
        capped, stats = call(server, answers, "down", max_billable_attempts=1)
        assert isinstance(capped, WorkerCallError) and "could exceed the cost cap" in capped.message
        assert server.requests == sent + 1 and capped.failed_attempts_usd == pytest.approx(stats["cost_usd"])

        refused, stats = call(server, answers, "busy", max_billable_attempts=1)  # a 503 is not billed: retried
        assert isinstance(refused, ChatResult) and refused.retries == 2 and refused.failed_attempts_usd == 0
        assert refused.unsettled_attempts == 0

        proxied, _ = call(server, answers, "proxied", max_billable_attempts=1)  # a 504: the bill is unknown
        assert isinstance(proxied, WorkerCallError) and proxied.unsettled_attempts == 1 and proxied.retries == 0
    finally:
        server.close()


def test_an_attempt_sent_that_timed_out_is_unsettled_and_not_retried_under_a_cap():
    from conductor.provider_client import estimate_prompt_tokens

    worst_case = (estimate_prompt_tokens(ask("q")) * 1e3 + 16 * 4e3) / 1e6  # the prompt, and all of max_tokens
    for cap in (None, 1):
        server = ReplyServer(provider_behaviour({"slow": ["slow", "ok"]}))
        try:
            outcome, stats = call(server, ["slow"], "slow", max_billable_attempts=cap)
        finally:
            server.close()
        assert stats["unsettled_usd"] == pytest.approx(worst_case)  # what a training run's spend cap counts
        if cap is None:  # retried, and answered
            assert isinstance(outcome, ChatResult) and outcome.unsettled_attempts == 1 and outcome.retries == 1
        else:
            assert isinstance(outcome, WorkerCallError) and outcome.kind == "timeout"
            assert outcome.unsettled_attempts == 1 and outcome.retries == 0 and server.requests == 1


def test_a_streamed_attempt_that_times_out_before_its_first_piece_is_retried():
    """A stream's whole-attempt limit (asyncio's TimeoutError) is a timeout like any other: retried while no
    text was passed on (it was an "unexpected" failure, final), its bill unknown."""
    slow_then_quick = {"count": 0}

    def reply(body):
        slow_then_quick["count"] += 1
        if slow_then_quick["count"] == 1:
            time.sleep(SLOW_S)
        return 200, Streamed((chunk(body["model"], "The answer is 42"), chunk(body["model"], finish="stop")))

    server = ReplyServer(reply)
    try:
        pieces: list[str] = []
        answered, _ = call(server, ["w"], "w", on_delta=pieces.append)
    finally:
        server.close()
    assert isinstance(answered, ChatResult) and answered.text == "The answer is 42" == "".join(pieces)
    assert answered.retries == 1 and answered.unsettled_attempts == 1


def served(server, conductor_output, cap):
    """One request to the endpoint's orchestration over the real provider client (a LocalPool)."""
    workers = [priced("strong", 1e3), priced("mid", 1e2)]
    pool_config = PoolConfig(providers=[spec(server)], workers=workers)
    models = [ServedModel(name="m", max_steps=2, max_rounds=0)]
    config = Config(pool=pool_config, prompt={"num_fewshot": 0}, serve=ServeConfig(models=models))
    pool = LocalPool(pool_config)
    orchestrator = Orchestrator(config, ScriptedConductor(conductor_output), CharTokenizer(), pool)
    request = ServeRequest(model=orchestrator.model("m"), question=QUESTION,
                           controls=Controls(max_cost_usd=cap, trace=True))

    async def main():
        try:
            return await orchestrator.answer(request)
        finally:
            await pool.close()

    done = asyncio.run(asyncio.wait_for(main(), 60))
    return done, pool.providers["p"].stats, orchestrator


ONE_STRONG_STEP = 'model_id = [0]\nsubtasks = ["Solve it."]\naccess_list = [[]]'


def one_step_bound(orchestrator, worker_index):
    roster = orchestrator.roster(orchestrator.model("m"), Controls())
    workflow = parse_workflow(f'model_id = [{worker_index}]\nsubtasks = ["Solve it."]\naccess_list = [[]]',
                              num_workers=2, max_steps=2)
    return sum(workflow_bounds(workflow, roster, QUESTION))


@pytest.mark.parametrize("failure", ["abort", "slow"])
def test_a_worker_that_fails_after_spending_cannot_carry_a_request_past_its_cap(failure):
    """strong bills its whole max_tokens and gives up (or times out, its bill unknown): under the cap it is
    asked once, what it cost (or could have) is taken from the cap, and the fallback answers within what is
    left. Retried as an uncapped call is, strong's four attempts would cost several caps."""
    server = ReplyServer(provider_behaviour({"strong": [failure], "mid": ["ok"]}))
    try:
        _, _, sizing = served(server, ONE_STRONG_STEP, None)
        strong, mid = one_step_bound(sizing, 0), one_step_bound(sizing, 1)
        cap = strong + 1.5 * mid  # strong once and the fallback fit; a second strong attempt does not
        sent = server.requests
        done, stats, _ = served(server, ONE_STRONG_STEP, cap)
        bodies = [body["model"] for body in server.bodies[sent:]]
        assert bodies == ["strong", "mid"] and done.text == "The answer is 42"
        assert done.trace["fallback"]["worker"] == "mid"
        usage = done.trace["usage"]
        failed_step = done.trace["rounds"][0]["steps"][0]
        if failure == "abort":
            assert failed_step["failed_attempts_usd"] == pytest.approx(stats["cost_usd"] - done.trace["rounds"][1]
                                                                       ["steps"][0]["cost_usd"], rel=1e-6)
            assert done.usage.cost_usd == pytest.approx(stats["cost_usd"])  # the caller is shown the whole bill
        else:
            assert failed_step["unsettled_attempts"] == 1
            assert usage["unsettled_cost_usd_max"] == pytest.approx(strong)
        assert done.usage.spent_at_most <= cap + 1e-12
    finally:
        server.close()


def test_a_step_cancelled_in_flight_counts_its_worst_case_against_the_cap():
    """Two steps side by side: cheap fails at once, mid is cancelled while it may be at the provider. Its
    bill is unknown, so the cap counts its worst case before the fallback is chosen."""
    from tests.test_serve_orchestrator import orchestrator as scripted_orchestrator

    class Pool:
        def __init__(self):
            self.asked = []

        async def chat(self, worker_id, messages, params=None, on_delta=None, max_billable_attempts=None):
            self.asked.append((worker_id, max_billable_attempts))
            if worker_id == "cheap":
                raise WorkerCallError(worker_id, "server_error", "down")
            if worker_id == "mid":
                await asyncio.sleep(30)
            return ChatResult("ok 42", 10, 5, cost_usd=1e-6)

    side_by_side = ('model_id = [2, 1]\nsubtasks = ["Solve it.", "Solve it too."]\naccess_list = [[], []]')
    o = scripted_orchestrator(ScriptedConductor(side_by_side), None)
    o.executor.pool = pool = Pool()
    roster = o.roster(o.model("ultra"), Controls())
    bounds = workflow_bounds(parse_workflow(side_by_side, num_workers=3, max_steps=5), roster, QUESTION)
    request = ServeRequest(model=o.model("ultra"), question=QUESTION, controls=Controls(max_cost_usd=1.0, trace=True))
    done = asyncio.run(asyncio.wait_for(o.answer(request), 60))
    steps = done.trace["rounds"][0]["steps"]
    assert steps[1]["error"] == CANCELLED_IN_FLIGHT
    assert done.usage.unsettled_cost_usd_max == pytest.approx(bounds[1])
    assert done.trace["fallback"]["worker"] == "strong"
    assert {limit for _, limit in pool.asked} == {1}  # a capped request's calls: one billable attempt each
