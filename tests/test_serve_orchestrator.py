"""The endpoint's orchestration rules, with the Conductor's output scripted (a stand-in for the policy:
what is tested is what the server does with a given output, including outputs a trained policy rarely
writes) and a scripted pool: steps and worker limits, cost caps kept before spending, fallbacks, recursive
rounds, and which text streams when."""

import asyncio
import dataclasses
import json

import pytest

from conductor.config import Config, PoolConfig, WorkerSpec
from conductor.episode import ConductorTurn, EpisodeRunner
from conductor.executor import WorkflowExecutor
from conductor.pool import WorkerCallError
from conductor.rollout import Sample
from conductor.scripted_pool import ScriptedPool
from conductor.serve_config import ServeConfig, ServedModel
from conductor.serving.api_errors import ApiError
from conductor.serving.api_schema import Controls
from conductor.serving.orchestrator import Orchestrator, ServeRequest

QUESTION = "What is 6 times 7?"
SOLVE_VERIFY = ('model_id = [0, 1]\nsubtasks = ["Solve it.", "Check the answer above."]\n'
                'access_list = [[], [0]]')


class ScriptedConductor:
    """Returns the scripted outputs in order, and counts the prompts it was asked about."""

    def __init__(self, *outputs: str):
        self.outputs, self.prompts, self.samplings = list(outputs), [], []

    async def generate(self, prompts, n, sampling):
        self.prompts += prompts
        self.samplings.append(sampling)
        text = self.outputs.pop(0)
        return [[Sample(prompts[0], [1] * 10, [0.0] * 10, text, "stop", 0)]]


class CharTokenizer:
    def get_vocab(self):
        return {chr(i): i for i in range(256)}

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [ord(c) % 256 for m in messages for c in m["content"]][:2000]


def worker(worker_id, price):
    return WorkerSpec(id=worker_id, description=f"{worker_id} model", price_in_per_m=price, price_out_per_m=4 * price)


def orchestrator(conductor, pool, **serve):
    models = [ServedModel(name="mini", workers=["cheap", "mid"], max_steps=2, max_rounds=0),
              ServedModel(name="ultra", aliases=["ultra-2026-11-24"], max_steps=5, max_rounds=1),
              ServedModel(name="strict", workers=["cheap", "mid"], max_steps=2, max_rounds=1, constrain_format=True)]
    config = Config(pool=PoolConfig(workers=[worker("strong", 10.0), worker("mid", 1.0), worker("cheap", 0.1)]),
                    prompt={"num_fewshot": 0}, serve=ServeConfig(models=models, **serve))
    return Orchestrator(config, conductor, CharTokenizer(), pool)


def pool(**kw):
    return ScriptedPool({"strong": "strong says 42", "mid": "mid says 42", "cheap": "cheap says 41"}, **kw)


class Recorder:
    def __init__(self):
        self.events, self.text = [], ""

    def progress(self, event):
        self.events.append(event)

    def answer_delta(self, text):
        self.text += text


def answer(o, model, controls=None, events=None, answer_max_tokens=None):
    request = ServeRequest(o.model(model), QUESTION, controls or Controls(), answer_max_tokens)
    return asyncio.run(o.answer(request, events))


def test_a_workflow_runs_over_the_model_s_workers_and_its_last_step_answers():
    workers = pool()
    o = orchestrator(ScriptedConductor(SOLVE_VERIFY), workers)
    done = answer(o, "mini", Controls(trace=True))
    assert done.text == "mid says 42"  # the roster shown for mini is [cheap, mid]
    assert [call[0] for call in workers.calls] == ["cheap", "mid"]
    assert done.trace["workers_allowed"] == ["cheap", "mid"]
    steps = done.trace["rounds"][0]["steps"]
    assert [(s["worker"], s["status"], s["access"]) for s in steps] == [("cheap", "ok", []), ("mid", "ok", [0])]
    assert done.usage.worker_calls == 2 and done.usage.conductor_completion_tokens == 10
    assert done.usage.cost_usd == pytest.approx(sum(s["cost_usd"] for s in steps))
    assert done.trace["fallback"] is None and done.trace["timing"]["overhead_s"] >= 0


