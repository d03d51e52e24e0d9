"""The worker-response cache (conductor/response_cache.py) without Ray: its key, the occurrence index, the
three modes, the answers it never stores, Parquet shards locally and on S3 (the SeaweedFS server), and a
replay-only miss that stops an episode instead of unscoring it. Calls go through the real provider client
and the official openai client to the simulator (or, for refusals, a small HTTP server) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from conductor.config import ProviderSpec, WorkerSpec
from conductor.config_loader import ConfigError, load_config
from conductor.executor import WorkflowExecutor
from conductor.local_pool import LocalPool
from conductor.pool import ChatResult, ReplayMiss, WorkerCallError
from conductor.provider_client import ProviderClient
from conductor.response_cache import CachedClient, cacheable, combined_stats, request_digest, storable
from conductor.response_cache_config import ResponseCacheConfig
from conductor.response_store import NewEntry, ResponseStore, StoredAnswer
from conductor.roster import Roster
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer
from conductor.simulator_config import SimulatorConfig
from conductor.workflow import parse_workflow
from tests.support.reply_server import ReplyServer, completion

TOY = SimulatorConfig(preset="toy", port=0, latency_scale=0.0, toy_items_per_domain=10)


def ask(text):
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def sim():
    with SimulatorServer(TOY) as server:
        yield server


def sim_pool(sim, path, mode="read-write", **options):
    cache = ResponseCacheConfig(mode=mode, path=str(path), **options)
    return LocalPool(simulated_pool_config(sim.state.preset, sim.base_url).model_copy(update={"cache": cache}))


def served(sim):
    return sum(sim.state.counts.values())


def run(pool, calls):
    """Each (worker, messages[, params]) in order through ``pool``; the pool closed after (its cache flushed)."""
    async def main():
        try:
            return [await pool.chat(*call) for call in calls]
        finally:
            await pool.close()

    return asyncio.run(main())


def test_the_key_is_the_whole_request_and_nothing_else():
    base = request_digest("p", "m", ask("hi"), {"temperature": 0.2, "max_tokens": 10})
    assert request_digest("p", "m", ask("hi"), {"max_tokens": 10, "temperature": 0.2}) == base  # key order
    assert len({base, request_digest("q", "m", ask("hi"), {"temperature": 0.2, "max_tokens": 10}),
                request_digest("p", "n", ask("hi"), {"temperature": 0.2, "max_tokens": 10}),
                request_digest("p", "m", ask("hi!"), {"temperature": 0.2, "max_tokens": 10}),
                request_digest("p", "m", [{"role": "system", "content": "hi"}], {"temperature": 0.2, "max_tokens": 10}),
                request_digest("p", "m", ask("hi"), {"temperature": 0.3, "max_tokens": 10}),
                request_digest("p", "m", ask("hi"), {"temperature": 0.2, "max_tokens": 10, "seed": 1})}) == 7


def test_a_second_run_is_served_from_the_cache_at_the_same_answers_tokens_and_cost(sim, tmp_path):
    workers = [w.name for w in sim.state.preset.workers]
    calls = [(w, ask(f"Question:\n{t.prompt}\n\nSolve it.")) for t in sim.state.preset.tasks[:4] for w in workers]
    calls += calls[:3]  # identical requests within the run: occurrences 1
    before = served(sim)
    first = run(sim_pool(sim, tmp_path), calls)
    assert served(sim) - before == len(calls) and not any(r.cached for r in first)

    pool = sim_pool(sim, tmp_path)
    second = run(pool, calls)
    assert served(sim) - before == len(calls)  # nothing new reached the provider
    assert all(r.cached for r in second)
    assert [(r.text, r.prompt_tokens, r.completion_tokens, r.cost_usd) for r in second] == \
        [(r.text, r.prompt_tokens, r.completion_tokens, r.cost_usd) for r in first]
    [stats] = pool.stats().values()
    assert stats["calls"] == 0 and stats["cost_usd"] == 0  # nothing spent, no rate-limit slot taken
    cache = stats["cache"]
    assert (cache["hits"], cache["misses"], cache["identical"]) == (len(calls), 0, 3)
    assert cache["hit_rate"] == 1.0 and cache["identical_share"] == pytest.approx(3 / len(calls))
    assert cache["saved_usd"] == pytest.approx(sum(r.cost_usd for r in first)) and cache["saved_usd"] > 0
    assert combined_stats([stats, stats])["hits"] == 2 * len(calls)


def write_answers(path, provider, worker, model, messages, sampling, texts):
    digest = request_digest(provider, model, messages, sampling)
    ResponseStore(str(path)).append(provider, [
        NewEntry((digest, n), provider, model, worker, StoredAnswer(text, 3, 2, 0, 0.001, "stop"))
        for n, text in enumerate(texts)])
    return digest


def test_the_nth_identical_request_gets_the_nth_answer_unless_identical_calls_share_one(sim, tmp_path):
    spec = simulated_pool_config(sim.state.preset, sim.base_url)
    worker = spec.workers[0]
    sampling = worker.sampling.call_defaults()
    write_answers(tmp_path, "sim", worker.id, worker.model_name, ask("same"), sampling, ["first", "second"])

    def replay(share):
        config = ResponseCacheConfig(mode="replay-only", path=str(tmp_path), share_identical=share)
        client = CachedClient(ProviderClient(spec.providers[0], spec.workers), config)

        async def main():
            texts = []
            for _ in range(3):
                try:
                    texts.append((await client.chat(worker.id, ask("same"))).text)
                except ReplayMiss as exc:
                    texts.append(str(exc))
            return texts
        return asyncio.run(main())

    in_order = replay(share=False)
    assert in_order[:2] == ["first", "second"] and "identical request #3" in in_order[2]
    assert replay(share=True) == ["first", "first", "first"]


def test_a_resumed_run_counts_on_from_its_kept_occurrences_and_never_serves_itself_an_old_draw(sim, tmp_path):
    """A resumed run's pool starts from the counts its checkpoint kept (cluster/cache_occurrences.py): its
    next identical request is the third of the run, a new call, as in the unbroken run; counted from zero it
    would be served the first segment's answers again."""
    spec = simulated_pool_config(sim.state.preset, sim.base_url)
    worker, config = spec.workers[0].id, ResponseCacheConfig(mode="read-write", path=str(tmp_path))
    first = CachedClient(ProviderClient(spec.providers[0], spec.workers), config)
    before = run(first, [(worker, ask("same")), (worker, ask("same"))])
    counts = first.occurrences()
    assert list(counts.values()) == [2]
    resumed = CachedClient(ProviderClient(spec.providers[0], spec.workers), config, seen=counts)
    served_before = served(sim)
    after = run(resumed, [(worker, ask("same"))])
    assert served(sim) == served_before + 1 and not after[0].cached and len(before) == 2


