"""A twin preset: the measured workers of a pool as a simulator preset file (conductor/simulator/preset_file.py),
so that ``simulator.preset: <path>`` serves a simulated copy of the pool on the user's own tasks.

What calibration measures (conductor/calibration.py) goes in as it was measured: each worker's accuracy per
domain, its hidden reasoning tokens, its latency (a fitted log-normal), and its visible tokens less the length
of the answer the simulator writes by itself (conductor/simulator/render.py), so that the twin's replies are
as long as the real ones. Prices are the pool's configured ones. What it cannot measure is kept from a base
preset or left at the schema's documented default, and the file's header says which: the error correlation
(0.5 in every domain), and the behaviour knobs, which are simulator settings rather than preset fields.
The twin reproduces each worker's rate per domain, not which questions it gets right: the simulator draws
its own item difficulties.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import yaml

from conductor.calibration import WorkerFit
from conductor.config import WorkerSpec
from conductor.simulator.preset_file import PresetFile
from conductor.simulator.presets import SimWorker
from conductor.simulator.render import own_value, render_answer
from conductor.simulator.server import count_tokens
from conductor.tasks.task import Task

ACCURACY_DIGITS = 4
HEADER_WIDTH = 110


class UnmeasuredDomain(ValueError):
    """A worker with no scored answer in a domain: the twin would have to invent its accuracy."""


def bare_answer_tokens(questions: Sequence[Task]) -> float:
    """The mean length, in the simulator's tokens, of a right answer it renders with no working before it."""
    bare = SimWorker(name="bare", description="bare", accuracy={})
    return statistics.fmean(count_tokens(render_answer(t, own_value(t, True, 0.0), bare, "solve", 0.0))
                            for t in questions) if questions else 0.0


def twin_workers(fits: Sequence[WorkerFit], specs: Sequence[WorkerSpec], bare_tokens: float) -> list[dict[str, Any]]:
    by_id = {spec.id: spec for spec in specs}
    workers = []
    for fit in fits:
        unmeasured = [d for d, a in fit.domains.items() if not a.scored]
        if unmeasured:
            raise UnmeasuredDomain(f"worker {fit.worker}: no scored answer in {', '.join(unmeasured)} (every call "
                                   "an infrastructure error), so no twin; see calibration.json")
        spec = by_id[fit.worker]
        workers.append({
            "name": fit.worker, "description": spec.description,
            "accuracy": {d: round(a.accuracy, ACCURACY_DIGITS) for d, a in fit.domains.items()},
            "latency_ms": round(fit.latency_ms, 1), "latency_sigma": round(fit.latency_sigma, 3),
            "price_in_per_m": spec.price_in_per_m or 0.0, "price_out_per_m": spec.price_out_per_m or 0.0,
            "answer_tokens": max(0, round(fit.visible_tokens - bare_tokens)),
            "reasoning_tokens": round(fit.hidden_tokens),
        })
    return workers


def measured_comment(fit: WorkerFit) -> str:
    accuracies = ", ".join(f"{d} {a.accuracy:.3f} ± {a.se:.3f} (n {a.scored}"
                           + (f", {a.infra_errors} infra errors)" if a.infra_errors else ")")
                           for d, a in fit.domains.items())
    return (f"  # measured: {accuracies}; per call {fit.visible_tokens:.0f} visible + {fit.hidden_tokens:.0f} "
            f"hidden tokens, median {fit.median_latency_ms:.0f} ms, ${fit.cost_usd:.6f}")


def twin_judge(judge: Optional[WorkerSpec], base: Optional[PresetFile],
               worker_names: Sequence[str] = ()) -> Optional[dict[str, Any]]:
    """The twin's simulated judge, for judged tasks: the base preset's, or the pool's judge worker at its
    prices with the schema's error rate. Its error rate is not measured (that needs each item's truth). A
    judge that is also a routed worker (``judge.worker`` naming one) gets a name of its own in the twin,
    where the judge is a separate entry, found as the pool's one judge with ``judge.worker`` unset."""
    if base is not None and base.judge is not None:
        return base.judge.model_dump(mode="json")
    if judge is None:
        return None
    name = f"{judge.id}-judge" if judge.id in worker_names else judge.id
    return {"name": name, "description": judge.description or "grades answers against a rubric",
            "price_in_per_m": judge.price_in_per_m or 0.0, "price_out_per_m": judge.price_out_per_m or 0.0}


