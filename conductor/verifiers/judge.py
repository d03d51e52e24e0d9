"""An LLM judge: a worker of the pool grades an episode's final answer against a rubric (``verifier: judge``).

The rubric is a ``str.format`` template over three placeholders: ``{question}`` (the prompt as the workers
got it, the dataset's answer-format instruction included), ``{reference}`` (the dataset's reference answer;
``NO_REFERENCE`` where its field map names none) and ``{answer}`` (the episode's final answer, never
empty); literal braces are doubled. ``judge.rubric`` gives one of your own; DEFAULT_RUBRIC is the shipped
one. The judge's reply must hold a line ``Score: S``, S a number from 0 (wrong) to 1 (right), or a fraction
such as ``7/10``; the last such line counts.

The call goes through the pool (``pool.chat``), so the provider's rate limits, retries, deadline and
prices apply as to any worker; it samples as the judge's ``WorkerSpec.sampling`` says and carries a
``seed`` per sample and attempt, so repeated samples and retries are fresh draws. A reply with no score
is asked again, up to ``judge.parse_retries`` times; a sample still without one, or a call that failed
for good (``WorkerCallError``), makes the verdict an infrastructure error: unscored, counted, out of the
accuracy denominator (conductor/episode_score.py). With ``judge.samples`` k > 1 the samples run
concurrently and their scores combine by ``judge.aggregate``: ``majority`` (the median of an odd number
of scores: with right/wrong scores, the majority's verdict) or ``mean``. The score moves the reward from
``reward.wrong`` to ``reward.correct`` as a Python reward's does, and 0.5 or more counts as correct.

Every judge call is counted apart from the workers' (``JudgeUsage``: calls, tokens, dollars, unparseable
replies and failed calls included) and never enters the reward's cost penalties, which price the
Conductor's choice of workers; the judge's spend is the same whatever it chooses.

The scorer calls the judge itself (``EpisodeScorer(judge=...)``: the kind's registry entry says
``by_judge``); ``check_unbound`` is the kind's plain ``check`` for a scorer bound to no pool (the demo),
where a judged answer cannot be scored: an infrastructure error.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol

from conductor.pool import WorkerCallError, WorkerPoolClient
from conductor.verifiers.python_reward import CORRECT_AT
from conductor.verifiers.text_match import extract_answer
from conductor.verifiers.verdict import Verdict

if TYPE_CHECKING:
    from conductor.config import PoolConfig, VerifierConfig
    from conductor.judge_config import JudgeConfig
    from conductor.tasks.task import Task

RUBRIC_FIELDS = ("question", "reference", "answer")
NO_REFERENCE = "(no reference answer given)"
REPLY_CHARS = 120  # of an unparseable reply, kept in the infrastructure error
DEFAULT_RUBRIC = """You are grading an answer to a question. Read the question, the reference answer and the \
answer to grade, then decide whether the answer to grade is right: it says what the reference says, in any \
words, and adds nothing that contradicts it. Where no reference is given, decide from the question alone \
whether the answer is right and complete.

Question:
{question}

Reference answer:
{reference}

Answer to grade:
{answer}

Give one or two sentences of reasoning, then a last line of the form "Score: S", where S is 1 if the answer \
is right, 0 if it is wrong, or a number in between for an answer that is partly right."""
_WHOLE = r"(\d+(?:\.\d+)?)(?!\.?\d|,\d|[eE][-+]?\d)"  # a whole number: not the head of 0,5 or 1e-3
# A line that starts with the label (after markdown: "**Score:** 1", "- Score: 1", "### Final score: 1"); what
# follows the number is ignored, a "score" inside a sentence ("confidence score: 0.9") is not the verdict.
# A sign is not allowed: a negative score is no score.
_SCORE = re.compile(r"^[ \t>*_#-]*(?:final[ \t]+)?score[ \t*_]{0,3}[:=][ \t*_]{0,3}" + _WHOLE
                    + r"(?:[ \t]*/[ \t]*" + _WHOLE + r")?(?![ \t]*/)", re.IGNORECASE | re.MULTILINE)


def check_rubric(template: str) -> str:
    """A rubric's placeholders are among RUBRIC_FIELDS and include {answer} (pydantic names the setting)."""
    try:
        named = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    except ValueError as exc:
        raise ValueError(f"the rubric is not a str.format template ({exc}); write a literal brace as {{{{ or "
                         "}}") from None
    unknown = sorted(named - set(RUBRIC_FIELDS))
    if unknown:
        raise ValueError(f"the rubric's placeholders {unknown} are unknown; it may use {{question}}, "
                         "{reference} and {answer}")
    if "answer" not in named:
        raise ValueError("the rubric must show the judge the {answer} it grades")
    try:  # a format spec or conversion str.format refuses for text ({answer:d}) fails here, not at every call
        template.format(**dict.fromkeys(RUBRIC_FIELDS, "text"))
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        raise ValueError(f"the rubric cannot be filled with text ({type(exc).__name__}: {exc}); its placeholders "
                         "take no format spec") from None
    return template


