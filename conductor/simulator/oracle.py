"""What a simulated worker answers: a calibrated skill, and a behaviour that depends on its subtask and on
what it sees.

**Skill.** Within a domain every item gets a difficulty ``z_i ~ N(0, 1)`` and each worker a private noise
``e_wi ~ N(0, 1)``; worker w solves exactly the ``round(acc_w,d * n_d)`` items with the lowest
``z_i + e_wi``. So each worker's accuracy on the known set equals its table value, and workers tend to
fail on the same (hard) items. The known set is the preset's tasks and its unseen task types; each domain is
calibrated on its own items, so adding a domain changes no other domain's answers. The threshold between
solved and unsolved gives each (worker, item) a margin; a request carrying a ``seed`` adds
``N(0, sample_noise)`` to it (an independent sample, as for consensus), and a request without one always
gets the same answer.

**Behaviour** (conductor/simulator/roles.py reads the role from the subtask). "Can solve" below is the
worker's own skill on the item; every draw is a hash of (seed, worker, item, messages, sample seed).

- *solve*, with earlier answers in view: a worker that cannot solve turns right with probability
  ``boost`` if one of them is right; one that can turns wrong with probability ``mislead`` if all are
  wrong. With only a plan in view: a right plan makes a worker that cannot solve right with probability
  ``plan_follow``; a wrong one derails a worker that can with probability ``plan_mislead``.
- *verify* (checks the latest answer in view): a right answer stays right if the worker can solve, and
  otherwise with probability ``verify_keep`` (else the worker swaps in its own wrong answer); a wrong
  answer is caught and corrected with probability ``verify_fix`` if the worker can solve, and otherwise
  stands. Checking your own answer therefore changes nothing: a worker does not find its own mistakes.
- *aggregate* (several answers in view): a worker that can solve picks the right answer with probability
  ``aggregate_pick`` (else the most common one); one that cannot adopts the most common answer with
  probability ``aggregate_follow``, and otherwise gives its own.
- *plan*: states a key idea and no answer; the idea is right if the worker can solve.

No behaviour makes a right answer out of nothing: a workflow is right only if some worker in it could
solve the item (with a seed's noise, on that sample). Redundant steps cost what they read and write.
"""

from __future__ import annotations

import collections
import hashlib
import math
import re
import statistics
from dataclasses import dataclass
from typing import Optional

from conductor.config import SimulatorConfig
from conductor.pool import Messages
from conductor.simulator.presets import SimPreset, SimWorker
from conductor.simulator.render import key_idea, own_value, plan_is_right, render_answer, render_plan, uniform
from conductor.simulator.roles import Role, classify
from conductor.tasks.task import Task
from conductor.verifiers.answer_key import answer_key, final_value, is_right

KEY_CHARS = 48  # tasks are indexed by their first characters, then matched on the whole prompt
_QUESTION_MARKER = re.compile(r"Question:\s*\n")
_NORMAL = statistics.NormalDist()


