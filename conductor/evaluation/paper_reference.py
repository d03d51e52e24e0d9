"""The paper's figures the reports compare against (arXiv 2512.04388).

Table 7, constrained in-domain: per-domain figures are MATH-500 / MMLU / LiveCodeBench; the simulated
``paper-7`` preset scores code on HumanEval items calibrated to the LCB column. ``None``: the paper reports
no per-domain figure (for 5x self-reflection it gives only the four-column average, 64.52, against 64.14 for
the best single worker: +0.38, which is what the report compares).

Table 2, task types the Conductor never trained on: AIME25, BigCodeBench and GPQA-Diamond, for the Conductor
and the best single worker only (as quoted in issue 36; the per-worker rows could not be read here). The
simulated stand-ins (conductor/simulator/unseen.py) are keyed by their own domains: ``aime`` (AIME 2024),
``mbpp`` (MBPP sanitized) and ``physchem`` (MMLU physics and chemistry).
"""

from __future__ import annotations

DOMAINS = ("math500", "mmlu", "code")
TOLERANCE = 3.0  # points: the calibration bar for self-reflection and MoA

PAPER = {
    "conductor": {"math500": 89.33, "mmlu": 93.14, "code": 64.29},
    "best_single": {"math500": 85.30, "mmlu": 91.53, "code": 57.50},
    "moa": {"math500": 83.10, "mmlu": 88.46, "code": 38.57},
}
SELF_REFLECTION_GAIN = 64.52 - 64.14  # best 5x self-reflection over the best single worker, 4-column average
TOKENS_PER_QUESTION = {"conductor": 1820, "moa": 11203}

UNSEEN_DOMAINS = ("aime", "mbpp", "physchem")
UNSEEN_LABELS = {"aime": "AIME25-like (AIME 2024)", "mbpp": "BigCodeBench-like (MBPP sanitized)",
                 "physchem": "GPQA-Diamond-like (MMLU physics + chemistry)"}
TABLE2 = {
    "conductor": {"aime": 66.67, "mbpp": 37.8, "physchem": 81.31},
    "conductor_recursive": {"mbpp": 40.0, "physchem": 82.32},  # its recursion result, as issue 36 quotes it
    "best_single": {"aime": 46.67, "mbpp": 35.8, "physchem": 75.25},
}