def judge_prompt(template: str, task: Task, answer: str) -> str:
    return template.format(question=task.prompt, reference=task.answer or NO_REFERENCE, answer=answer)


def parse_score(reply: str) -> Optional[float]:
    """The score of the reply's last line that starts ``Score: S`` (S in [0, 1], or a fraction a/b within it);
    None if none."""
    found = _SCORE.findall(reply)
    if not found:
        return None
    numerator, denominator = found[-1]
    if denominator and float(denominator) == 0:
        return None
    value = float(numerator) / float(denominator) if denominator else float(numerator)
    return value if 0.0 <= value <= 1.0 else None


@dataclass(frozen=True)
class JudgeUsage:
    """What judging one answer spent: calls (every attempt that reached the pool's call), tokens and $."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: JudgeUsage) -> JudgeUsage:
        return JudgeUsage(self.calls + other.calls, self.prompt_tokens + other.prompt_tokens,
                          self.completion_tokens + other.completion_tokens, self.cost_usd + other.cost_usd)


NO_JUDGE_CALLS = JudgeUsage()


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    usage: JudgeUsage


class Judge(Protocol):
    async def judge(self, task: Task, response: str) -> Judgement: ...


@dataclass(frozen=True)
class _Sample:
    score: Optional[float]
    usage: JudgeUsage
    error: Optional[str] = None


class PoolJudge:
    """The judge ``worker`` of ``pool``, asked as ``settings`` say."""

    def __init__(self, settings: JudgeConfig, pool: WorkerPoolClient, worker: str):
        self.settings, self.pool, self.worker = settings, pool, worker
        self.rubric = settings.rubric or DEFAULT_RUBRIC

    async def judge(self, task: Task, response: str) -> Judgement:
        messages = [{"role": "user", "content": judge_prompt(self.rubric, task, response)}]
        samples = await asyncio.gather(*(self._sample(messages, index) for index in range(self.settings.samples)))
        usage = sum((sample.usage for sample in samples), NO_JUDGE_CALLS)
        extracted = extract_answer(response)
        failed = next((sample.error for sample in samples if sample.error is not None), None)
        if failed is not None:
            return Judgement(Verdict(False, extracted, infra_error=failed), usage)
        scores = [sample.score for sample in samples if sample.score is not None]
        score = statistics.median(scores) if self.settings.aggregate == "majority" else statistics.fmean(scores)
        detail = f"judge {self.worker}: {', '.join(f'{s:g}' for s in scores)} -> {score:g}"
        return Judgement(Verdict(score >= CORRECT_AT, extracted, detail, score=score), usage)

    async def _sample(self, messages: list[dict[str, str]], index: int) -> _Sample:
        usage, attempts, reply = NO_JUDGE_CALLS, self.settings.parse_retries + 1, ""
        for attempt in range(attempts):
            try:
                result = await self.pool.chat(self.worker, messages, {"seed": index + attempt * self.settings.samples})
            except WorkerCallError as exc:
                return _Sample(None, usage + JudgeUsage(calls=1, cost_usd=exc.failed_attempts_usd),
                               f"judge {self.worker}: {exc.kind}: {exc.message}")
            usage += JudgeUsage(1, result.prompt_tokens, result.completion_tokens,
                                result.cost_usd + result.failed_attempts_usd)  # the judge's bill, failed attempts too
            reply = result.text
            score = parse_score(reply)
            if score is not None:
                return _Sample(score, usage)
        shown = " ".join(reply.split())[:REPLY_CHARS]
        return _Sample(None, usage, f"judge {self.worker}: no 'Score: S' line (S in [0, 1]) in {attempts} "
                                    f"replies; the last: {shown!r}")


def bind_judge(settings: JudgeConfig, pool_config: PoolConfig, pool: WorkerPoolClient) -> Optional[PoolJudge]:
    """The run's judge on ``pool``; None where the pool has none to call (nothing judged then)."""
    from conductor.judge_config import judge_worker

    worker = judge_worker(settings, pool_config)
    return PoolJudge(settings, pool, worker) if worker is not None else None


def check_unbound(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    """The kind's ``check`` where no judge is bound (a scorer without a pool): it cannot score."""
    return Verdict(False, extract_answer(response), infra_error=f"task {task.id}: verifier judge needs a judge "
                   "worker on the pool, and this scorer has none (judge.worker)")
