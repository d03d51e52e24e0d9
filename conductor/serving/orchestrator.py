"""One served request, end to end: the Conductor writes a workflow over the workers this request may use,
the workflow is cut to the request's limits, the workers run it, and the last step's reply is the answer.
The rounds are training's episode (conductor/episode.py ``EpisodeRunner``) with this request's hooks; this
module adds the Conductor's turns, the fallback, the stream and the usage.

Rules, in the order they apply:
- Cost dial: a policy trained with it (``dial``, its cost_dial.json) gets the request's
  ``conductor.cost_quality``, else the model's ``cost_quality``, else the policy's default, stated in its
  prompt as training stated it; the trace says which. A policy without the dial refuses the setting (400).
- Workers: the model's (``serve.models[].workers``), narrowed by ``conductor.workers``; asking for a worker
  the model does not have is a 400. Steps and rounds: the smaller of the model's and the request's.
- Cost cap (the smaller of ``conductor.max_cost_usd`` and ``serve.limits.max_cost_usd``): if no allowed
  worker can answer in one step within it, the request is refused with a 400 before anything is spent.
  A workflow is cut to its longest prefix whose worst-case cost fits what is left (cost_bounds.py). Under a
  cap each call makes at most one attempt that may be billed (one the provider refused, a 429 or 503, is
  retried):
  what is left counts failed attempts billed, and those whose bill is unknown (a timeout, a step cancelled
  in flight) at their worst case, so the fallback and later rounds keep the cap too.
- The Conductor's output is parsed with the training limit of steps and cut to the request's; output that
  is not a workflow, a first step that does not fit the cap, or a worker that fails for good hands the
  question to the strongest allowed worker that fits (``serve.strongest_first``, else by output price);
  the trace says which and why. A failure in a recursive round keeps the answer of the round before.
- A question too long for the Conductor's context is not tokenized (a bound from its longest token
  says so at once) and goes to the fallback; one that no allowed worker takes either (each refuses it
  for its context length) is a 400 ``context_length_exceeded``, not a worker failure. A long question is
  tokenized off the event loop, so it cannot stall other requests. A Conductor turn with no room leaves
  no round: the fallback's reason, or a note on the round whose answer stands, says why.
- The answer's sampling: the request's ``temperature``, ``top_p`` and ``seed`` and its token limit go to
  the step that writes the answer (or the fallback); its finish reason is the answer's (``length`` when
  that limit cut it).
- Streaming: the final step's reply streams as the worker writes it when it is certain to be the answer
  (the last round allowed, or a fallback); an answer from an earlier round that the Conductor then
  accepts is sent whole when it accepts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from conductor.config import Config, WorkerSpec
from conductor.cost_dial import DialCard, resolve_setting
from conductor.episode import ConductorTurn, EpisodeRunner, RoundHooks, record_execution
from conductor.executor import CANCELLED_IN_FLIGHT, Turn, WorkflowExecutor
from conductor.pool import WorkerPoolClient
from conductor.prompt_builder import PromptBuilder
from conductor.prompts import Messages, conductor_messages
from conductor.rollout import PROMPT_TOO_LONG, Generator, SamplingSettings
from conductor.roster import Roster
from conductor.serve_config import ServedModel
from conductor.serving.api_errors import ApiError
from conductor.serving.api_schema import Controls
from conductor.serving.cost_bounds import cut_to_budget, step_max_tokens, workflow_bounds
from conductor.serving.served_trace import ServedTrace, Usage
from conductor.trace import RoundTrace, StepTrace
from conductor.workflow import Step, Workflow
from conductor.workflow_constraint import workflow_regex

FALLBACK_SUBTASK = "Answer the question. Give the final answer."
OFF_LOOP_QUESTION_CHARS = 8192  # longer questions are tokenized on the tokenizer's own thread

log = logging.getLogger(__name__)


def longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token can stand for (its vocabulary string: byte-level tokens spell each
    byte as one character, so no token decodes to more): a question of ``n`` characters is at least
    ``n / longest`` tokens."""
    return max((len(token) for token in tokenizer.get_vocab()), default=1) or 1


class ServeEvents(Protocol):
    def progress(self, event: dict[str, Any]) -> None: ...

    def answer_delta(self, text: str) -> None: ...


