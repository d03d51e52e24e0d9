"""The simulated judge: grades an answer to a judged task (``verifier: judge``) as a judge worker of a real
pool would, from the judge prompt alone, knowing each item's truth.

It reads its prompt (the rubric filled in by conductor/verifiers/judge.py) the way the simulated workers
read theirs: the item is the known task whose prompt follows a ``Question:`` line (or opens the message),
and the graded answer is the last line of the prompt that starts with ``Answer:``, where the simulated
workers close their replies (a rubric of your own must show {question} after such a marker and put no
``Answer:`` line of its own after {answer}). The answer is right when it states the item's reference, the
truth the preset's task set holds, whatever reference the prompt shows. The verdict is then flipped with
probability ``error_rate``, and with probability ``unparseable_rate`` the reply holds no score at all.
Both draws hash (seed, judge, item, answer, the request's seed): the same answer to the same item under
the same request seed always gets the same verdict, and a judge sample or retry carrying another seed is
a fresh draw. An unknown item gets a reply with no score.
"""

from __future__ import annotations

import re
from typing import Optional

from conductor.pool import Messages
from conductor.simulator.oracle import Oracle, Reply
from conductor.simulator.presets import SimJudge
from conductor.simulator.render import uniform
from conductor.verifiers.answer_key import answer_key, is_right

_ANSWER_LINE = re.compile(r"^[ \t]*Answer:[ \t]*(.*\S)[ \t]*$", re.MULTILINE)
RIGHT = "The answer says what the reference says.\nScore: 1"
WRONG = "The answer misses what the reference says.\nScore: 0"
NO_SCORE = "The answer touches on the question; it is hard to say more without further context."
UNKNOWN = "I cannot grade this: I do not recognise the question."


def graded_answer(messages: Messages) -> Optional[str]:
    """The value of the last ``Answer:`` line of the judge's prompt (its user turns), or None."""
    text = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "user")
    found = _ANSWER_LINE.findall(text)
    return found[-1] if found else None


class SimulatedJudge:
    def __init__(self, spec: SimJudge, oracle: Oracle, seed: int):
        self.spec, self.oracle, self.seed = spec, oracle, seed

    def reply(self, messages: Messages, sample_seed: Optional[int] = None) -> Reply:
        task = self.oracle.find_task(messages)
        if task is None:
            return Reply(UNKNOWN, None, None)
        value = graded_answer(messages)
        key = answer_key(task, value) if value is not None else ""
        draw = (self.seed, "judge", self.spec.name, task.id, key, *(() if sample_seed is None else (sample_seed,)))
        if uniform(*draw, "unparseable") < self.spec.unparseable_rate:
            return Reply(NO_SCORE, None, task.id)
        right = value is not None and is_right(task, value)
        if uniform(*draw, "error") < self.spec.error_rate:
            right = not right
        return Reply(RIGHT if right else WRONG, right, task.id)
