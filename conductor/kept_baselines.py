"""The held-out baselines a run measured, kept with it (``baselines.json``), so that a resumed segment reads
them instead of paying for them again. Every baseline is a call per held-out question and worker (paper-7:
the 7 workers and the random router over 400 questions, $13.82 of the committed run's $303 at the preset's
prices), and a run stopped by its spend cap and resumed with a raised one would otherwise pay that again
before its first step.

The figures are reused only when nothing they depend on has changed: the key is a hash of the held-out
questions (ids, texts, answers and how each is checked), the seed, and the config sections a baseline's calls
and scores go through (the workers and judges as the Conductor and the pool see them, the executor, prompts,
reward, verifier, judge, data and simulator). Where the pool's endpoints live (URLs, the simulator's port)
and how fast they may be called are not in it: they do not change an answer. A run that is not resumed
measures afresh, and so does a resumed one whose key differs or whose kept figures lost calls to
infrastructure errors (an outage is not kept for the rest of the run), saying why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Optional

from conductor.baselines import run_baselines
from conductor.config import Config
from conductor.run_output import RunOutput
from conductor.setup_cost import SetupSpend, baselines_estimate
from conductor.tasks.task import Task

KEPT = "baselines.json"
Figures = dict[str, dict[str, float]]


def question_digest(task: Task) -> str:
    """A held-out question as the baselines meet it: its text, its answer and how it is checked."""
    server = task.reward_server.url if task.reward_server else None
    fields = [task.id, task.prompt, task.answer, str(task.verifier), task.reward_function, server]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()


def baselines_key(config: Config, tasks: Sequence[Task]) -> str:
    """What the baselines' figures depend on, hashed (sha256 hex)."""
    sections = ("executor", "prompt", "reward", "verifier", "judge", "data")
    material = {
        "questions": [question_digest(task) for task in tasks],
        "seed": config.seed,
        "workers": [worker.model_dump(mode="json") for worker in config.pool.workers],
        "judges": [judge.model_dump(mode="json") for judge in config.pool.judges],
        "simulator": config.simulator.model_dump(mode="json", exclude={"port"}),
        **{name: getattr(config, name).model_dump(mode="json") for name in sections},
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Baselines:
    figures: Figures
    spend: dict[str, float]   # what measuring them cost this segment, by provider (nothing when kept)
    kept: bool                # read from the run's own baselines.json
    note: str = ""            # why earlier figures were not reused, when there were some


def read_kept(out: RunOutput, key: str) -> tuple[Figures | None, str]:
    """The kept figures, or None and why they cannot be reused ("" where there are none)."""
    if not out.exists(KEPT):
        return None, ""
    try:
        kept = json.loads(out.read_text(KEPT))
        figures, same = kept["figures"], kept.get("key") == key
        failed = sum(int(stats.get("infra_errors", 0)) for stats in figures.values())
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"{KEPT} could not be read ({type(exc).__name__})"
    if not same:
        return None, ("the held-out questions, the seed, the pool's workers or how answers are scored changed "
                      "since they were measured")
    if failed:
        return None, f"{failed} of their calls failed (infrastructure errors) when they were measured"
    return figures, ""


def kept_or_measured(config: Config, tasks: Sequence[Task], tokenizer: Any, out: RunOutput,
                     run_spend: Optional[SetupSpend] = None) -> Baselines:
    """The run's kept figures when it is resumed, their key still matches and none of their calls failed;
    otherwise measure them (``run_baselines``) and keep them with the run. ``run_spend``, where given, may
    stop the measurement before it starts (the spend cap) and is told what it spent."""
    key = baselines_key(config, tasks)
    figures, note = read_kept(out, key) if config.train.resume else (None, "")
    if figures is not None:
        return Baselines(figures, {}, kept=True)
    on_spend = None
    if run_spend is not None:
        run_spend.check(baselines_estimate(config, tasks), "the held-out baselines")
        on_spend = partial(run_spend.add, phase="baselines")
    figures, spend = run_baselines(config, tasks, tokenizer, seed=config.seed, on_spend=on_spend)
    out.write_text(KEPT, text=json.dumps({"key": key, "figures": figures}, indent=2, sort_keys=True))
    return Baselines(figures, spend, kept=False, note=note)
