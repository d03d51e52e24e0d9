"""A reward server (``verifier: http``, ``reward_server: {url, ...}``), tested against a real HTTP server on
loopback (tests/support/reward_server.py) that injects faults: a call that failed is never scored, only
an infrastructure error; retries recover batch faults; concurrent checks share POSTs; a bad setting fails
at config load naming it; a key is sent but never shown. Ray-free: the scorer training and evaluation
share (conductor/episode_score.py) drives it."""

import asyncio
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from cluster.preflight import preflight
from conductor.call_batcher import CallBatcher
from conductor.config_loader import ConfigError, load_config
from conductor.episode import EpisodeResult
from conductor.episode_score import EpisodeScorer, Status
from conductor.rewards import RewardConfig
from conductor.tasks import load_tasks
from conductor.trace import RoundTrace, StepTrace
from conductor.verifiers import http_reward, registry
from conductor.verifiers.verify import verify
from tests.support.reply_server import Raw, ReplyServer
from tests.support.reward_server import BATCH_FAULTS, CORRECT, WRONG, FaultyRewardServer, true_score

ITEMS = 400
SECRET = "sk-never-shown-4711"


def dataset(tmp_path, url: str, count: int = 3, **settings) -> dict:
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"q": f"What is {i} + {i}?", "gold": str(2 * i), "key": i,
                                        "level": i % 3}) + "\n" for i in range(count)))
    return {"path": str(path), "fields": {"question": "q", "answer": "gold", "id": "key"}, "domain": "sums",
            "verifier": "http", "reward_server": {"url": url, **settings}, "meta": ["level"]}


def tasks_of(tmp_path, entry: dict, overrides=()) -> list:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"data": {"datasets": [entry]}}))
    [spec] = load_config(path, overrides).data.datasets
    return load_tasks(spec)


def episode(answer: str) -> EpisodeResult:
    step = StepTrace(round=0, index=0, shown_worker=0, worker_id="w", subtask="s", access=(), visible=(),
                     response=answer, tokens_in=30, tokens_out=20, cost_usd=0.0)
    return EpisodeResult([RoundTrace(0, "text", steps=[step])], answer=answer)


def score_all(tasks, responses, threads: int = 16):
    scorer = EpisodeScorer(threads=ThreadPoolExecutor(threads))

    async def run():
        return await asyncio.gather(*(scorer.score(t, episode(r)) for t, r in zip(tasks, responses)))

    return asyncio.run(run())


CLOSED_PORT = 1  # a port nothing listens on (a free ephemeral port, once released, may be taken meanwhile)


def test_a_faulty_server_never_has_a_failed_call_scored_and_retries_recover_its_batch_faults(tmp_path):
    with FaultyRewardServer(seed=3, hang_s=30) as server:
        entry = dataset(tmp_path, server.url, ITEMS, timeout_s=6.0, retries=3, backoff_base_s=0.02,
                        backoff_max_s=0.2, batch_size=5, batch_wait_s=0.05)
        tasks = tasks_of(tmp_path, entry)
        responses = [f"Adding.\nAnswer: {t.answer}" if i % 2 else f"Answer: {t.answer}1" for i, t in enumerate(tasks)]
        scores = score_all(tasks, responses)

    assert sorted(server.fault_counts()) == sorted(BATCH_FAULTS)  # every kind of batch fault was met
    assert len(server.requests) < ITEMS and max(map(len, server.requests)) > 1  # POSTs carried batches
    assert max(map(len, server.requests)) <= 5
    first = server.requests[0][0]
    assert set(first) == {"id", "domain", "question", "answer", "response", "meta"}
    task = next(t for t in tasks if t.id == first["id"])
    assert (first["domain"], first["question"], first["answer"], first["meta"]) == (
        "sums", task.prompt, task.answer, {"level": task.meta["level"]})

    never_judged, unscored = set(), set()
    for task, response, score in zip(tasks, responses, scores):
        if server.item_fault({"id": task.id, "response": response})[0]:
            never_judged.add(task.id)
        if score.status is Status.INFRA_ERROR:
            unscored.add(task.id)
            assert score.reward is None and score.score is None and not score.correct
            assert score.infra_error.startswith(f"verifier: reward server {server.url}: ")
            continue
        truth = true_score(task.answer, response)  # never 0: a 0 would be a score the server did not give
        assert score.score == truth and score.correct == (truth == CORRECT)
        assert score.reward == pytest.approx(RewardConfig().wrong + truth * (1 - RewardConfig().wrong))
    assert never_judged and never_judged <= unscored  # null, NaN, 1.5, "yes": each unscored, none wrong
    faulted = {item_id for _, ids in server.faults for item_id in ids}
    unrecovered = unscored - never_judged
    assert len(unrecovered) <= ITEMS // 50 and len(faulted - unscored) > len(unrecovered)  # retries recovered
    assert sum(score.status is Status.INFRA_ERROR for score in scores) == len(unscored)
    assert {score.score for score in scores if score.scored} == {CORRECT, WRONG}