def test_the_trace_names_the_worker_each_written_step_asked_for():
    reversed_order = 'model_id = [1, 0]\nsubtasks = ["Solve it.", "Check it."]\naccess_list = [[], "all"]'
    done = answer(orchestrator(ScriptedConductor(reversed_order), pool()), "mini", Controls(trace=True))
    record = done.trace["rounds"][0]
    assert [s["worker"] for s in record["workflow"]] == ["mid", "cheap"]  # mini shows [cheap, mid]
    assert [s["worker"] for s in record["workflow"]] == [s["worker"] for s in record["steps"]]


def test_more_steps_than_allowed_are_cut_and_the_trace_says_so():
    three = ('model_id = [0, 1, 0]\nsubtasks = ["Solve it.", "Check it.", "Check again."]\n'
             'access_list = [[], [0], [1]]')
    o = orchestrator(ScriptedConductor(three), pool())
    done = answer(o, "ultra", Controls(max_steps=2, max_rounds=0))
    record = done.trace["rounds"][0]
    assert len(record["steps"]) == 2 and any("max_steps" in note for note in record["notes"])


def test_an_unparseable_output_is_answered_by_the_strongest_allowed_worker():
    o = orchestrator(ScriptedConductor("I would ask model 1, probably"), pool(), strongest_first=["mid"])
    done = answer(o, "ultra")
    assert done.text == "mid says 42"  # strongest_first puts mid before the pricier strong
    assert done.trace["fallback"]["worker"] == "mid" and "missing_list" in done.trace["fallback"]["reason"]
    done = answer(orchestrator(ScriptedConductor("no workflow"), pool()), "ultra", Controls(workers=["cheap", "mid"]))
    assert done.trace["fallback"]["worker"] == "mid"  # by price among those allowed


def test_a_worker_that_fails_for_good_hands_the_question_to_another():
    o = orchestrator(ScriptedConductor(SOLVE_VERIFY), pool(failing=frozenset({"mid"})))
    done = answer(o, "mini")
    assert done.text == "cheap says 41" and "mid" in done.trace["fallback"]["reason"]
    everyone_down = orchestrator(ScriptedConductor(SOLVE_VERIFY), pool(failing=frozenset({"mid", "cheap"})))
    with pytest.raises(ApiError) as info:
        answer(everyone_down, "mini")
    assert info.value.status == 502 and info.value.code == "workers_failed"
    # the provider's own words (here "scripted outage"; a real one can name the operator's organisation or
    # show a masked key) stay in the server's log: a caller is told the worker and the kind of failure
    assert "scripted outage" not in str(info.value.body())
    traced = orchestrator(ScriptedConductor(SOLVE_VERIFY), pool(failing=frozenset({"mid"})))
    done = answer(traced, "mini", Controls(trace=True))
    assert "scripted outage" not in json.dumps(done.trace) and "server_error" in json.dumps(done.trace)


def test_a_cost_cap_refuses_before_spending_or_cuts_the_workflow():
    workers = pool()
    with pytest.raises(ApiError) as info:
        answer(orchestrator(ScriptedConductor(SOLVE_VERIFY), workers), "ultra", Controls(max_cost_usd=1e-9))
    assert info.value.status == 400 and info.value.param == "conductor.max_cost_usd"
    assert workers.calls == []  # refused before any worker was called
    # the second step's bound (it sees the first's up to 4096 tokens) does not fit; the first does
    o = orchestrator(ScriptedConductor(SOLVE_VERIFY), workers)
    done = answer(o, "mini", Controls(max_cost_usd=0.0025))
    record = done.trace["rounds"][0]
    assert len(record["steps"]) == 1 and any("cost cap" in note for note in record["notes"])
    assert done.usage.cost_usd <= 0.0025


