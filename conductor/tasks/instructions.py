"""The answer-format instruction each verifier relies on, appended to a task's prompt by default."""

from __future__ import annotations

MATH_INSTRUCTION = "Put the final answer in \\boxed{}."
NUMBER_INSTRUCTION = "End the response with '#### N', where N is the final number."
CHOICE_INSTRUCTION = "End the response with 'Answer: X', where X is the letter of the correct option."
CODE_INSTRUCTION = "Return the complete solution in a single ```python code block."
TEXT_INSTRUCTION = "End the response with 'Answer: ' followed by the answer."

DEFAULT_INSTRUCTIONS = {
    "math": MATH_INSTRUCTION, "number": NUMBER_INSTRUCTION, "choice": CHOICE_INSTRUCTION,
    "text": TEXT_INSTRUCTION, "exact": TEXT_INSTRUCTION, "humaneval": CODE_INSTRUCTION, "mbpp": CODE_INSTRUCTION,
    "lcb_stdin": CODE_INSTRUCTION, "lcb_functional": CODE_INSTRUCTION,
}