def test_the_counts_a_checkpoint_keeps_are_merged_with_those_kept_before(tmp_path):
    """A provider whose pool actor does not answer at a checkpoint keeps the counts it had, and one whose
    actor restarted (counting from the segment's start again) keeps the larger counts, digest by digest."""
    from cluster import cache_occurrences
    from conductor.run_output import RunOutput

    class Answering:
        caching = True

        def __init__(self, counts):
            self.counts = counts

        def occurrences(self):
            return self.counts

    out = RunOutput(str(tmp_path), "run")
    assert cache_occurrences.load(out) == {}
    cache_occurrences.save(out, Answering({"a": {"d1": 2}, "b": {"d2": 1}}))
    cache_occurrences.save(out, Answering({"a": {"d1": 3, "d3": 1}}))  # b's actor did not answer
    assert cache_occurrences.load(out) == {"a": {"d1": 3, "d3": 1}, "b": {"d2": 1}}
    cache_occurrences.save(out, Answering({"a": {"d1": 1, "d4": 2}, "b": {}}))  # a's actor restarted
    assert cache_occurrences.load(out) == {"a": {"d1": 3, "d3": 1, "d4": 2}, "b": {"d2": 1}}


def test_identical_calls_in_flight_at_once_share_one_provider_call(sim, tmp_path):
    pool = sim_pool(sim, tmp_path, share_identical=True)
    worker = sim.state.preset.workers[0].name
    before = served(sim)

    async def main():
        try:
            return await asyncio.gather(*(pool.chat(worker, ask("at once")) for _ in range(4)))
        finally:
            await pool.close()

    results = asyncio.run(main())
    assert served(sim) - before == 1 and len({r.text for r in results}) == 1 and sum(r.cached for r in results) == 3


