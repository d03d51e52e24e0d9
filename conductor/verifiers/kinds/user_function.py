"""``python``: a user's own reward function (conductor/verifiers/python_reward.py has the contract), named
per dataset by ``reward_function``. It reads no reference of its own (a reward may compare against
``answer`` or ignore it), so a field map may name an answer column or not.

Answers are stated, voted on and simulated as ``text`` answers: the simulated workers end with ``Answer:
value`` (the reference when right, a near miss when wrong), so a reward that compares the reply's answer
line against ``task["answer"]`` scores simulated runs as it would real ones. With no reference the
simulated answers carry nothing to judge."""

from __future__ import annotations

from conductor.verifiers import python_reward
from conductor.verifiers.kinds import text
from conductor.verifiers.registry import VerifierSpec

SPECS = (VerifierSpec("python", python_reward.check, text.final_value, text.answer_key, text.INSTRUCTION,
                      reference=False),)
