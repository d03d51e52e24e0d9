"""``make demo``: one question, end to end, against a scripted pool; prints the trace.

The Conductor's text and the workers are scripted (no model, no API): the point is to show the workflow
language, the executor's access lists and concurrency, a recursive round, verification and reward.
"""

from __future__ import annotations

import asyncio
import re
import sys

from rich.console import Console
from rich.table import Table

from cluster.cli_console import cli_console
from conductor.config import Config
from conductor.config_loader import config_from_cli
from conductor.episode import ConductorTurn, EpisodeRunner
from conductor.episode_score import EpisodeScorer
from conductor.executor import WorkflowExecutor
from conductor.pool import Messages
from conductor.prompts import conductor_messages, load_fewshot
from conductor.roster import Roster
from conductor.scripted_pool import ScriptedPool
from conductor.tasks import Task, load_tasks

FALLBACK_TASK = Task("demo/0", "gsm8k", "Tom has 3 boxes of 12 pencils and gives away 7. How many are left?\n\n"
                     "End the response with '#### N', where N is the final number.", "29", "number")
ROOT_WORKFLOW = """Plan first, solve with the plan in view, then have a cheap model check the whole chain.
model_id = [0, 1, 2]
subtasks = ["Outline the steps needed to solve the question. Do not compute the answer.", "Follow the plan and solve the question. End with '#### N'.", "Check the solution above. If it is right, restate it ending with '#### N'; otherwise fix it."]
access_list = [[], [0], ["all"]]"""
ACCEPT = "The checked answer is consistent with the plan, so I accept it.\nmodel_id = []\nsubtasks = []\naccess_list = []"


def scripted_workers(task: Task) -> dict[str, object]:
    def solver(messages: Messages) -> str:
        return f"Following the plan step by step, the result is {task.answer}.\n#### {task.answer}"

    def checker(messages: Messages) -> str:
        seen = re.findall(r"####\s*(\S+)", " ".join(m["content"] for m in messages if m["role"] == "assistant"))
        return f"I re-derived each step; the solution holds.\n#### {seen[-1] if seen else '?'}"

    return {"planner": "1. Read the quantities. 2. Combine them in the order the question gives. 3. Report.",
            "solver": solver, "checker": checker}


async def run_demo(config: Config, console: Console) -> float | None:
    tasks = load_tasks(config.data.datasets[0]) if config.data.datasets else [FALLBACK_TASK]
    task = tasks[0]
    roster = Roster.full(config.pool.workers)
    fewshot = load_fewshot(config.prompt.fewshot_file, config.prompt.num_fewshot, config.executor.max_steps)
    prompt = conductor_messages(task.prompt, roster, fewshot, max_steps=config.executor.max_steps,
                                show_prices=config.prompt.show_prices)
    console.rule("Conductor prompt (user turn)")
    console.print(prompt[-1]["content"])
    pool = ScriptedPool(scripted_workers(task), delay_s=0.05, price_per_token_usd=2e-6)
    executor = WorkflowExecutor(pool, question_visibility=config.executor.question_visibility,
                                parallel=config.executor.parallel_steps)
    runner = EpisodeRunner(executor, fewshot, max_steps=config.executor.max_steps,
                           show_prices=config.prompt.show_prices)

    async def conductor(messages: Messages) -> ConductorTurn:
        return ConductorTurn(ACCEPT)

    episode = await runner.run(task.prompt, roster, ROOT_WORKFLOW, recursive_rounds=config.executor.max_rounds,
                               conductor=conductor)
    for trace in episode.rounds:
        console.rule(f"Round {trace.round}")
        console.print(trace.conductor_text, markup=False)
        if trace.parse_error:
            console.print(f"[red]parse error[/red] {trace.parse_error.value}: {trace.parse_detail}")
        if trace.accepted_previous:
            console.print("[green]accepted the previous answer[/green]")
        if trace.steps:
            table = Table("step", "worker", "sees", "tokens in/out", "latency", "cost $", "response")
            for step in trace.steps:
                table.add_row(str(step.index), f"{step.shown_worker} ({step.worker_id})", ("all" if step.access == "all" else str(list(step.access))),
                              f"{step.tokens_in}/{step.tokens_out}", f"{step.latency_s:.2f}s",
                              f"{step.cost_usd:.6f}", (step.response or step.error or "")[:70])
            console.print(table)
    score = EpisodeScorer(config.verifier, config.reward).score_now(task, episode)
    extracted = score.verdict.extracted if score.verdict else None
    console.rule("Result")
    console.print(f"task {task.id}: gold {task.answer!r}, extracted {extracted!r}, correct={score.correct}, "
                  f"format_ok={score.format_ok}, infra_error={score.infra_error}, reward={score.reward}")
    return score.reward


def main(argv: list[str] | None = None) -> int:
    config = config_from_cli(argv, default_config="configs/demo.yaml", description=__doc__)
    score = asyncio.run(run_demo(config, cli_console()))
    return 0 if score is not None else 1


if __name__ == "__main__":
    sys.exit(main())
