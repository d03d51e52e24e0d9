"""The policy a run starts from: the configured model, or a tiny one built here, then (``sft.steps`` >
0) the SFT warm start that teaches it the workflow format (learner/sft.py), with its workers drawn
uniformly or by a measured per-domain prior (conductor/worker_prior.py), or its examples drawn from a
measured per-domain menu of workflows (conductor/workflow_prior.py). Reused when present, so a resumed run
starts from the same weights.

A cost-dial run (conductor/cost_dial.py) puts each SFT question in a prompt at every setting of the dial;
with the workflow menu, a prompt's examples come from its setting's menu. One prompt a question, its setting
drawn, left the warm start ignoring the setting: two prompts a domain and setting, nothing to contrast, and it
learned each domain's mixture of the menus (docs/results/cost-dial.md). The same question at every setting
shows what changes with the setting alone."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.console import Console

from cluster.rollouts import policy_path
from conductor.config import Config
from conductor.cost_dial import CARD_FILE, NAMED_SETTINGS, card_of
from conductor.example_workflows import example_plans, example_text
from conductor.prompt_builder import PromptBuilder
from conductor.recursive_examples import recursive_prompt_ids
from conductor.roster import Roster
from conductor.run_output import RunOutput, local_copy
from conductor.setup_cost import SetupSpend, measurement_estimate
from conductor.simulator.presets import load_preset
from conductor.stop_request import signals_held
from conductor.tasks.task import Task
from conductor.worker_prior import Prior, measure_prior, prior_tasks, random_prior, roster_weights
from conductor.workflow_prior import MenuPrior, item_name, measure_menu, roster_menu

if TYPE_CHECKING:
    from conductor.local_pool import SpendSink

# The file each measured prior leaves beside its SFT policy: a reused warm start must show the configured one.
PRIOR_FILES = {"domain_reward": "worker_prior.json", "random": "random_prior.json",
               "workflow_reward": "workflow_prior.json"}


def warm_start_policy(config: Config, out: RunOutput, train_tasks: Sequence[Task], console: Console,
                      spend: Optional[SetupSpend] = None) -> str:
    """The policy's location: a local dir, or a URL under a remote output (actors copy it per node).
    ``spend``, where given, may stop a measured prior or menu before it starts (the spend cap) and is told
    what it spent through the pool."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from learner.sft import sft_warm_start

    made_by = PRIOR_FILES.get(config.sft.worker_prior)
    if config.sft.steps and made_by and out.exists("sft", "config.json") and not out.exists("sft", made_by):
        raise ValueError(f"{out.path('sft')} was not made with sft.worker_prior={config.sft.worker_prior} "
                         f"(no {made_by}): delete it to measure a new warm start, or use another run_name")
    start = policy_path(config, out, "initial", [task.prompt for task in train_tasks])
    if config.sft.steps == 0:
        return start
    if out.exists("sft", "config.json"):
        console.print(f"SFT warm start: reusing {out.path('sft')}")
        return out.path("sft")
    local_start = local_copy(start, config.output.storage_options)
    tokenizer = AutoTokenizer.from_pretrained(local_start)
    model = AutoModelForCausalLM.from_pretrained(local_start, dtype=torch.float32)
    builder = PromptBuilder(config, tokenizer, seed=config.seed)
    tasks, prior, menu = list(train_tasks)[:config.sft.prompts], None, None
    if config.sft.worker_prior != "uniform":
        tasks = prior_tasks(train_tasks, -(-config.sft.prompts // len({t.domain for t in train_tasks})), config.seed)
    on_spend = None
    if spend is not None and (estimate := measurement_estimate(config, train_tasks)) is not None:
        kind = "menu" if config.sft.worker_prior == "workflow_reward" else "prior"
        spend.check(estimate, f"the warm start's measured {kind}")
        on_spend = partial(spend.add, phase="warm_start")
    if config.sft.worker_prior == "domain_reward":
        prior = worker_prior(config, train_tasks, tokenizer, console, on_spend)
    elif config.sft.worker_prior == "random":
        prior = random_prior({t.domain for t in train_tasks}, [w.id for w in config.pool.workers],
                             config.sft.prior_temperature, config.seed)
        console.print("SFT random worker prior (measured from nothing): " + "; ".join(
            f"{domain} " + ", ".join(f"{w} {p:.2f}" for w, p in sorted(ws.items(), key=lambda i: -i[1])[:3])
            for domain, ws in prior.items()))
    elif config.sft.worker_prior == "workflow_reward":
        menu = workflow_menu(config, train_tasks, tokenizer, console, on_spend)
    if not tasks:
        raise ValueError("the SFT warm start needs training questions")
    dial = card_of(config.reward)
    tasks, settings = at_every_setting(tasks, dial and dial.settings)
    rosters = [builder.roster() for _ in tasks]
    prompts = sft_prompts(builder, tasks, rosters, settings)
    weights = None if prior is None else [roster_weights(prior, task.domain, roster.worker_ids)
                                          for task, roster in zip(tasks, rosters)]
    menus = None if menu is None else [roster_menu(menu[setting], task.domain, roster.worker_ids)
                                       for task, roster, setting in zip(tasks, rosters, settings)]
    plans = example_plans(config.sft.plan, config.sft.plan_words, [task.prompt for task in tasks], settings,
                          kinds=[task.domain for task in tasks])
    recursive = None
    if config.sft.recursive_share > 0 or config.sft.recursive_steps:
        rng = random.Random(f"recursive-examples:{config.seed}")
        previous = [example_text(config.sft.shapes, len(roster), rng, None if weights is None else weights[i],
                                 None if menus is None else menus[i], plans[i] if plans else "")
                    for i, roster in enumerate(rosters)]
        workers = () if config.data.datasets else load_preset(config.simulator).workers
        recursive = recursive_prompt_ids(builder, tasks, rosters, previous, rng, workers, settings)
    started = time.time()

    def progress(step: int, loss: float) -> None:  # a pretrained model's SFT takes minutes: show it moving
        if (step + 1) % 10 == 0:
            console.print(f"  SFT step {step + 1}: loss {loss:.3f} ({time.time() - started:.0f}s)")

    losses = sft_warm_start(model, tokenizer, prompts, len(rosters[0]), config.sft, seed=config.seed,
                            on_step=progress, worker_weights=weights, menus=menus, plans=plans,
                            recursive_prompts=recursive)
    with signals_held():  # a reused sft/ is whole (its config.json is written first): a stop waits for it
        model.save_pretrained(out.staged("sft"))
        tokenizer.save_pretrained(out.staged("sft"))
        if prior is not None:
            prior_file = Path(out.staged("sft"), PRIOR_FILES[config.sft.worker_prior])
            prior_file.write_text(json.dumps(prior, indent=1, sort_keys=True))
        # the domain table (conductor/evaluation/domain_table.py) reads the menu: a dial run's balanced one
        if menu is not None:
            kept = None if dial is None else min(menu, key=lambda setting: abs(setting - dial.default))
            named = {domain: {item_name(item): weight for item, weight in items.items()}
                     for domain, items in menu[kept].items()}
            Path(out.staged("sft"), PRIOR_FILES["workflow_reward"]).write_text(json.dumps(named, indent=1,
                                                                                          sort_keys=True))
        if dial is not None:
            Path(out.staged("sft"), CARD_FILE).write_text(dial.json())
        published = out.publish("sft")
    console.print(f"SFT warm start: {len(losses)} steps in {time.time() - started:.0f}s, "
                  f"loss {losses[0]:.3f} → {losses[-1]:.3f}")
    del model
    release_memory()
    return published


def at_every_setting(tasks: Sequence[Task], settings: Optional[Sequence[int]]) -> tuple[list[Task],
                                                                                       list[Optional[int]]]:
    """The warm start's questions and the cost-dial setting each prompt states: every question at every
    setting of a dial run (``settings``), each once with no setting (None) otherwise."""
    if not settings:
        return list(tasks), [None] * len(tasks)
    return [task for task in tasks for _ in settings], [setting for _ in tasks for setting in settings]


def sft_prompts(builder: PromptBuilder, tasks: Sequence[Task], rosters: Sequence[Roster],
                settings: Sequence[Optional[int]]) -> list[list[int]]:
    """The warm start's prompts as token ids, each stating its cost-dial setting (None: none)."""
    return [builder.task_prompt_ids(task, roster, setting) for task, roster, setting in zip(tasks, rosters, settings)]


def workflow_menu(config: Config, train_tasks: Sequence[Task], tokenizer, console: Console,
                  on_spend: Optional[SpendSink] = None) -> dict[Optional[int], MenuPrior]:
    """The measured per-domain menu the examples are drawn from, by cost-dial setting (None: no dial),
    printed as it is measured (its likeliest items, with their mean rewards)."""
    started = time.time()
    menus, rewards = measure_menu(config, train_tasks, tokenizer, seed=config.seed, on_spend=on_spend)
    console.print(f"SFT workflow prior: each worker alone and pairs among the {config.sft.prior_top_workers} best, "
                  f"on up to {config.sft.prior_questions} training questions a domain ({time.time() - started:.0f}s), "
                  f"T={config.sft.prior_temperature}")
    shown = [setting for setting in menus if setting is None or setting in NAMED_SETTINGS.values()] or list(menus)
    for setting in sorted(shown, key=lambda setting: -1 if setting is None else setting):  # cheap, balanced, best
        menu = menus[setting]
        if setting is not None:
            console.print(f" at cost_quality {setting}:")
        for domain in sorted(menu):
            ranked = sorted(menu[domain].items(), key=lambda entry: -entry[1])[:5]
            console.print(f"  {domain}: " + ", ".join(f"{item_name(item)} {weight:.2f} "
                                                     f"(reward {rewards[setting][domain][item]:.3f})"
                                                     for item, weight in ranked))
    return menus


def worker_prior(config: Config, train_tasks: Sequence[Task], tokenizer, console: Console,
                 on_spend: Optional[SpendSink] = None) -> Prior:
    """The measured domain prior the examples' workers are drawn by, printed as it is measured."""
    started = time.time()
    prior, mean_rewards = measure_prior(config, train_tasks, tokenizer, seed=config.seed, on_spend=on_spend)
    console.print(f"SFT worker prior: every worker alone on up to {config.sft.prior_questions} training questions "
                  f"a domain ({time.time() - started:.0f}s), T={config.sft.prior_temperature}")
    for domain in sorted(prior):
        ranked = sorted(prior[domain].items(), key=lambda item: -item[1])
        console.print(f"  {domain}: " + ", ".join(f"{worker} {weight:.2f} (reward {mean_rewards[domain][worker]:.2f})"
                                                 for worker, weight in ranked))
    return prior


def release_memory() -> None:
    """Hand the SFT's freed memory back to the OS. The driver lives on beside the engines and learners it
    starts next; after SmolLM2's warm start it held 9.4 GB it no longer used and the node ran out of memory.
    Measured (3 SFT steps, 9.1 GB peak): freed and collected, 5.1 GB stayed resident in glibc's arenas;
    with ``malloc_trim`` 0.6 GB, the model-less baseline."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
