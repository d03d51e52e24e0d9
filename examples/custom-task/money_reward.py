"""The example's own reward: a graded score for a money or unit answer.

The contract (conductor/verifiers/python_reward.py): ``score(task, response)`` gets the task as a read-only
mapping (``id``, ``domain``, ``question``, ``answer``: the reference, ``meta``: the dataset's extra columns)
and the episode's final answer, and returns a score in [0, 1], or None when it cannot judge.

Here: full marks within the row's ``tolerance`` (to the cent), partial credit (0.3) for the right ballpark
(within 1% of the reference), nothing otherwise. Accuracy counts a score of 0.5 or more as correct, so a
ballpark answer earns reward but is not counted right. A response with no number is wrong (0.0), not
"cannot judge": None is for a judge that is down, and an episode it returns is left unscored.
"""

import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
BALLPARK = 0.01  # relative error that still earns partial credit
PARTIAL = 0.3


def stated_number(response):
    """The last number in the response's last line that has one ("Answer: $1,266.77" -> 1266.77)."""
    for line in reversed(response.strip().splitlines()):
        found = NUMBER.findall(line)
        if found:
            return float(found[-1].replace(",", ""))
    return None


def score(task, response):
    value = stated_number(response)
    if value is None:
        return 0.0
    reference = float(task["answer"])
    error = abs(value - reference)
    if error <= float(task["meta"].get("tolerance", 0.005)):
        return 1.0
    if error <= BALLPARK * abs(reference):
        return PARTIAL
    return 0.0