def normalise_space(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Reply:
    text: str
    correct: Optional[bool]  # None: an unknown question, or a plan (no answer)
    task_id: Optional[str]
    role: Role = Role.SOLVE
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class Seen:
    """An earlier answer in the worker's context."""
    value: str
    key: str
    right: bool


class Oracle:
    def __init__(self, preset: SimPreset, config: SimulatorConfig):
        self.workers = {w.name: w for w in preset.workers}
        self.config = config
        self.seed = config.seed
        known = preset.tasks + preset.unseen
        self.tasks_by_key: dict[str, list[tuple[str, Task]]] = {}
        for task in known:
            prompt = normalise_space(task.prompt)
            self.tasks_by_key.setdefault(prompt[:KEY_CHARS], []).append((prompt, task))
        self.margin: dict[tuple[str, str], float] = {}
        for domain in sorted({t.domain for t in known}):
            items = [t for t in known if t.domain == domain]
            rho = preset.error_correlation.get(domain, 0.5)
            weight = math.sqrt(rho / (1 - rho))  # corr(score_w, score_v) = weight^2 / (weight^2 + 1) = rho
            difficulty = {t.id: weight * _NORMAL.inv_cdf(uniform(self.seed, "difficulty", t.id)) for t in items}
            for worker in preset.workers:
                score = {t.id: difficulty[t.id] + _NORMAL.inv_cdf(uniform(self.seed, "noise", worker.name, t.id))
                         for t in items}
                ranked = sorted(score.values())
                cutoff = round(worker.accuracy.get(domain, 0.0) * len(items))
                low = ranked[cutoff - 1] if cutoff > 0 else ranked[0] - 1.0
                high = ranked[cutoff] if cutoff < len(ranked) else ranked[-1] + 1.0
                threshold = (low + high) / 2
                for task in items:
                    self.margin[(worker.name, task.id)] = threshold - score[task.id]
        # whether each worker solves each item alone, without a sample seed
        self.base_correct = {key: margin > 0 for key, margin in self.margin.items()}

    def can_solve(self, worker: str, task: Task, sample_seed: Optional[int]) -> bool:
        margin = self.margin.get((worker, task.id), -1.0)
        if sample_seed is not None and self.config.sample_noise > 0:
            margin += self.config.sample_noise * _NORMAL.inv_cdf(uniform(self.seed, "sample", worker, task.id,
                                                                         sample_seed))
        return margin > 0

    def _lookup(self, text: str) -> Optional[Task]:
        text = normalise_space(text)
        for prompt, task in self.tasks_by_key.get(text[:KEY_CHARS], ()):
            if text.startswith(prompt):
                return task
        return None

    def find_task(self, messages: Messages) -> Optional[Task]:
        """The known task whose prompt follows a 'Question:' line, or opens a user message."""
        for message in messages:
            if message.get("role") != "user":
                continue
            content = message.get("content") or ""
            starts = [match.end() for match in _QUESTION_MARKER.finditer(content)] + [0]
            for start in starts:
                task = self._lookup(content[start:])
                if task is not None:
                    return task
        return None

    def answer(self, worker_name: str, messages: Messages, sample_seed: Optional[int] = None) -> Reply:
        worker = self.workers[worker_name]
        task = self.find_task(messages)
        if task is None:
            return Reply("I could not identify enough information to answer this.", None, None)
        earlier = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        seen = []
        plans = []
        for text in earlier:
            value = final_value(task, text)
            if value is not None:
                seen.append(Seen(value, answer_key(task, value), is_right(task, value)))
            else:
                plan = plan_is_right(self.seed, task, text)
                if plan is not None:
                    plans.append(plan)
        subtask = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        role = classify(subtask, len(seen))
        own = self.can_solve(worker_name, task, sample_seed)
        sample = () if sample_seed is None else (sample_seed,)
        draw = uniform(self.seed, "context", worker_name, task.id,
                       hashlib.blake2b(repr(messages).encode(), digest_size=8).hexdigest(), *sample)
        style = uniform(self.seed, "style", task.id)  # one length per item: equal answers read the same
        reasoning = int(worker.reasoning_tokens * (0.5 + uniform(self.seed, "reasoning", worker_name, task.id,
                                                                 sample_seed)))
        if role is Role.PLAN:
            text = render_plan(task, key_idea(self.seed, task, own, worker_name), worker, style)
            return Reply(text, None, task.id, role, reasoning)
        value = self._decide(role, worker, task, own, seen, plans, draw,
                             uniform(self.seed, "wrong", worker_name, task.id, *sample))
        right = is_right(task, value)
        return Reply(render_answer(task, value, worker, role.value, style), right, task.id, role, reasoning)

    def _decide(self, role: Role, worker: SimWorker, task: Task, own: bool, seen: list[Seen], plans: list[bool],
                draw: float, wrong_draw: float) -> str:
        """The value the worker states; ``wrong_draw`` picks its wrong answer (a new one per sample)."""
        c = self.config
        wrong = own_value(task, False, wrong_draw)
        gold = own_value(task, True, 0.0)
        mine = gold if own else wrong
        if role is Role.AGGREGATE:
            if own:
                return gold if draw < c.aggregate_pick else _most_common(seen).value
            return _most_common(seen).value if draw < c.aggregate_follow else mine
        if role is Role.VERIFY:
            checked = seen[-1]
            if checked.right:
                return gold if own or draw < c.verify_keep else mine
            return gold if own and draw < c.verify_fix else checked.value
        if seen:  # solving with answers in view
            if any(s.right for s in seen):
                return gold if own or draw < c.boost else mine
            return wrong if own and draw < c.mislead else mine
        if plans:
            if plans[-1]:
                return gold if own or draw < c.plan_follow else mine
            return wrong if own and draw < c.plan_mislead else mine
        return mine


def _most_common(seen: list[Seen]) -> Seen:
    """The answer stated most often; among equals, the latest."""
    counts = collections.Counter(s.key for s in seen)
    top = max(counts.values())
    return next(s for s in reversed(seen) if counts[s.key] == top)