def test_replay_only_spends_nothing_and_a_miss_names_the_request(sim, tmp_path):
    pool = sim_pool(sim, tmp_path, mode="replay-only")
    worker = sim.state.preset.workers[1].name
    messages = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "x"},
                {"role": "user", "content": "Check   the\nanswer " + "very long " * 20}]
    sampling = simulated_pool_config(sim.state.preset, sim.base_url).workers[1].sampling.call_defaults()
    digest = request_digest("sim", worker, messages, sampling)
    before = served(sim)
    with pytest.raises(ReplayMiss) as info:
        run(pool, [(worker, messages)])
    assert served(sim) == before
    message = str(info.value)
    assert f"worker {worker}" in message and digest[:12] in message and "'Check the answer very long" in message
    assert not isinstance(info.value, WorkerCallError)


def test_a_replay_miss_stops_the_episode_instead_of_unscoring_it(sim, tmp_path):
    """The executor unscores a step whose call failed (WorkerCallError); a ReplayMiss it must raise."""
    pool = sim_pool(sim, tmp_path, mode="replay-only")
    roster = Roster.full(simulated_pool_config(sim.state.preset, sim.base_url).workers)
    workflow = parse_workflow("model_id = [0, 1]\nsubtasks = ['Solve it.', 'Check it.']\naccess_list = [[], [0]]",
                              num_workers=len(roster), max_steps=5)
    with pytest.raises(ReplayMiss):
        asyncio.run(WorkflowExecutor(pool).execute(workflow, "2 + 2?", roster))


def test_an_answer_cut_off_or_an_error_is_never_stored(sim, tmp_path):
    worker = sim.state.preset.workers[0].name
    question = f"Question:\n{sim.state.preset.tasks[0].prompt}\n\nSolve it."
    [cut] = run(sim_pool(sim, tmp_path), [(worker, ask(question), {"max_tokens": 1})])
    assert cut.finish_reason == "length"
    pool = sim_pool(sim, tmp_path)
    before = served(sim)
    [again] = run(pool, [(worker, ask(question), {"max_tokens": 1})])
    assert not again.cached and served(sim) == before + 1
    assert next(iter(pool.stats().values()))["cache"]["uncacheable"] == 1
    assert not list(tmp_path.rglob("*.parquet"))

    down = simulated_pool_config(sim.state.preset, "http://127.0.0.1:1/v1", max_retries=0)
    pool = LocalPool(down.model_copy(update={"cache": ResponseCacheConfig(mode="read-write", path=str(tmp_path))}))
    with pytest.raises(WorkerCallError):
        run(pool, [(worker, ask(question))])
    assert not list(tmp_path.rglob("*.parquet"))


def refusing(body):
    """A refusal beside the text, OpenAI's refusal with no content, a billed reply with no answer, or a
    ``content_filter`` finish, by the model asked. The simulator has none of them."""
    content, refusal, finish = {
        "r": ("Sorry.", "I cannot help with that.", "stop"),
        "n": (None, "I cannot help with that.", "stop"),
        "e": (None, None, "stop"),
    }.get(body["model"], ("Sorry.", None, "content_filter"))
    return 200, completion(body["model"], content, finish, refusal)


def test_a_refusal_is_never_stored(tmp_path):
    server = ReplyServer(refusing)
    try:
        spec = ProviderSpec(id="p", base_url=server.base_url, max_retries=0)
        workers = [WorkerSpec(id=name, description="d", provider="p") for name in ("r", "f")]
        config = ResponseCacheConfig(mode="read-write", path=str(tmp_path))
        for _ in range(2):
            client = CachedClient(ProviderClient(spec, workers), config)
            results = asyncio.run(asyncio.wait_for(_both(client), 30))
            assert [r.finish_reason for r in results] == ["content_filter", "content_filter"]
            assert not any(r.cached for r in results)
        assert server.requests == 4 and not list(tmp_path.rglob("*.parquet"))
    finally:
        server.close()