@dataclass
class ServeRequest:
    model: ServedModel
    question: str
    controls: Controls
    answer_max_tokens: Optional[int] = None
    answer_sampling: dict[str, Any] = field(default_factory=dict)  # temperature, top_p, seed for the answer
    question_param: str = "messages"  # the body field the question came from, for a context-length error


@dataclass
class ServedAnswer:
    text: str
    usage: Usage
    trace: dict[str, Any]
    streamed: bool  # the text already went out through ``answer_delta``
    finish_reason: str = "stop"  # the answering worker's: "length" when the token limit cut the answer


class Orchestrator:
    def __init__(self, config: Config, generator: Generator, tokenizer: Any, pool: WorkerPoolClient,
                 dial: Optional[DialCard] = None):
        self.config, self.serve, self.generator, self.dial = config, config.serve, generator, dial
        self.workers = {w.id: w for w in config.pool.workers}
        self.prompts = PromptBuilder(config, tokenizer)
        self.executor = WorkflowExecutor(pool, question_visibility=config.executor.question_visibility,
                                         parallel=config.executor.parallel_steps)
        self.episodes = EpisodeRunner(self.executor, self.prompts.fewshot, max_steps=config.executor.max_steps,
                                      show_prices=config.prompt.show_prices)
        self.models = {name: model for model in self.serve.models for name in model.names}
        if not self.models:
            raise ValueError("serve.models is empty: configure at least one model name to serve")
        for model in self.serve.models:
            unknown = sorted(set(model.workers or []) - set(self.workers))
            if unknown:
                raise ValueError(f"serve.models {model.name}: unknown workers {unknown}; the pool has "
                                 f"{sorted(self.workers)}")
        for model in self.serve.models:
            resolve_setting(dial, model.cost_quality, f"serve.models {model.name}: cost_quality")
        unknown = sorted(set(self.serve.strongest_first) - set(self.workers))
        if unknown:
            raise ValueError(f"serve.strongest_first names unknown workers {unknown}")
        by_price = sorted(self.workers.values(), key=lambda w: -(w.price_out_per_m or 0.0))
        self.strength = list(dict.fromkeys([*self.serve.strongest_first, *(w.id for w in by_price)]))
        self.max_question_chars = config.engine.max_model_len * longest_token_chars(tokenizer)
        self.tokenizing = ThreadPoolExecutor(1, thread_name_prefix="conductor-tokenize")

    async def prompt_ids(self, messages: list[dict[str, str]], question_chars: int) -> list[int]:
        if question_chars <= OFF_LOOP_QUESTION_CHARS:
            return self.prompts.prompt_ids(messages)
        return await asyncio.get_running_loop().run_in_executor(self.tokenizing, self.prompts.prompt_ids, messages)

    def model(self, name: str) -> ServedModel:
        if name not in self.models:
            raise ApiError(404, f"The model '{name[:64]}' does not exist. Served: {', '.join(sorted(self.models))}.",
                           param="model", code="model_not_found")
        return self.models[name]

    def roster(self, model: ServedModel, controls: Controls) -> Roster:
        allowed = list(model.workers or self.workers)
        if controls.workers is not None:
            outside = sorted(set(controls.workers) - set(allowed))
            if outside:
                shown = [worker[:64] for worker in outside[:5]]
                raise ApiError(400, f"conductor.workers: {shown} not available to model {model.name}; "
                               f"it may use {allowed}", param="conductor.workers", code="invalid_value")
            allowed = [w for w in allowed if w in controls.workers]
        return Roster.full([self.workers[w] for w in allowed])

    def cost_quality(self, model: ServedModel, controls: Controls) -> Optional[int]:
        """The cost dial's setting for this request (None: the policy has no dial)."""
        asked = controls.cost_quality if controls.cost_quality is not None else model.cost_quality
        try:
            return resolve_setting(self.dial, asked, "conductor.cost_quality")
        except ValueError as exc:
            raise ApiError(400, str(exc), param="conductor.cost_quality", code="unsupported_parameter") from None

    def start(self, request: ServeRequest, events: Optional[ServeEvents] = None) -> _Run:
        """Everything that can refuse the request before it runs (workers, cost cap): a stream is only
        opened for a request that passed."""
        run = _Run(self, request, events)
        run.refuse_an_unaffordable_request()
        return run

    async def answer(self, request: ServeRequest, events: Optional[ServeEvents] = None) -> ServedAnswer:
        return await self.start(request, events).go()