class WorstCasePool(ScriptedPool):
    """Bills every call at what the cap's bound allows (conductor/serving/cost_bounds.py): each message's text
    at the bound's tokens, the reply at its whole max_tokens."""

    def __init__(self, workers):
        super().__init__({"strong": "ok 42", "mid": "ok 42", "cheap": "ok 42"})
        self.workers = workers

    async def chat(self, worker_id, messages, params=None, on_delta=None, max_billable_attempts=None):
        from conductor.pool import ChatResult
        from conductor.serving.cost_bounds import price, text_tokens_bound

        reply = await super().chat(worker_id, messages, params, on_delta)
        prompt = sum(text_tokens_bound(message["content"]) for message in messages)
        completion = (params or {}).get("max_tokens", self.workers[worker_id].sampling.max_tokens)
        return ChatResult(reply.text, prompt, completion, price(self.workers[worker_id], prompt, completion))


def test_a_recursive_round_s_bound_counts_the_previous_turn_s_subtask_too():
    """A step with access "all" is sent the previous round's whole final turn: its subtask (which the Conductor
    wrote, as long as it liked) as well as its answer. Bounded on the answer alone, a worst-case bill passed
    the cap by the subtask's tokens."""
    from conductor.serving.cost_bounds import workflow_bounds
    from conductor.workflow import parse_workflow

    long = "Work through the arithmetic carefully, step by step, " * 60
    root = f'model_id = [2]\nsubtasks = ["{long}"]\naccess_list = [[]]'
    redo = 'model_id = [2]\nsubtasks = ["Check the answer above."]\naccess_list = ["all"]'

    def run(cap):
        o = orchestrator(ScriptedConductor(root, redo), None)
        o.executor.pool = WorstCasePool(o.workers)
        return o, answer(o, "ultra", Controls(max_cost_usd=cap, trace=True))

    o, uncapped = run(None)
    root_cost = uncapped.trace["rounds"][0]["steps"][0]["cost_usd"]
    roster = o.roster(o.model("ultra"), Controls())
    check = parse_workflow(redo, num_workers=3, max_steps=5, recursive_round=True)
    answer_only = sum(workflow_bounds(check, roster, QUESTION, previous_final=("", "ok 42")))
    whole_turn = sum(workflow_bounds(check, roster, QUESTION, previous_final=(long, "ok 42")))
    assert answer_only < uncapped.trace["rounds"][1]["steps"][0]["cost_usd"] <= whole_turn
    cap = root_cost + answer_only + 1e-9  # room for the check as the answer alone bounds it, not as it is sent
    _, capped = run(cap)
    assert capped.usage.cost_usd <= cap
    assert any("no step fits" in note for note in capped.trace["rounds"][1]["notes"])


@pytest.mark.parametrize("text", [
    "求函数的导数并说明理由" * 20,
    "Найдитепроизводнуюфункции" * 20,
    "फलनकाअवकलजज्ञातकीजिए" * 20,
    "".join(chr(0x1D400 + i % 52) for i in range(500)),  # 4-byte characters
])
def test_the_prompt_bound_holds_for_a_byte_level_tokenizer_in_every_script(text):
    """The cap's bound counted three characters a token; a byte-level tokenizer makes up to a token a byte of
    Chinese, Hindi or mathematical letters (2-4 a character), so a question in them spent up to 12x the cap.
    (ASCII stays at three characters a token, which real tokenizers beat; the tiny test one does not.)"""
    from conductor.serving.cost_bounds import text_tokens_bound
    from learner.tiny_policy import build_tokenizer, default_corpus

    tokenizer = build_tokenizer(default_corpus(), 512)
    assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= text_tokens_bound(text)
    assert text_tokens_bound("abc" * 10 + text) == 10 + len(text.encode("utf-8"))