@pytest.mark.parametrize("setting, value, message", [
    ("url", "ftp://127.0.0.1/score", r"reward_server\.url: .*not an http\(s\) URL with a host"),
    ("url", "127.0.0.1:8000/score", r"reward_server\.url: .*not an http\(s\) URL with a host"),
    ("url", "http://127.0.0.1:99999/score", r"reward_server\.url: .*not a URL \(Port out of range"),
    ("url", "http://me:pw@127.0.0.1/score", r"reward_server\.url: .*credentials do not belong in the URL.*"
     r"\(value hidden\)"),
    ("url", "http://127.0.0.1/score#top", r"reward_server\.url: .*#fragment"),
    ("timeout_s", 0, r"reward_server\.timeout_s: Input should be greater than 0"),
    ("retries", -1, r"reward_server\.retries: Input should be greater than or equal to 0"),
    ("batch_size", 0, r"reward_server\.batch_size: Input should be greater than or equal to 1"),
    ("batch_wait_s", -0.1, r"reward_server\.batch_wait_s: Input should be greater than or equal to 0"),
    ("api_key_env", "MY-KEY", r"reward_server\.api_key_env: String should match pattern"),
    ("batch", 8, r"reward_server\.batch: unknown key"),
])
def test_a_bad_setting_fails_at_config_load_naming_it(tmp_path, setting, value, message):
    entry = dataset(tmp_path, "http://127.0.0.1:9/score")
    entry["reward_server"][setting] = value
    with pytest.raises(ConfigError, match=r"data\.datasets\.0\." + message) as failure:
        tasks_of(tmp_path, entry)
    assert "pw@" not in str(failure.value)


@pytest.mark.parametrize("change, message", [
    (lambda entry: entry.pop("reward_server"), r"verifier http needs reward_server: \{url: "),
    (lambda entry: entry.update(verifier="text"), r"reward_server is for verifier http; verifier text"),
])
def test_the_verifier_and_its_server_come_together(tmp_path, change, message):
    entry = dataset(tmp_path, "http://127.0.0.1:9/score")
    change(entry)
    with pytest.raises(ConfigError, match=message):
        tasks_of(tmp_path, entry)


def test_the_server_need_not_be_up_at_load_and_one_that_is_down_is_an_infra_error_after_the_retries(tmp_path):
    port = CLOSED_PORT
    [task, *_] = tasks_of(tmp_path, dataset(tmp_path, f"http://127.0.0.1:{port}/score?token=abc", retries=2,
                                            backoff_base_s=0.01))
    verdict = verify(task, "Answer: 0")
    assert not verdict.correct and verdict.score is None
    assert verdict.infra_error == (f"reward server http://127.0.0.1:{port}/score: connection failed (ConnectError) "
                                   "(3 tries)")  # the query, where a token may be, is never shown
    assert "token=abc" not in repr(task)


def test_preflight_names_a_server_that_takes_no_connection_and_a_key_that_is_not_set(tmp_path, monkeypatch):
    monkeypatch.delenv("REWARD_KEY", raising=False)
    port = CLOSED_PORT
    down = dataset(tmp_path, f"http://127.0.0.1:{port}/score?token=abc", api_key_env="REWARD_KEY")

    def problems(entry):
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump({"data": {"datasets": [entry]}, "output": {"dir": str(tmp_path / "out")}}))
        return [problem for problem in preflight(load_config(path)) if "reward_server" in problem]

    assert problems(down) == [
        "data.datasets[0].reward_server.api_key_env: environment variable REWARD_KEY is not set",
        f"data.datasets[0].reward_server.url http://127.0.0.1:{port}/score: cannot connect (ConnectionRefusedError)"]
    monkeypatch.setenv("REWARD_KEY", SECRET)
    with FaultyRewardServer() as server:
        assert problems(dataset(tmp_path, server.url, api_key_env="REWARD_KEY")) == []


