"""What a workflow of conductor/simulator/workflow_space.py costs in worker tokens, and one run of it.

``simulate`` writes the workflow as a Conductor would (each step sees exactly the steps its role reads, in
conductor/example_workflows.py's words), lays out each step's messages as ``WorkflowExecutor`` does, asks the
oracle's ``answer`` (no sample seed, as evaluation does) and bills tokens as the simulated server does:
prompt tokens (4 a message) plus the reply and the hidden reasoning. That is one draw of every check, and the
tokens. ``TokenModel`` estimates the same bill for every assignment at once from per-worker means over the
items (the question, each reply and the reasoning; right and wrong answers differ by a few characters), to
hold a search to a token budget; ``simulate`` gives the winners' billed tokens.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from conductor.example_workflows import AGGREGATE, PLAN, SOLVE, SOLVE_WITH_PLAN, VERIFY
from conductor.executor import WorkflowExecutor
from conductor.simulator.oracle import Oracle
from conductor.simulator.render import key_idea, own_value, render_answer, render_plan, uniform
from conductor.simulator.roles import classify
from conductor.simulator.server import count_tokens
from conductor.simulator.workflow_scores import ROLE_OF
from conductor.simulator.workflow_space import ROLES, Shape
from conductor.tasks.task import Task
from conductor.workflow import Step, Workflow

# the words each role is asked in (conductor/example_workflows.py's first), and others with the same meaning:
# a step that repeats another's worker, role and view is worded differently, so that it draws on its own
_SOLVE_AGAIN = ("Answer the question. Give the final answer.", "Work out the question. Give the final answer.")
WORDS = {"solve": (SOLVE, *_SOLVE_AGAIN),
         "plan": (PLAN, "Sketch a strategy. Do not solve.", "Outline a strategy. Do not solve."),
         "plan_solve": (SOLVE_WITH_PLAN, "Answer the question with the plan above.",
                        "Work out the question with the plan above."),
         "check": (VERIFY, "Verify the answer above and correct any mistakes.",
                   "Review the answer above and fix any error.", "Double-check the answer above."),
         "see_solve": (SOLVE, *_SOLVE_AGAIN),
         "reconcile": (AGGREGATE, "Synthesize the answers above.", "Choose the best of the answers above.")}
_LEAD = {"check": "verify", "reconcile": "aggregate"}  # the role name a reply is rendered with


def as_workflow(shape: Shape, workers: Sequence[str], roster: Sequence[str]) -> Workflow:
    """The workflow a Conductor would write for ``shape``: each step sees exactly the steps it reads."""
    used: dict[tuple, int] = defaultdict(int)
    steps = []
    for node, worker in zip(shape, workers):
        key = (worker, node.role, node.inputs)
        if used[key] >= len(WORDS[node.role]):
            raise ValueError(f"more than {len(WORDS[node.role])} identical {node.role} steps by {worker}")
        steps.append(Step(roster.index(worker), WORDS[node.role][used[key]], node.inputs))
        used[key] += 1
        answers = sum(1 for j in node.inputs if shape[j].role != "plan")
        if classify(steps[-1].subtask, answers) is not ROLE_OF[node.role]:
            raise AssertionError(f"{steps[-1].subtask!r} does not read as {node.role}")
    return Workflow(tuple(steps))


def simulate(oracle: Oracle, shape: Shape, workers: Sequence[str], tasks: Sequence[Task],
             max_tokens: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(right, worker tokens) per item of one run of the workflow through the oracle's ``answer``."""
    roster = list(oracle.workers)
    workflow = as_workflow(shape, workers, roster)
    executor = WorkflowExecutor(pool=None)  # type: ignore[arg-type]  # only its message layout is used
    subtasks = [s.subtask for s in workflow.steps]
    right, tokens = np.zeros(len(tasks), dtype=bool), np.zeros(len(tasks))
    for x, task in enumerate(tasks):
        responses: dict[int, str] = {}
        for index, step in enumerate(workflow.steps):
            messages = executor.step_messages(index, step, task.prompt, responses, None, subtasks)
            reply = oracle.answer(roster[step.worker], messages)
            responses[index] = reply.text
            completion = count_tokens(reply.text)
            tokens[x] += sum(count_tokens(str(m["content"])) + 4 for m in messages) + completion
            tokens[x] += min(reply.reasoning_tokens, max(0, max_tokens - completion))
            right[x] = bool(reply.correct)
    return right, tokens


@dataclass(frozen=True)
class TokenModel:
    """Mean tokens over a set of items: the question, and per role and worker a reply and its reasoning."""
    question: float
    reply: dict[str, np.ndarray]  # role -> (workers,)
    reasoning: np.ndarray         # (workers,)

    def cost(self, shape: Shape, plan: np.ndarray) -> np.ndarray:
        """Estimated worker tokens a question of ``shape`` for each row of worker indices in ``plan``."""
        total = np.zeros(len(plan))
        for i, node in enumerate(shape):
            words = count_tokens(WORDS[node.role][0])
            reply = self.reply[node.role][plan[:, i]]
            readers = sum(i in later.inputs for later in shape[i + 1:])
            total += self.question + words + 4 + reply + self.reasoning[plan[:, i]] + readers * (words + reply + 8)
        return total


def token_model(oracle: Oracle, workers: Sequence[str], tasks: Sequence[Task]) -> TokenModel:
    reply = {role: np.zeros(len(workers)) for role in ROLES}
    reasoning = np.zeros(len(workers))
    for task in tasks:
        style = uniform(oracle.seed, "style", task.id)
        gold = own_value(task, True, 0.0)
        for k, name in enumerate(workers):
            worker = oracle.workers[name]
            for role in ROLES:
                text = (render_plan(task, key_idea(oracle.seed, task, True, name), worker, style) if role == "plan"
                        else render_answer(task, gold, worker, _LEAD.get(role, "solve"), style))
                reply[role][k] += count_tokens(text)
            reasoning[k] += int(worker.reasoning_tokens * (0.5 + uniform(oracle.seed, "reasoning", name, task.id,
                                                                         None)))
    size = max(len(tasks), 1)
    question = sum(count_tokens(f"Question:\n{task.prompt}\n\n") for task in tasks) / size
    return TokenModel(question, {role: total / size for role, total in reply.items()}, reasoning / size)