def test_a_refusal_without_text_is_counted_once_and_an_empty_answer_is_counted_at_every_attempt(tmp_path):
    """OpenAI sends a refusal as ``content: null`` beside ``refusal``: one billed answer, not a malformed
    response to retry uncounted. A reply with usage but no content is a failure, yet each attempt was billed."""
    server = ReplyServer(refusing)
    try:
        spec = ProviderSpec(id="p", base_url=server.base_url, max_retries=2, backoff_base_s=0.01,
                            backoff_max_s=0.02)
        workers = [WorkerSpec(id=name, description="d", provider="p", price_in_per_m=1e3, price_out_per_m=1e3)
                   for name in ("n", "e")]
        client = ProviderClient(spec, workers)

        async def main():
            try:
                refused = await client.chat("n", ask("q"))
                with pytest.raises(WorkerCallError):
                    await client.chat("e", ask("q"))
                return refused
            finally:
                await client.close()

        refused = asyncio.run(asyncio.wait_for(main(), 30))
        assert (refused.text, refused.finish_reason, refused.retries) == ("", "content_filter", 0)
        assert refused.cost_usd == pytest.approx(7e-3)
        assert server.requests == 4  # the refusal once, the empty answer at each of its three attempts
        assert client.stats["cost_usd"] == pytest.approx(4 * 7e-3)
    finally:
        server.close()


async def _both(client):
    try:
        return [await client.chat("r", ask("q")), await client.chat("f", ask("q"))]
    finally:
        await client.close()


def test_new_answers_are_written_every_flush_every_and_when_the_pool_closes(sim, tmp_path):
    import pyarrow.parquet as pq

    worker = sim.state.preset.workers[0].name
    run(sim_pool(sim, tmp_path, flush_every=2), [(worker, ask(f"flush {i}")) for i in range(5)])
    shards = sorted((tmp_path / "provider=sim").glob("*.parquet"))
    assert [pq.read_metadata(shard).num_rows for shard in shards] == [2, 2, 1]


class SteppingClock:
    """time.time for the store, a second later at each call: the order of writes, not the machine's clock
    resolution, decides which shard is earlier."""

    def __init__(self):
        self.now = 1_800_000_000.0

    def time(self) -> float:
        self.now += 1.0
        return self.now


def test_shards_round_trip_and_the_earliest_answer_wins(tmp_path, monkeypatch):
    monkeypatch.setattr("conductor.response_store.time", SteppingClock())
    first, second = ResponseStore(str(tmp_path)), ResponseStore(str(tmp_path))
    answer = StoredAnswer("a", 1, 2, 0, 0.5, "stop")
    first.append("p", [NewEntry(("d", 0), "p", "m", "w", answer), NewEntry(("d", 1), "p", "m", "w", answer)])
    second.append("p", [NewEntry(("d", 0), "p", "m", "w", StoredAnswer("later", 1, 1, 0, 0.1, "stop"))])
    second.append("q", [NewEntry(("d", 0), "q", "m", "w", answer)])
    (tmp_path / "provider=p" / "_tmp-unfinished").write_bytes(b"half a shard")
    assert ResponseStore(str(tmp_path)).load("p") == {("d", 0): answer, ("d", 1): answer}
    assert ResponseStore(str(tmp_path)).load("nobody") == {}