def test_a_refused_request_fails_fast_and_the_key_is_sent_but_never_shown(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with FaultyRewardServer(period=10**6, item_fault_rate=0, api_key=SECRET) as server:
        [task, *_] = tasks_of(tmp_path, dataset(tmp_path, server.url, api_key_env="REWARD_KEY", batch_wait_s=0))
        unset = verify(task, "Answer: 0")
        assert unset.infra_error.endswith("environment variable REWARD_KEY (reward_server.api_key_env) is not set")
        assert not server.requests  # nothing sent without the key

        monkeypatch.setenv("REWARD_KEY", SECRET)
        right = verify(task, "Answer: 0")
        assert right.score == CORRECT and right.correct
        assert server.headers_seen[-1]["authorization"] == f"Bearer {SECRET}"

        monkeypatch.setenv("REWARD_KEY", "sk-wrong")
        refused = verify(task, "Answer: 0")
        assert refused.infra_error.endswith("HTTP 401 (the server refused the request; not retried)")
        assert len(server.requests) == 2  # the 401 was not retried
    assert SECRET not in caplog.text and "sk-wrong" not in caplog.text
    assert SECRET not in repr((unset, right, refused, task))


def test_the_simulator_and_the_votes_read_an_http_tasks_answer_as_text():
    spec, text = registry.get("http"), registry.get("text")
    assert (spec.final_value, spec.answer_key, spec.instruction) == (text.final_value, text.answer_key,
                                                                      text.instruction)
    assert not spec.reference  # a server may judge without a reference
    assert spec.check is http_reward.check


def test_concurrent_calls_share_batches_and_a_failed_send_reaches_every_caller():
    sent = []

    def send(items):
        sent.append(list(items))
        if "boom" in items:
            raise RuntimeError("send failed")
        return [item * 2 for item in items]

    batcher = CallBatcher(send, size=4, wait_s=60)  # only full batches go: no caller waits out the minute
    with ThreadPoolExecutor(8) as threads:
        assert list(threads.map(batcher.call, range(8))) == [item * 2 for item in range(8)]
    assert sorted(map(len, sent)) == [4, 4]

    failing = CallBatcher(send, size=2, wait_s=60)
    errors = []

    def call(item):
        try:
            failing.call(item)
        except RuntimeError as exc:
            errors.append(str(exc))

    callers = [threading.Thread(target=call, args=(item,)) for item in ("boom", "x")]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert errors == ["send failed", "send failed"]


def test_a_preset_format_is_scored_by_a_reward_server_with_its_own_prompt(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(json.dumps({"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"})
                    + "\n")
    preset = {"format": "gsm8k", "path": str(path)}
    [built_in] = tasks_of(tmp_path, preset)
    with FaultyRewardServer(seed=0, item_fault_rate=0.0) as server:
        [task] = tasks_of(tmp_path, {**preset, "verifier": "http", "reward_server": {"url": server.url}})
        assert task.verifier == "http" and task.reward_server.url == server.url
        assert (task.id, task.prompt, task.answer, task.meta) == (built_in.id, built_in.prompt, "7", built_in.meta)
        assert verify(task, "3 and 4 make 7.\nAnswer: 7").score == true_score("7", "Answer: 7")
        assert server.requests[0][0]["question"] == built_in.prompt
    with pytest.raises(ConfigError, match="reward_server is for verifier http"):
        tasks_of(tmp_path, {**preset, "reward_server": {"url": server.url}})


def test_replies_no_server_should_send_are_unscored_items_not_a_crash_and_meta_is_sent_as_strict_json():
    """A Retry-After of nan, a score too large for a float, a body nested too deep to parse: what the
    loopback server sends, in order, to the client's posts (tests/support/reply_server.py)."""
    nested = b'{"scores": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    script = [(503, Raw(b"", (("Retry-After", "nan"),))),            # retried after the backoff, not sleep(nan)
              (200, Raw(b'{"scores": [1' + b"0" * 400 + b', 0.5]}')),
              (200, Raw(nested)),                                     # not parsed: retried
              (200, Raw(b'{"scores": [1.0]}'))]
    server = ReplyServer(lambda body: script.pop(0))
    try:
        client = http_reward.RewardServerClient(http_reward.RewardServer(
            url=server.base_url + "/score", retries=1, backoff_base_s=0.01, backoff_max_s=0.02, batch_size=2,
            batch_wait_s=5))
        items = [{"id": "a", "meta": {"m": float("inf"), "rows": [float("nan"), 1.5]}}, {"id": "b", "meta": {}}]
        outcomes = client._post(items)
        assert outcomes[0].score is None and outcomes[0].kind == "out_of_range" and outcomes[1].score == 0.5
        sent = server.bodies  # meta's infinity and NaN went out as null, not as a bare Infinity or NaN
        assert sent[0] == sent[1] and sent[0]["items"][0]["meta"] == {"m": None, "rows": [None, 1.5]}
        [scored] = client._post([{"id": "c"}])  # the nested body, then a good one
        assert scored.score == 1.0 and len(server.bodies) == 4
    finally:
        server.close()
