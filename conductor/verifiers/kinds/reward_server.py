"""``http``: a reward server of the user's (conductor/verifiers/http_reward.py has the wire contract), named
per dataset by ``reward_server``. Like ``python`` it reads no reference of its own: the server gets the
reference if the field map names an answer column, "" otherwise.

Answers are stated, voted on and simulated as ``text`` answers (``Answer: value``; the simulated workers
state the reference when right, a near miss when wrong), so a server that compares the reply's answer line
with the reference scores simulated runs as it would real ones."""

from __future__ import annotations

from conductor.verifiers import http_reward
from conductor.verifiers.kinds import text
from conductor.verifiers.registry import VerifierSpec

SPECS = (VerifierSpec("http", http_reward.check, text.final_value, text.answer_key, text.INSTRUCTION,
                      reference=False),)