def test_a_recursive_round_can_accept_or_replace_the_answer_and_streams_only_the_final_text():
    accept = 'model_id = []\nsubtasks = []\naccess_list = []'
    redo = 'model_id = [0]\nsubtasks = ["Check the answer above."]\naccess_list = ["all"]'
    events = Recorder()
    done = answer(orchestrator(ScriptedConductor(SOLVE_VERIFY, accept), pool()), "ultra", events=events)
    assert [r["status"] for r in done.trace["rounds"]] == ["ok", "accepted_previous"]
    assert events.text == "" and not done.streamed  # round 0 could have been replaced: sent whole at the end
    events = Recorder()
    done = answer(orchestrator(ScriptedConductor(SOLVE_VERIFY, redo), pool()), "ultra", events=events)
    assert done.text == "strong says 42" and done.streamed and events.text == done.text
    kinds = [e["type"] for e in events.events]
    assert kinds.count("step.started") == kinds.count("step.finished") == 3 and kinds[0] == "workflow"


def test_a_format_constrained_model_decodes_under_the_expression_of_the_request_s_workers_and_steps():
    from conductor.workflow_constraint import matches

    accept = 'model_id = []\nsubtasks = []\naccess_list = []'
    conductor = ScriptedConductor(SOLVE_VERIFY, accept)
    done = answer(orchestrator(conductor, pool()), "strict")
    assert done.text == "mid says 42"
    root, recursive = (s.format_regex for s in conductor.samplings)
    assert matches(root, SOLVE_VERIFY) and not matches(root, accept)  # only a recursive turn may stop
    assert matches(recursive, accept) and matches(recursive, SOLVE_VERIFY)
    three_steps = ('model_id = [0, 1, 1]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], [0], [1]]')
    assert not matches(root, three_steps)                                             # the model's max_steps
    assert not matches(root, SOLVE_VERIFY.replace("[0, 1]", "[0, 2]"))                 # two workers allowed
    narrowed = ScriptedConductor('model_id = [0]\nsubtasks = ["Solve it."]\naccess_list = [[]]', accept)
    answer(orchestrator(narrowed, pool()), "strict", Controls(workers=["cheap"], max_steps=1))
    assert not matches(narrowed.samplings[0].format_regex, SOLVE_VERIFY)  # a request narrows it further
    plain = ScriptedConductor(SOLVE_VERIFY)
    answer(orchestrator(plain, pool()), "mini")
    assert plain.samplings[0].format_regex is None
    with pytest.raises(ValueError, match="max_steps 9"):
        ServedModel(name="wide", max_steps=9, constrain_format=True)


def test_asking_for_a_worker_the_model_lacks_or_an_unknown_model_is_refused():
    o = orchestrator(ScriptedConductor(SOLVE_VERIFY), pool())
    with pytest.raises(ApiError) as info:
        answer(o, "mini", Controls(workers=["strong"]))
    assert info.value.status == 400 and info.value.param == "conductor.workers"
    with pytest.raises(ApiError) as info:
        o.model("gigantic")
    assert info.value.status == 404
    assert o.model("ultra-2026-11-24").name == "ultra"


class ContextPool(ScriptedPool):
    """Workers with a context window of ``context_words`` and a reply cut at the call's ``max_tokens``
    words (``finish_reason`` "length"), as a provider does; it records each call's params."""

    def __init__(self, context_words, **kw):
        super().__init__({"strong": "strong says 42", "mid": "mid says 42", "cheap": "cheap says 41"}, **kw)
        self.context_words, self.params = context_words, []

    async def chat(self, worker_id, messages, params=None, on_delta=None, max_billable_attempts=None):
        self.params.append(dict(params or {}))
        too_long = sum(len(m["content"].split()) for m in messages) > self.context_words
        if too_long and worker_id not in self.failing:
            self.calls.append((worker_id, messages))
            raise WorkerCallError(worker_id, "context_length", "maximum context length exceeded")
        result = await super().chat(worker_id, messages, params, on_delta)
        limit = (params or {}).get("max_tokens", 10**9)
        words = result.text.split()
        if len(words) <= limit:
            return result
        return dataclasses.replace(result, text=" ".join(words[:limit]), completion_tokens=limit,
                                   finish_reason="length")


