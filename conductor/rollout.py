"""Turning questions into scored rollout records (Ray-free; the RolloutActor actor wraps it).

For each task: build the Conductor prompt (conductor/prompt_builder.py), ask the generator for G samples
of the same prompt ids, then for
every sample run the episode (parse, execute against the pool, a recursive round for a configured
share of samples), score it (conductor/episode_score.py: verified off the event loop, or graded by the
judge worker on the same pool) and build the record.
Per-rollout time is split into generation (the batch's time, shared equally), worker calls and verification.

With a cost dial (``reward.cost_weight_range``, conductor/cost_dial.py) each group's prompt states a setting,
drawn per group by the run's seed and the group's id (or the request's fixed one: validation), and its
episodes are priced at that setting's weight; the record keeps both.

Ids: given a ``batch_id``, group i is ``{batch_id}-q{i}`` and its sample j ``{batch_id}-q{i}-s{j}``, so a
request issued again (its actor died) produces the same ids and the replay store keeps it once.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Optional, Protocol

from conductor.config import Config
from conductor.cost_dial import card_of, draw_setting, resolve_setting
from conductor.draw_key import group_key, rng_of, seed_of
from conductor.episode import ConductorTurn, EpisodeResult, EpisodeRunner
from conductor.episode_score import EpisodeScore, EpisodeScorer
from conductor.executor import WorkflowExecutor
from conductor.pool import Messages, WorkerPoolClient
from conductor.prompt_builder import PromptBuilder
from conductor.rollout_record import RolloutRecord, step_row
from conductor.roster import Roster
from conductor.tasks.task import Task
from conductor.trace import RoundTrace
from conductor.verifiers import python_reward
from conductor.verifiers.judge import bind_judge
from conductor.workflow_constraint import workflow_regex


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: Optional[int] = None
    format_regex: Optional[str] = None  # constrain the completion to it (evaluation and serving only)


@dataclass(frozen=True)
class RolloutRequest:
    """One unit of rollout work, as the driver hands it to a rollout actor. ``write``: the records go
    into the replay store; ``return_records``: back to the caller (evaluation, the rollouts command)."""

    batch_id: str
    tasks: tuple[Task, ...]
    group_size: Optional[int] = None
    sampling: Optional[SamplingSettings] = None
    write: bool = True
    return_records: bool = False
    recursive_fraction: Optional[float] = None  # None: rollout.recursive_fraction; validation asks for 0
    cost_quality: Optional[int] = None  # a dial run's setting for every group; None: drawn per group
    draw_key: Optional[str] = None  # what its groups' random draws come from (conductor/draw_key.py); None: batch_id

    def group_ids(self) -> list[str]:
        """The group ids of its records, one per task in order."""
        return [group_id_of(self.batch_id, index) for index in range(len(self.tasks))]


def group_id_of(batch_id: str, index: int) -> str:
    return f"{batch_id}-q{index}"


def batch_id_of(group_id: str) -> str:
    """The request a group came from (``group_id_of``'s inverse)."""
    return group_id.rsplit("-q", 1)[0]


@dataclass(frozen=True)
class RolloutReceipt:
    """What came of a request: the groups it made and their versions; the records themselves when the
    request asked for them; ``stored``: the groups it wrote to the replay store (or found there)."""

    batch_id: str
    groups: int
    versions: tuple[int, ...]
    records: Optional[list[RolloutRecord]] = None
    stored: tuple[str, ...] = ()


@dataclass
class Sample:
    """One completion; ``finish_reason`` is the engine's ("stop", "length") or ``PROMPT_TOO_LONG``: the
    prompt left no room under the engine's ``max_model_len`` and nothing was generated."""

    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    policy_version: int


PROMPT_TOO_LONG = "prompt_too_long"


class Generator(Protocol):
    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]: ...


