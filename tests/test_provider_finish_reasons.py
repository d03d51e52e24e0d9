"""How a worker's reply ended, read from the provider's finish reason (conductor/provider_client.py): only a
reply the model ended is an answer to store; a server's give-up and a stream cut short fail the attempt; any
other reason is a cut answer, used and never cached. Through the real provider client, the official openai
client and the response cache, against a loopback reply server that streams and cuts streams."""

from __future__ import annotations

import asyncio

from conductor.config import ProviderSpec, WorkerSpec
from conductor.pool import WorkerCallError
from conductor.provider_client import ProviderClient, finish_reason
from conductor.response_cache import CachedClient
from conductor.response_cache_config import ResponseCacheConfig
from tests.support.reply_server import ReplyServer, Streamed, chunk, completion


def ask(text):
    return [{"role": "user", "content": text}]


def test_a_providers_finish_reason_is_read_in_openai_s_words():
    reported = ("stop", "length", "max_tokens", "eos", "end_turn", "content_filter", "abort", "error",
                "repetition", "something_new", None)
    assert [finish_reason(r) for r in reported] == [
        "stop", "length", "length", "stop", "stop", "content_filter", "error", "error", "length", "length", None]


def ending_early(body):
    """By the model asked: a server that gives up mid-reply (vLLM's ``abort``), its repetition detector's cut,
    a stream cut before its finish reason (after some text, or before any), and a whole stream."""
    model, usage = body["model"], {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    if model == "abort":
        return 200, completion(model, "The answer is 4", "abort")
    if model == "repetition":
        return 200, completion(model, "4 4 4 4", "repetition")
    return 200, {"cut": Streamed((chunk(model, "The answer"),), done=False),
                 "silent": Streamed((), done=False),
                 "whole": Streamed((chunk(model, "The answer is 4"), chunk(model, finish="stop"),
                                    chunk(model, usage=usage)))}[model]


def test_a_reply_the_server_gave_up_on_or_a_stream_cut_short_is_never_taken_for_an_answer(tmp_path):
    """Text the server ended early ("abort", "error") or a stream that ended without saying how it ended is no
    answer: the attempt fails (billed), and is retried unless text was already passed on; a reason not known
    as the model's own end ("repetition") is a cut answer: used, never stored. Only the whole stream is."""
    server = ReplyServer(ending_early)
    try:
        spec = ProviderSpec(id="p", base_url=server.base_url, max_retries=1, backoff_base_s=0.01,
                            backoff_max_s=0.02)
        workers = [WorkerSpec(id=name, description="d", provider="p", price_in_per_m=1e3, price_out_per_m=1e3)
                   for name in ("abort", "repetition", "cut", "silent", "whole")]
        config = ResponseCacheConfig(mode="read-write", path=str(tmp_path))
        shown: list[str] = []

        async def main(client):
            outcomes = []
            try:
                for worker in ("abort", "repetition", "cut", "silent", "whole"):
                    stream = shown.append if worker in ("cut", "silent", "whole") else None
                    try:
                        outcomes.append(await client.chat(worker, ask("q"), on_delta=stream))
                    except WorkerCallError as exc:
                        outcomes.append(exc)
                return outcomes
            finally:
                await client.close()

        client = CachedClient(ProviderClient(spec, workers), config)
        aborted, repeated, cut, silent, whole = asyncio.run(asyncio.wait_for(main(client), 30))
        assert isinstance(aborted, WorkerCallError) and "finish_reason 'abort'" in str(aborted)
        assert (repeated.text, repeated.finish_reason) == ("4 4 4 4", "length")
        assert isinstance(cut, WorkerCallError) and "without a finish reason" in str(cut)
        assert isinstance(silent, WorkerCallError) and (whole.text, whole.finish_reason) == ("The answer is 4", "stop")
        # abort twice (retried), repetition once, the cut stream once (its text was passed on), the silent one
        # twice (nothing was), the whole stream once
        assert [body["model"] for body in server.bodies] == ["abort", "abort", "repetition", "cut", "silent",
                                                              "silent", "whole"]
        assert shown == ["The answer", "The answer is 4"]
        assert client.client.stats["cost_usd"] > 0 and client.client.stats["attempts"] == 7

        again = CachedClient(ProviderClient(spec, workers), config)
        outcomes = asyncio.run(asyncio.wait_for(main(again), 30))
        assert [getattr(outcome, "cached", None) for outcome in outcomes] == [None, False, None, None, True]
        assert len(server.bodies) == 7 + 6  # all but the whole stream asked again
    finally:
        server.close()