class _Run(RoundHooks):
    """The state of one request (limits, budget, usage, trace) and its episode's round hooks: a workflow
    cut to what is left of the cost cap, the answer's sampling, progress events, the answer streamed."""

    def __init__(self, orchestrator: Orchestrator, request: ServeRequest, events: Optional[ServeEvents]):
        self.o, self.request, self.events = orchestrator, request, events
        model, controls = request.model, request.controls
        self.roster = orchestrator.roster(model, controls)
        self.cost_quality = orchestrator.cost_quality(model, controls)
        self.max_steps = min(model.max_steps, controls.max_steps or model.max_steps)
        self.rounds = min(model.max_rounds, model.max_rounds if controls.max_rounds is None else controls.max_rounds)
        caps = [c for c in (controls.max_cost_usd, orchestrator.serve.limits.max_cost_usd) if c is not None]
        self.cap = min(caps) if caps else None
        self.max_billable_attempts = None if self.cap is None else 1
        self.worst_cases: dict[tuple[int, int], float] = {}  # (round, step): what one attempt can cost
        self.usage = Usage()
        self.trace = ServedTrace(model.name, list(self.roster.worker_ids),
                                 {"max_steps": self.max_steps, "max_rounds": self.rounds, "max_cost_usd": self.cap},
                                 cost_quality=self.cost_quality)
        self.started = time.perf_counter()
        self.sent_text = False
        self.unasked: Optional[str] = None  # why the Conductor could not be asked for a turn
        self.observer = _StepEvents(self)
        self.answer_sink = self._deliver if events is not None else None

    # -- the flow ------------------------------------------------------------------------------------

    async def go(self) -> ServedAnswer:
        text = await self._conduct(self.root_messages(), recursive=False)
        if text is None:
            return await self._fallback(self.unasked or "no workflow", failed=())
        episode = await self.o.episodes.run(self.request.question, self.roster, text, recursive_rounds=self.rounds,
                                            conductor=self._recursive_turn, max_steps=self.max_steps, hooks=self,
                                            cost_quality=self.cost_quality)
        self.trace.rounds.extend(episode.rounds)
        self._refuse_a_broken_stream(episode.infra_error)
        root = episode.rounds[0]
        if root.parse_error is not None:
            return await self._fallback(f"{root.parse_error.value}: {root.parse_detail}", failed=())
        if root.skipped:
            return await self._fallback("its first step does not fit the cost cap", failed=())
        if root.infra_error:
            failed = tuple(s.worker_id for s in root.steps if s.error_kind)  # not those stopped for its sake
            log.warning("a served workflow's worker failed: %s", root.infra_error)
            return await self._fallback(f"{', '.join(failed)} failed ({root.infra_error_kind})", failed=failed,
                                        failure_kinds=(root.infra_error_kind,))
        for later in episode.rounds[1:]:
            if later.infra_error:
                log.warning("a served recursive round's worker failed: %s", later.infra_error)
                later.notes.append(f"a worker failed ({later.infra_error_kind}): the previous answer stands")
        if self.unasked:
            episode.rounds[-1].notes.append(f"round {len(episode.rounds)} not run: {self.unasked}; this answer stands")
        answering = next(r for r in reversed(episode.rounds) if r.steps and not r.infra_error)
        return self._finish(answering.answer or "", finish_reason=answering.steps[-1].finish_reason)

    def root_messages(self) -> Messages:
        """The Conductor's prompt for this request: the training prompt over the request's roster and steps."""
        return conductor_messages(self.request.question, self.roster, self.o.prompts.fewshot, max_steps=self.max_steps,
                                  show_prices=self.o.config.prompt.show_prices, cost_quality=self.cost_quality)

    # -- the round hooks --------------------------------------------------------------------------------

    def fit(self, workflow: Workflow, trace: RoundTrace, previous_final: Optional[Turn]) -> Workflow:
        left = self._left()
        fitted, _ = cut_to_budget(workflow, self.roster, self.request.question, left,
                                  answer_max_tokens=self.request.answer_max_tokens,
                                  previous_final=previous_final)
        bounds = workflow_bounds(fitted, self.roster, self.request.question,
                                 answer_max_tokens=self.request.answer_max_tokens, previous_final=previous_final)
        self.worst_cases.update(((trace.round, index), bound) for index, bound in enumerate(bounds))
        if not fitted.steps:
            trace.notes.append(f"no step fits what is left of the cost cap (${left:.6f})"
                               + (": the previous answer stands" if trace.round else ""))
        elif len(fitted.steps) < len(workflow.steps):
            trace.notes.append(f"cut from {len(workflow.steps)} to {len(fitted.steps)} steps: the rest could "
                               f"exceed the cost cap (${left:.6f} left)")
        shown = fitted if fitted.steps else workflow
        self._progress({"type": "workflow", "round": trace.round,
                        "workers": [self.roster.worker_id(s.worker) for s in shown.steps], "steps": len(shown.steps)})
        return fitted

    def step_params(self, workflow: Workflow) -> list[Optional[dict[str, Any]]]:
        """The answering step gets the request's token limit (within its worker's) and sampling."""
        last = self.roster.workers[workflow.steps[-1].worker]
        return [None] * (len(workflow.steps) - 1) + [
            {"max_tokens": step_max_tokens(last, self.request.answer_max_tokens, final=True),
             **self.request.answer_sampling}]

    # -- the parts ------------------------------------------------------------------------------------

    def refuse_an_unaffordable_request(self) -> None:
        if self.cap is None:
            return
        cheapest = min((self._one_step(w)[1], w.id) for w in self.roster.workers)
        if cheapest[0] > self.cap:
            raise ApiError(400, f"conductor.max_cost_usd ${self.cap:g} is below what the cheapest allowed worker "
                           f"({cheapest[1]}) can cost for one answer (${cheapest[0]:.6f} at most): raise the cap "
                           "or allow cheaper workers", param="conductor.max_cost_usd", code="cost_cap_too_low")

    def _one_step(self, worker: WorkerSpec) -> tuple[Workflow, float]:
        """The fallback's workflow on this worker (one step, over the request's roster) and its cost bound."""
        one = Workflow((Step(worker=self.roster.worker_ids.index(worker.id), subtask=FALLBACK_SUBTASK, access=()),))
        return cut_to_budget(one, self.roster, self.request.question, None,
                             answer_max_tokens=self.request.answer_max_tokens)

    async def _recursive_turn(self, messages: Messages) -> Optional[ConductorTurn]:
        """Served as the root is: a turn cut at the token limit still runs if it parses."""
        text = await self._conduct(messages, recursive=True)
        return None if text is None else ConductorTurn(text)

    async def _conduct(self, messages: Messages, *, recursive: bool) -> Optional[str]:
        """The Conductor's turn (None: it could not be asked, ``unasked`` says why)."""
        if len(self.request.question) > self.o.max_question_chars:
            self.unasked = (f"the question ({len(self.request.question)} characters) cannot fit the "
                            f"Conductor's context ({self.o.config.engine.max_model_len} tokens)")
            return None
        prompt = await self.o.prompt_ids(messages, len(self.request.question))
        model = self.request.model
        expression = (workflow_regex(len(self.roster), self.max_steps, recursive_round=recursive)
                      if model.constrain_format else None)
        sampling = SamplingSettings(temperature=model.temperature, max_new_tokens=self.o.serve.conductor_max_new_tokens,
                                    format_regex=expression)
        started = time.perf_counter()
        [[sample]] = await self.o.generator.generate([prompt], 1, sampling)
        self.trace.conductor_s += time.perf_counter() - started
        self.usage.conductor_prompt_tokens += len(prompt)
        self.usage.conductor_completion_tokens += len(sample.token_ids)
        if sample.finish_reason == PROMPT_TOO_LONG:
            asked = "the recursive prompt" if recursive else "the question"
            self.unasked = f"{asked} leaves no room in the Conductor's context ({len(prompt)} tokens)"
            return None
        return sample.text

    def _refuse_a_broken_stream(self, infra_error: Optional[str]) -> None:
        if infra_error and self.sent_text:  # part of the answer is out: no fallback can replace it
            log.warning("a served answer's worker failed mid-answer: %s", infra_error)
            raise ApiError(502, "The answering worker failed mid-answer.", kind="server_error", code="worker_failed")

    def _left(self) -> Optional[float]:
        """What is left of the cap, counting every attempt that may have been billed at its worst case."""
        return None if self.cap is None else self.cap - self.usage.spent_at_most

    async def _fallback(self, reason: str, failed: tuple[str, ...],
                        failure_kinds: tuple[Optional[str], ...] = ()) -> ServedAnswer:
        for worker_id in self.o.strength:
            left = self._left()
            if worker_id not in self.roster.worker_ids or worker_id in failed:
                continue
            one, bound = self._one_step(self.o.workers[worker_id])
            if left is not None and bound > left:
                continue
            self.trace.fallback = {"worker": worker_id, "reason": reason}
            self._progress({"type": "fallback", "worker": worker_id, "reason": reason})
            trace = RoundTrace(round=len(self.trace.rounds), conductor_text=None, workflow=one,
                               notes=[f"fallback: {reason}"])
            self.trace.rounds.append(trace)
            self.worst_cases[(trace.round, 0)] = bound
            result = await self.o.executor.execute(one, self.request.question, self.roster, round_index=trace.round,
                                                   step_params=self.step_params(one), observer=self.observer,
                                                   final_sink=self.answer_sink,
                                                   max_billable_attempts=self.max_billable_attempts)
            record_execution(trace, result)
            self._refuse_a_broken_stream(result.infra_error)
            if result.infra_error:
                failed, failure_kinds = (*failed, worker_id), (*failure_kinds, result.infra_error_kind)
                continue
            return self._finish(result.answer or "", finish_reason=result.finish_reason)
        if failure_kinds and all(kind == "context_length" for kind in failure_kinds):
            raise ApiError(400, f"The question ({len(self.request.question)} characters) is longer than the context "
                           f"of every allowed worker that could be asked ({', '.join(failed)}). Please reduce the "
                           "length of the messages.", param=self.request.question_param,
                           code="context_length_exceeded")
        if failed:
            raise ApiError(502, f"No allowed worker could answer ({reason}; failed: {', '.join(failed)}).",
                           kind="server_error", code="workers_failed")
        raise ApiError(400, f"No allowed worker can answer within the cost cap (${self._left():.6f} left; {reason}).",
                       param="conductor.max_cost_usd", code="cost_cap_too_low")

    def _finish(self, text: str, finish_reason: Optional[str]) -> ServedAnswer:
        """``streamed``: text went out only from the round whose answer nothing could replace, and that
        round answered (a failure mid-answer is a 502), so the answer is what was sent."""
        total = time.perf_counter() - self.started
        return ServedAnswer(text=text, usage=self.usage, trace=self.trace.json(self.usage, total),
                            streamed=self.sent_text, finish_reason=finish_reason or "stop")

    def _deliver(self, piece: str) -> None:
        self.sent_text = True
        assert self.events is not None
        self.events.answer_delta(piece)

    def _progress(self, event: dict[str, Any]) -> None:
        if self.events is not None:
            self.events.progress(event)


class _StepEvents:
    """The executor's step observer: each answered call's usage, and progress events as steps start and end."""

    def __init__(self, run: _Run):
        self.run = run

    def step_started(self, round_index: int, index: int, worker_id: str) -> None:
        self.run._progress({"type": "step.started", "round": round_index, "step": index, "worker": worker_id})

    def step_finished(self, trace: StepTrace) -> None:
        worst_case = self.run.worst_cases.get((trace.round, trace.index), 0.0)
        self.run.usage.add_step(trace, worst_case, in_flight=trace.error == CANCELLED_IN_FLIGHT)
        self.run._progress({"type": "step.finished", "round": trace.round, "step": trace.index,
                            "worker": trace.worker_id, "status": "ok" if trace.error is None else "error",
                            "tokens": trace.tokens_in + trace.tokens_out, "cost_usd": round(trace.cost_usd, 8),
                            "latency_s": round(trace.latency_s, 4)})
