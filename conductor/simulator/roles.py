"""What a subtask asks a simulated worker to do, read from its words the way an LLM would take them.

Real workers behave differently when told to check an answer they can see than when told to solve anew,
and a worker asked for a plan writes no final answer. The simulator reads the subtask with fixed keyword
rules, in this order:

- ``aggregate``: combine, synthesise, reconcile or pick among answers ("aggregate", "synthesize",
  "reconcile", "consensus", "majority", "best of", "choose the best"...), with two or more answers visible;
- ``verify``: check, review, critique, revise or correct an answer ("check", "verify", "review",
  "critique", "revise", "correct", "fix", "improve", "refine", "double-check"), with an answer visible
  (with two or more visible and no aggregation words, the worker checks the latest);
- ``plan``: plan, outline, design or decompose *without* answering ("plan", "outline", "design",
  "decompose", "strategy", "approach", "do not solve"), unless it also asks for the final answer;
- ``solve``: everything else.

A policy therefore gets a verifier by writing a subtask a human would read as "verify", not by a magic
token; the rules are documented so that a user can read a trace and see why a step behaved as it did.
"""

from __future__ import annotations

import re
from enum import Enum


class Role(str, Enum):
    SOLVE = "solve"
    VERIFY = "verify"
    AGGREGATE = "aggregate"
    PLAN = "plan"


_AGGREGATE = re.compile(r"\b(aggregat\w*|synthesi[sz]\w*|reconcil\w*|consensus|majority|combine\w*|merge|"
                        r"best (one|answer|response|of)|choose the best|pick the best|select the best|"
                        r"which (of|answer|response) is|if they disagree|disagree\w*)\b", re.IGNORECASE)
_VERIFY = re.compile(r"\b(check\w*|verif\w*|review\w*|critique\w*|critic\w*|revis\w*|correct (it|them|any|the)|"
                     r"correct\w* (errors?|mistakes?)|fix\w*|improv\w*|refin\w*|double-check\w*|"
                     r"find (the|any) (error|mistake|bug)s?|validat\w*|audit\w*)\b", re.IGNORECASE)
_PLAN = re.compile(r"\b(plan\w*|outlin\w*|design\w*|decompos\w*|strateg\w*|approach\w*|sketch\w*|"
                   r"do not solve|don't solve|without solving)\b", re.IGNORECASE)
_ASKS_FOR_ANSWER = re.compile(r"\b(final answer|\\boxed|answer:|#### |give the answer|implement\w*|"
                              r"solve (it|the)|write the (code|function))\b", re.IGNORECASE)
_NO_SOLVING = re.compile(r"\b(do not solve|don't solve|without solving|no final answer)\b", re.IGNORECASE)


def classify(subtask: str, visible_answers: int) -> Role:
    """The role a worker takes for ``subtask``, given how many earlier turns with an answer it sees."""
    if visible_answers >= 2 and _AGGREGATE.search(subtask):
        return Role.AGGREGATE
    if visible_answers >= 1 and (_VERIFY.search(subtask) or _AGGREGATE.search(subtask)):
        return Role.VERIFY
    if _PLAN.search(subtask) and (_NO_SOLVING.search(subtask) or not _ASKS_FOR_ANSWER.search(subtask)):
        return Role.PLAN
    return Role.SOLVE