class RolloutRunner:
    def __init__(self, config: Config, tokenizer: Any, generator: Generator, pool: WorkerPoolClient, seed: int = 0):
        # A user's reward is imported by name in the process that scores (a rollout actor): one the job did not
        # ship fails the actor's start, not every episode (conductor/verifiers/python_reward.py)
        python_reward.preload(spec.reward_function for spec in config.data.datasets if spec.reward_function)
        self.config = config
        self.dial = card_of(config.reward)
        self.generator = generator
        self.prompts = PromptBuilder(config, tokenizer, seed)
        executor = WorkflowExecutor(pool, question_visibility=config.executor.question_visibility,
                                    parallel=config.executor.parallel_steps)
        self.episodes = EpisodeRunner(executor, self.prompts.fewshot, max_steps=config.executor.max_steps,
                                      show_prices=config.prompt.show_prices)
        self.scorer = EpisodeScorer(config.verifier, config.reward, judge=bind_judge(config.judge, config.pool, pool))
        self.limit = asyncio.Semaphore(config.rollout.max_concurrent_episodes)
        self.sampling = SamplingSettings(config.rollout.temperature, config.rollout.top_p,
                                         config.rollout.max_new_tokens)
        self.on_sampled: Callable[[str], None] = lambda batch_id: None  # a batch's root completions are drawn

    async def run_request(self, request: RolloutRequest) -> list[RolloutRecord]:
        return await self.run(list(request.tasks), request.group_size, request.sampling, request.batch_id,
                              request.recursive_fraction, request.cost_quality, request.draw_key)

    async def run(self, tasks: list[Task], group_size: Optional[int] = None,
                  sampling: Optional[SamplingSettings] = None, batch_id: Optional[str] = None,
                  recursive_fraction: Optional[float] = None, cost_quality: Optional[int] = None,
                  draw_key: Optional[str] = None) -> list[RolloutRecord]:
        """G rollouts for each task (``group_size``/``sampling``/``recursive_fraction`` override the config,
        e.g. greedy evaluation of the root workflow with one sample); one generation call for the batch.
        A recursive turn decodes as its root did (temperature; the recursive-round expression where the root
        was constrained). ``cost_quality``: a dial run's setting for every group (None: drawn per group).
        ``draw_key`` (default ``batch_id``): every random draw of group i comes from it and the run's seed, the
        samples' seed too unless ``sampling`` fixes one (conductor/draw_key.py)."""
        group_size = group_size or self.config.rollout.group_size
        share = self.config.rollout.recursive_fraction if recursive_fraction is None else recursive_fraction
        batch_id = batch_id or uuid.uuid4().hex
        key, seed = draw_key or batch_id, self.config.seed
        keys = [group_key(key, index) for index in range(len(tasks))]
        rosters = [self.prompts.roster(rng_of(seed, k, "roster")) for k in keys]
        settings = [self.setting(k, cost_quality) for k in keys]
        prompts = [self.prompts.task_prompt_ids(t, r, s) for t, r, s in zip(tasks, rosters, settings)]
        sampling = sampling or self.sampling
        if sampling.seed is None and sampling.temperature > 0:
            sampling = replace(sampling, seed=seed_of(seed, key, "sample"))
        started = time.perf_counter()
        groups = await self.generator.generate(prompts, group_size, sampling)
        self.on_sampled(batch_id)
        generation_s = (time.perf_counter() - started) / max(1, len(tasks) * group_size)
        jobs = []
        for index, (task, roster, samples) in enumerate(zip(tasks, rosters, groups)):
            group_id, recursion = group_id_of(batch_id, index), rng_of(seed, keys[index], "recursion")
            for number, sample in enumerate(samples):
                rounds = 1 if share > 0 and recursion.random() < share else 0
                jobs.append(self._one(task, roster, sample, f"{group_id}-s{number}", group_id, rounds,
                                      generation_s, sampling, settings[index], f"{keys[index]}-s{number}"))
        return list(await asyncio.gather(*jobs))

    def setting(self, key: str, fixed: Optional[int] = None) -> Optional[int]:
        """A group's cost-dial setting: ``fixed``, else drawn by the group's draw ``key``; None for a run without
        the dial (which refuses a fixed one)."""
        if self.dial is None or fixed is not None:
            return resolve_setting(self.dial, fixed, "the rollout request's cost_quality")
        return draw_setting(self.config.seed, key, self.dial.settings)

    def _recursive_turns(self, sampled: list[Sample], sampling: SamplingSettings, roster: Roster, sample_key: str):
        """The Conductor for one episode's recursive rounds; each turn it takes lands in ``sampled``. Turn r
        samples from its own seed (the sample's key and r), when its root's was seeded."""
        if sampling.format_regex is not None:
            sampling = replace(sampling, format_regex=workflow_regex(len(roster), self.config.executor.max_steps,
                                                                     recursive_round=True))

        numbers = itertools.count(1)

        async def turn(messages: Messages) -> Optional[ConductorTurn]:
            number = next(numbers)
            seeded = sampling if sampling.seed is None else replace(
                sampling, seed=seed_of(self.config.seed, f"{sample_key}-r{number}", "sample"))
            [[sample]] = await self.generator.generate([self.prompts.prompt_ids(messages)], 1, seeded)
            if sample.finish_reason == PROMPT_TOO_LONG:
                return None
            sampled.append(sample)
            return ConductorTurn(sample.text, truncated=self.config.rollout.truncation_is_format_error
                                 and sample.finish_reason == "length")

        return turn

    async def _one(self, task: Task, roster: Roster, sample: Sample, rollout_id: str, group_id: str, rounds: int,
                   generation_s: float, sampling: SamplingSettings, setting: Optional[int] = None,
                   sample_key: str = "") -> RolloutRecord:
        weight = None if setting is None or self.dial is None else self.dial.weight(setting)
        if sample.finish_reason == PROMPT_TOO_LONG:  # unscored, like a worker outage: not the policy's doing
            episode = EpisodeResult(rounds=[RoundTrace(round=0, conductor_text="", infra_error=(
                f"conductor prompt of {len(sample.prompt_token_ids)} tokens leaves no room under "
                "engine.max_model_len"))])
            score = await self.scorer.score(task, episode, weight)  # unverified: an infrastructure error
            return self._record(task, sample, rollout_id, group_id, episode, score, generation_s, 0.0,
                                setting=setting, weight=weight)
        turns: list[Sample] = []
        async with self.limit:
            started = time.perf_counter()
            truncated = self.config.rollout.truncation_is_format_error and sample.finish_reason == "length"
            conductor = self._recursive_turns(turns, sampling, roster, sample_key) if rounds else None
            episode = await self.episodes.run(task.prompt, roster, sample.text, recursive_rounds=rounds,
                                              conductor=conductor, root_truncated=truncated, cost_quality=setting)
            workers_s = time.perf_counter() - started
            score = await self.scorer.score(task, episode, weight)
        return self._record(task, sample, rollout_id, group_id, episode, score, generation_s, workers_s, turns,
                            setting, weight)

    def _record(self, task: Task, sample: Sample, rollout_id: str, group_id: str, episode: EpisodeResult,
                score: EpisodeScore, generation_s: float, workers_s: float,
                turns: Optional[list[Sample]] = None, setting: Optional[int] = None,
                weight: Optional[float] = None) -> RolloutRecord:
        """The record of a scored episode: an infrastructure error (a failed worker call, or a verifier that
        could not judge) is unscored, ``reward`` None and ``correct`` False, never a wrong answer."""
        root = episode.rounds[0]
        first_error = next((r.parse_error for r in episode.rounds if r.parse_error), None)
        return RolloutRecord(
            rollout_id=rollout_id, group_id=group_id, question_id=task.id, domain=task.domain,
            policy_version=sample.policy_version, prompt_token_ids=sample.prompt_token_ids,
            completion_token_ids=sample.token_ids, completion_logprobs=sample.logprobs, completion_text=sample.text,
            format_ok=score.format_ok, correct=score.correct, reward=score.reward, score=score.score,
            workflow=root.workflow.render() if root.workflow else None,
            parse_error=first_error.value if first_error else None,
            steps=[step_row(s) for s in episode.steps], recursion_rounds=len(episode.rounds) - 1,
            recursive_turns=[{"prompt_token_ids": t.prompt_token_ids, "completion_token_ids": t.token_ids,
                              "completion_logprobs": t.logprobs, "policy_version": t.policy_version}
                             for t in turns or ()],
            answer=episode.answer, infra_error=score.infra_error, cost_usd=score.cost_usd,
            generation_s=generation_s, workers_s=workers_s, verify_s=score.verify_s, judge_calls=score.judge.calls,
            judge_tokens=score.judge.tokens, judge_cost_usd=score.judge.cost_usd, cost_quality=setting,
            cost_weight=weight)