def test_a_question_that_fits_no_worker_is_a_context_length_error_not_a_worker_failure():
    long_question = "word " * 5000  # past the scripted Conductor's 4,096-character bound: never tokenized
    conductor, workers = ScriptedConductor(), ContextPool(context_words=1000)
    o = orchestrator(conductor, workers)
    request = ServeRequest(o.model("ultra"), long_question, Controls(), question_param="input")
    with pytest.raises(ApiError) as info:
        asyncio.run(o.answer(request))
    assert info.value.status == 400 and info.value.code == "context_length_exceeded"
    assert info.value.param == "input" and conductor.prompts == []
    assert sorted(call[0] for call in workers.calls) == ["cheap", "mid", "strong"]  # each allowed worker asked
    fits_one = orchestrator(ScriptedConductor(), ContextPool(context_words=1000, failing=frozenset({"mid"})))
    with pytest.raises(ApiError) as info:  # a worker down for another reason: the workers' failure, a 5xx
        asyncio.run(fits_one.answer(ServeRequest(fits_one.model("mini"), long_question, Controls())))
    assert info.value.status == 502


def test_the_answer_s_limit_and_sampling_reach_its_worker_and_a_cut_answer_says_length():
    workers = ContextPool(context_words=10**6)
    o = orchestrator(ScriptedConductor(SOLVE_VERIFY), workers)
    request = ServeRequest(o.model("mini"), QUESTION, Controls(), answer_max_tokens=1,
                           answer_sampling={"temperature": 0.3, "seed": 7})
    done = asyncio.run(o.answer(request))
    assert done.text == "mid" and done.finish_reason == "length"
    assert workers.params[0].get("max_tokens") is None and "temperature" not in workers.params[0]  # the solver
    assert workers.params[1] == {"max_tokens": 1, "temperature": 0.3, "seed": 7}  # the answering step
    whole = asyncio.run(orchestrator(ScriptedConductor(SOLVE_VERIFY), ContextPool(10**6)).answer(
        ServeRequest(o.model("mini"), QUESTION, Controls())))
    assert whole.text == "mid says 42" and whole.finish_reason == "stop"


class WholeCharTokenizer(CharTokenizer):
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [ord(c) % 256 for m in messages for c in m["content"]]


def test_a_served_episode_is_training_s_the_same_worker_calls_and_recursive_prompt():
    """Uncapped, the endpoint's episode is what training's EpisodeRunner does with the same Conductor turns."""
    redo = 'model_id = [2]\nsubtasks = ["Check the answer above."]\naccess_list = ["all"]'
    served_pool, conductor = pool(), ScriptedConductor(SOLVE_VERIFY, redo)
    o = orchestrator(conductor, served_pool)
    o.prompts.tokenizer = WholeCharTokenizer()
    done = answer(o, "ultra")
    training_pool, turns = pool(), []

    async def turn(messages):
        turns.append(messages)
        return ConductorTurn(redo)

    roster = o.roster(o.model("ultra"), Controls())
    episode = asyncio.run(EpisodeRunner(WorkflowExecutor(training_pool), (), max_steps=5).run(
        QUESTION, roster, SOLVE_VERIFY, recursive_rounds=1, conductor=turn))
    assert served_pool.calls == training_pool.calls and len(served_pool.calls) == 3
    assert conductor.prompts[1] == WholeCharTokenizer().apply_chat_template(turns[0])
    assert done.text == episode.answer == "cheap says 41"
