"""The serving generator (vLLM's AsyncLLM, engine core in its own process) asks for no logprobs and no
incremental detokenization; its one decode at the end must give the text vLLM's own detokenizer gives."""

import asyncio
import uuid

import pytest

from conductor.prompt_builder import chat_ids
from conductor.rollout import SamplingSettings
from conductor.vllm_sampler import AsyncVllmGenerator, sampling_params

pytestmark = pytest.mark.slow


def test_serving_samples_carry_the_engines_tokens_and_text_without_per_token_work(toy_warm_start):
    from transformers import AutoTokenizer
    from vllm.inputs import TokensPrompt

    from conductor.config import EngineConfig

    tokenizer = AutoTokenizer.from_pretrained(toy_warm_start)
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q}])
               for q in ("What is 17 + 25?", "Name a prime above 90.", "Reverse the word 'orchestra'.")]
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=48)
    generator = AsyncVllmGenerator(str(toy_warm_start), EngineConfig(max_model_len=1024), seed=0)

    async def reference(prompt):
        final = None
        async for out in generator.engine.generate(TokensPrompt(prompt_token_ids=prompt),
                                                   sampling_params(1, greedy), uuid.uuid4().hex):
            final = out
        return final.outputs[0]

    async def both():
        return await generator.generate(prompts, 1, greedy), [await reference(p) for p in prompts]

    try:
        served, engine = asyncio.run(both())
    finally:
        generator.shutdown()
    assert sampling_params(1, greedy, for_training=False).detokenize is False
    for [sample], expected in zip(served, engine):
        assert sample.token_ids == list(expected.token_ids) and sample.token_ids
        assert sample.text == expected.text
        assert sample.logprobs == [] and expected.logprobs  # training's params still gather them


def test_a_serving_sampler_decodes_once_what_the_training_sampler_detokenizes(toy_warm_start):
    from transformers import AutoTokenizer
    from vllm.inputs import TokensPrompt

    from conductor.config import EngineConfig
    from conductor.vllm_sampler import VllmSampler

    tokenizer = AutoTokenizer.from_pretrained(toy_warm_start)
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q}]) for q in ("What is 6 x 7?", "Spell 'seven'.")]
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=48)
    serving = VllmSampler(str(toy_warm_start), EngineConfig(max_model_len=1024), seed=0, for_training=False)
    served = serving.generate(prompts, 1, greedy)
    trained = serving.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sampling_params(1, greedy),
                                   use_tqdm=False)                  # the same engine, training's parameters
    for [sample], expected in zip(served, trained):
        [completion] = expected.outputs
        assert sample.token_ids == list(completion.token_ids) and sample.text == completion.text and sample.token_ids
        assert sample.logprobs == [] and len(completion.logprobs) == len(completion.token_ids)
