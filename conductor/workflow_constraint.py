"""The workflow language as a regular expression, for format-constrained decoding (vLLM structured outputs).

A trained Conductor still writes an unparsable workflow now and then at greedy decoding (a paper-7 tiny
policy: 1-2% of held-out questions, ``model_id = [[], [[], [1]``). Constraining the decoder to this
expression makes every completion that ends a valid workflow in canonical form (``Workflow.render``):

    <free-text plan lines, optional>
    model_id = [w0, ..., wk]          k + 1 <= max_steps entries, each a worker index < num_workers
    subtasks = ["...", ..., "..."]    as many non-blank strings (JSON escapes)
    access_list = [a0, ..., ak]       a_i: ["all"], [] or increasing indices of earlier steps

The lengths agree because the expression spells out each step count. ``recursive_round`` also allows three
empty lists (accept the previous answer). Decoding allows one plan line of at most ``MAX_PLAN_LINE_CHARS``
characters before the lists (a policy warm-started with ``sft.plan: restate`` writes one; a bound keeps a
sampled policy from rambling to the token limit); ``plan`` allows any number of any length (parsing tests).
The decoder only masks tokens; a completion cut at ``max_new_tokens`` is still truncated. Used at
evaluation and serving, never for training samples: the learner's logprobs are those of the unconstrained
policy.
"""

from __future__ import annotations

import functools
import re

# A JSON string with a non-blank character: leading blanks, then one visible character (or an escaped quote,
# backslash or slash), then anything but a raw control character (JSON forbids them, and the parser's
# literal_eval reads a raw CR or NUL as the end of the source). Each part excludes what ends the one before, so
# matching is linear. "Visible" is spelt out rather than \S: a grammar engine's \s need not be Python's, and
# str.strip() (the parser's blank test) strips every character in _BLANKS.
_BLANKS = r"\x00-\x20\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_STRING = (r'"(?:[ \t]|\\[nrtf])*(?:[^"\\' + _BLANKS + r']|\\["\\/])'
           r'(?:[^"\\\x00-\x08\x0a-\x1f]|\\["\\/bfnrt])*"')
_PLAN_LINE = r"[^\n=]*\n"  # no "=": a list assignment cannot pass as plan text
MAX_PLAN_LINE_CHARS = 120
MAX_CONSTRAINED_STEPS = 8     # the access lists are spelled out: the expression grows as 2^steps


def _alternation(values: list[str]) -> str:
    return values[0] if len(values) == 1 else "(?:" + "|".join(values) + ")"


def _access(step: int) -> str:
    """``["all"]``, ``[]`` or a strictly increasing list of indices of steps before ``step``."""
    options = [r'\["all"\]', r"\[\]"]
    if step > 0:
        chains = []
        for first in range(step):  # increasing sequences starting at ``first``, spelled out (max_steps is small)
            chains.append(_increasing_from(first, step))
        options.append(r"\[" + _alternation(chains) + r"\]")
    return _alternation(options)


def _increasing_from(first: int, limit: int) -> str:
    rest = [_increasing_from(nxt, limit) for nxt in range(first + 1, limit)]
    return str(first) + ("" if not rest else "(?:, " + _alternation(rest) + ")?")


def _steps(count: int, worker: str) -> str:
    ids = ", ".join([worker] * count)
    subtasks = ", ".join([_STRING] * count)
    access = ", ".join(_access(i) for i in range(count))
    return rf"model_id = \[{ids}\]\nsubtasks = \[{subtasks}\]\naccess_list = \[{access}\]"


@functools.lru_cache(maxsize=32)
def workflow_regex(num_workers: int, max_steps: int, recursive_round: bool = False, plan: bool = False,
                   plan_line_chars: int = MAX_PLAN_LINE_CHARS) -> str:
    """The expression every valid canonical workflow over ``num_workers`` workers and up to ``max_steps``
    steps matches in full, after at most one plan line of up to ``plan_line_chars`` characters (0: none;
    ``plan``: any free-text lines). Cached: every sampled attempt asks for it."""
    if num_workers < 1 or max_steps < 1:
        raise ValueError("a workflow needs at least one worker and one step")
    if max_steps > MAX_CONSTRAINED_STEPS:
        raise ValueError(f"max_steps {max_steps}: the access lists are spelled out per step and grow as 2^steps; "
                         f"constrain at most {MAX_CONSTRAINED_STEPS}")
    worker = _alternation([str(i) for i in range(num_workers)])
    forms = [_steps(count, worker) for count in range(1, max_steps + 1)]
    if recursive_round:
        forms.append(r"model_id = \[\]\nsubtasks = \[\]\naccess_list = \[\]")
    body = _alternation(forms)
    if plan:
        return f"(?:{_PLAN_LINE})*" + body
    return (f"(?:[^\\n=]{{1,{plan_line_chars}}}\\n)?" if plan_line_chars > 0 else "") + body


def matches(expression: str, text: str) -> bool:
    """Python's reading of the expression (tests; vLLM compiles it with its own backend)."""
    return re.fullmatch(expression, text) is not None
