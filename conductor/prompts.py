"""Conductor prompts: the root prompt (role, step semantics, format, few-shot, question, models) and the
recursive prompt (previous plan, final response, the accept-with-empty-lists rule).

Both return chat messages; the engine applies the policy's chat template. Few-shot examples come from a
JSON file (``[{question, models, response}]``) so users can replace them without touching code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional

from conductor.cost_dial import setting_line
from conductor.pool import Messages
from conductor.roster import Roster
from conductor.workflow import parse_workflow

ROLE = (
    "You are the Conductor: you answer a question by delegating it to a team of language models. "
    "You do not answer the question yourself. You write a short plan, then a workflow of at most "
    "{max_steps} steps."
)
SEMANTICS = """How a workflow runs:
- Step i sends subtasks[i] to the model numbered model_id[i].
- access_list[i] says which earlier steps that model sees, as prior chat turns (that step's subtask and the model's response): ["all"] for every earlier step, [] for none, or a list of earlier step numbers such as [0, 2]. A step can only see earlier steps.
- Steps that cannot see each other run in parallel.
- The response of the last step is the final answer, so the last subtask must ask for the answer in the format the question needs."""
FORMAT = """Answer format: a few sentences of reasoning, then exactly these three Python lists, each on one line:
model_id = [...]
subtasks = [...]
access_list = [...]"""
RECURSIVE_RULE = (
    "You may run one more workflow to improve the answer: a model with access [\"all\"] will also see the "
    "previous final response. If the answer is already right and complete, accept it by writing three "
    "empty lists:\nmodel_id = []\nsubtasks = []\naccess_list = []"
)


@dataclass(frozen=True)
class FewShotExample:
    question: str
    models: tuple[str, ...]
    response: str


def load_fewshot(path: Optional[str] = None, limit: int = 4, max_steps: int = 5) -> tuple[FewShotExample, ...]:
    """Load and check the examples: each response must itself be a valid workflow for its models."""
    text = (Path(path).read_text() if path
            else resources.files("conductor").joinpath("assets", "fewshot.json").read_text())
    items = json.loads(text)
    if not isinstance(items, list):
        raise ValueError(f"few-shot file {path or '<packaged>'}: expected a JSON list")
    examples = []
    for index, item in enumerate(items[:limit]):
        try:
            example = FewShotExample(str(item["question"]), tuple(map(str, item["models"])), str(item["response"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"few-shot example {index}: needs question, models, response ({exc})") from None
        parse_workflow(example.response, num_workers=len(example.models), max_steps=max_steps)
        examples.append(example)
    return tuple(examples)


def _models_block(descriptions: list[str]) -> str:
    return "\n".join(f"Model {i}: {d}" for i, d in enumerate(descriptions))


def conductor_messages(question: str, roster: Roster, fewshot: tuple[FewShotExample, ...], *,
                       max_steps: int, show_prices: bool = True, cost_quality: Optional[int] = None) -> Messages:
    """The root-round prompt: system = role, semantics, format, examples; user = models, question, then the
    cost dial's setting (a dial policy's: conductor/cost_dial.py). The setting comes last, next to the
    completion: a tiny policy did not find it before a question of varying length (docs/results/cost-dial.md)."""
    parts = [ROLE.format(max_steps=max_steps), SEMANTICS, FORMAT]
    for n, example in enumerate(fewshot, start=1):
        parts.append(f"Example {n}\nAvailable models:\n{_models_block(list(example.models))}\n"
                     f"Question: {example.question}\nResponse:\n{example.response}")
    dial = "" if cost_quality is None else f"\n\n{setting_line(cost_quality)}"
    user = f"Available models:\n{roster.listing(show_prices)}\n\nQuestion: {question}{dial}"
    return [{"role": "system", "content": "\n\n".join(parts)}, {"role": "user", "content": user}]


def recursive_messages(question: str, roster: Roster, fewshot: tuple[FewShotExample, ...], *,
                       previous_plan: str, final_response: str, max_steps: int,
                       show_prices: bool = True, cost_quality: Optional[int] = None) -> Messages:
    """The recursive round: the root conversation, the previous plan as the assistant's turn, then the
    final response and the choice to refine or accept."""
    messages = conductor_messages(question, roster, fewshot, max_steps=max_steps, show_prices=show_prices,
                                  cost_quality=cost_quality)
    messages.append({"role": "assistant", "content": previous_plan})
    messages.append({"role": "user", "content": f"The workflow ran. Its final response was:\n\n{final_response}"
                                                f"\n\n{RECURSIVE_RULE}"})
    return messages