def twin_preset_text(name: str, fits: Sequence[WorkerFit], specs: Sequence[WorkerSpec], questions: Sequence[Task],
                     tasks: Mapping[str, Any], error_correlation: Mapping[str, float], header: Sequence[str],
                     judge: Optional[Mapping[str, Any]] = None) -> str:
    """The preset file: ``header`` as comments, then the workers (each under a comment with its s.e.), the
    judge if judged tasks need one, the kept error correlation and the task source; checked against the
    preset schema before it is returned."""
    workers = twin_workers(fits, specs, bare_answer_tokens(questions))
    body: dict[str, Any] = {"name": name, "workers": workers}
    if judge is not None:
        body["judge"] = dict(judge)
    if error_correlation:
        body["error_correlation"] = dict(error_correlation)
    body["tasks"] = dict(tasks)
    PresetFile.model_validate(body)
    lines = [f"# {line}" if line else "#" for line in header]
    lines.append(yaml.safe_dump({"name": name}, default_flow_style=False).rstrip())
    lines.append("workers:")
    for fit, worker in zip(fits, workers):
        lines.append(measured_comment(fit))
        lines.append(_indented(_dump([worker])))
    rest = {key: body[key] for key in ("judge", "error_correlation", "tasks") if key in body}
    lines.append(_dump(rest).rstrip())
    return "\n".join(lines) + "\n"


def _dump(data: Any) -> str:
    """Block style, with a mapping or list of plain values on one line (as the shipped presets read)."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000, default_flow_style=None)


def _indented(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.rstrip().splitlines())


def kept_correlation(base: Optional[PresetFile], domains: Sequence[str]) -> dict[str, float]:
    """The base preset's error correlation in the calibrated domains (none: the schema's 0.5 everywhere)."""
    if base is None:
        return {}
    return {d: rho for d, rho in base.error_correlation.items() if d in domains}


def twin_header(command: str, workers: Sequence[str], per_domain: Mapping[str, int], seed: int, tasks_from: str,
                base_preset: Optional[str], path: str) -> list[str]:
    """The twin's opening comments: how it was measured, and what in it was not."""
    counts = ", ".join(f"{d} {n}" for d, n in per_domain.items())
    kept = (f"kept from preset {base_preset} in the calibrated domains (0.5 in the others)" if base_preset
            else "the schema's default, 0.5 in every domain (calibrate.base_preset keeps a preset's)")
    paragraphs = [
        f"A twin of the pool {', '.join(workers)}, written by",
        f"Each worker answered the same questions ({counts}; drawn with seed {seed}) of {tasks_from}, alone, in "
        "the single-worker wording (conductor/baselines.py SOLVE_ALONE), through the pool, scored by the run's "
        "verifier and reward (conductor/episode_score.py); infrastructure errors are out of the accuracies.",
        "Measured: accuracy per domain (its s.e. in the comment over each worker); reasoning_tokens, the hidden "
        "completion tokens per call; answer_tokens, the visible ones less the simulator's own bare answer; "
        "latency_ms and latency_sigma, a log-normal fitted to the calls that needed no retry (their wall time "
        "through the pool, a wait for a slot included).",
        "Not measured: the prices are the pool's configured ones (USD per 1M tokens, 0 where unset); "
        f"error_correlation is {kept}; the behaviour knobs (simulator.boost, mislead, verify_keep, verify_fix, "
        "aggregate_pick, aggregate_follow, plan_follow, plan_mislead, sample_noise) are simulator settings with "
        "documented defaults (conductor/simulator_config.py), not preset fields. The twin has no unseen task "
        "types, and reproduces each worker's rate per domain, not which questions it gets right. A judge, where "
        "judged tasks need one, is the base preset's or the pool's judge worker with the schema's error rate: "
        "its error rate is not measured.",
        f"Use it with pool.workers empty: --set simulator.preset={path}",
        "The schema: conductor/simulator/preset_file.py.",
    ]
    lines = textwrap.wrap(paragraphs[0], HEADER_WIDTH) + [f"  {command}"]
    for paragraph in paragraphs[1:]:
        lines += textwrap.wrap(paragraph, HEADER_WIDTH, break_long_words=False, break_on_hyphens=False)
    return lines