def test_an_unreadable_shard_or_a_row_with_a_field_missing_is_a_miss_not_a_run_that_cannot_start(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from conductor.response_store import SCHEMA

    store = ResponseStore(str(tmp_path))
    store.append("p", [NewEntry(("good", 0), "p", "m", "w", StoredAnswer("ok", 1, 1, 0, 0.1, "stop"))])
    (tmp_path / "provider=p" / "9999999999999-cut-000001.parquet").write_bytes(b"PAR1 cut short")
    row = dict.fromkeys(SCHEMA.names, None) | {"digest": "nulls", "occurrence": 0, "completion_tokens": 1}
    pq.write_table(pa.Table.from_pylist([row], schema=SCHEMA), tmp_path / "provider=p" / "9999999999998-x-1.parquet")
    reader = ResponseStore(str(tmp_path))
    assert list(reader.load("p")) == [("good", 0)] and reader.rows_skipped == 1


def test_an_answer_that_is_not_utf8_is_served_but_never_stored(tmp_path):
    """A lone surrogate (half an emoji, as JSON's "\\ud83d" decodes) is a Python string Parquet cannot hold:
    stored, it would make every later shard write fail."""
    broken = ChatResult("half \ud83d an emoji", 1, 1, 0.0)
    assert cacheable(broken) and not storable(broken.text) and storable(dataclasses.replace(broken, text="whole").text)
    assert request_digest("p", "m", [{"role": "user", "content": broken.text}], {}) != request_digest(
        "p", "m", [{"role": "user", "content": "half"}], {})
    # through a provider that sends it: answered and not stored, while the answer after it is stored
    server = ReplyServer(lambda body: (200, completion(body["model"], broken.text if "emoji" in str(
        body["messages"]) else "fine")))
    try:
        spec = ProviderSpec(id="p", base_url=server.base_url, max_retries=0)
        config = ResponseCacheConfig(mode="read-write", path=str(tmp_path))
        for _ in range(2):
            client = CachedClient(ProviderClient(spec, [WorkerSpec(id="w", description="d", provider="p")]), config)
            emoji, plain = run(client, [("w", ask("emoji?")), ("w", ask("plain?"))])
            assert emoji.text == broken.text and not emoji.cached
        assert plain.cached and server.requests == 3  # the broken answer asked twice, the fine one once
    finally:
        server.close()


def test_writers_of_the_same_millisecond_are_read_alike_by_every_reader(tmp_path, monkeypatch):
    clock = SteppingClock()
    clock.time = lambda: clock.now  # every shard in one millisecond
    monkeypatch.setattr("conductor.response_store.time", clock)
    writers = [ResponseStore(str(tmp_path)) for _ in range(4)]
    for index, writer in enumerate(writers):
        writer.append("p", [NewEntry(("d", 0), "p", "m", "w", StoredAnswer(f"answer {index}", 1, 1, 0, 0.1, "stop"))])
    readings = {ResponseStore(str(tmp_path)).load("p")[("d", 0)].text for _ in range(3)}
    first_writer = min(writers, key=lambda w: w.writer)
    assert readings == {f"answer {writers.index(first_writer)}"}


def test_the_cache_on_s3_is_shared_by_its_writers(sim, s3_server):
    import s3fs

    s3fs.S3FileSystem(**s3_server.storage_options).mkdir("responses")
    path = "s3://responses/cache"
    options = {"storage_options": s3_server.storage_options}
    worker = sim.state.preset.workers[2].name
    calls = [(worker, ask(f"s3 question {i}")) for i in range(3)]
    first = run(sim_pool(sim, path, **options), calls)
    before = served(sim)
    second = run(sim_pool(sim, path, mode="replay-only", **options), calls)
    assert served(sim) == before and [r.text for r in second] == [r.text for r in first]
    assert all(r.cached for r in second)


def test_the_config_names_what_is_wrong():
    with pytest.raises(ConfigError, match="pool.cache.path is required"):
        load_config(None, ["pool.cache.mode=replay-only"])
    with pytest.raises(ConfigError, match="a local directory or s3://"):
        load_config(None, ["pool.cache.mode=read-write", "pool.cache.path=http://host/cache"])
    with pytest.raises(ConfigError, match="mode"):
        load_config(None, ["pool.cache.mode=sometimes", "pool.cache.path=x"])
    config = load_config(None, ["pool.cache.mode=read-write", "pool.cache.path=s3://b/c",
                                "pool.cache.share_identical=true"])
    assert config.pool.cache.share_identical and config.pool.cache.path == "s3://b/c"
