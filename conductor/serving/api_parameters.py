"""What the endpoint does with each OpenAI request parameter: the one table the request schemas, the
README's parameter table and its test (tests/test_serve_hostile.py) are checked against.

Every top-level field is one of:
- ``honoured``: it does what OpenAI documents, for the Conductor's answer. ``temperature``, ``top_p`` and
  ``seed`` set the sampling of the worker that writes the answer (the last step, or a fallback); the token
  limit bounds that answer, and a cut answer says so (``finish_reason: "length"``, ``status: "incomplete"``).
- ``refused``: any value but its default (listed) is a 400 ``unsupported_parameter`` naming it, because
  the Conductor cannot do it (tools, stop sequences, log-probabilities, JSON modes...).
- ``ignored``: accepted and unused, because it cannot change the answer (``user``, ``metadata``, ...).
Any other field is a 400 ``unknown_parameter`` naming it, as OpenAI answers.
"""

from __future__ import annotations

from typing import Any, Literal

Kind = Literal["honoured", "refused", "ignored"]

# refused parameters: the values that mean "not used" (OpenAI's defaults), which are accepted
_OFF: dict[str, tuple[Any, ...]] = {
    "stop": (None, []), "logprobs": (None, False), "top_logprobs": (None, 0), "logit_bias": (None, {}),
    "presence_penalty": (None, 0), "frequency_penalty": (None, 0), "response_format": (None, {"type": "text"}),
    "tools": (None, []), "functions": (None, []), "tool_choice": (None, "none"), "function_call": (None, "none"),
    "audio": (None,), "modalities": (None, ["text"]), "prediction": (None,), "reasoning_effort": (None,),
    "web_search_options": (None,), "verbosity": (None,), "previous_response_id": (None,), "reasoning": (None,),
    "include": (None, []), "background": (None, False), "conversation": (None,), "prompt": (None,),
    "truncation": (None, "disabled"), "max_tool_calls": (None,),
}

CHAT: dict[str, Kind] = {
    **dict.fromkeys(("model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                     "temperature", "top_p", "seed", "n"), "honoured"),
    **dict.fromkeys(("stop", "logprobs", "top_logprobs", "logit_bias", "presence_penalty", "frequency_penalty",
                     "response_format", "tools", "functions", "tool_choice", "function_call", "audio", "modalities",
                     "prediction", "reasoning_effort", "web_search_options", "verbosity"), "refused"),
    **dict.fromkeys(("user", "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key",
                     "safety_identifier"), "ignored"),
}

RESPONSES: dict[str, Kind] = {
    **dict.fromkeys(("model", "input", "instructions", "stream", "max_output_tokens", "temperature", "top_p",
                     "text"), "honoured"),
    **dict.fromkeys(("tools", "tool_choice", "previous_response_id", "reasoning", "include", "background",
                     "conversation", "prompt", "truncation", "max_tool_calls", "top_logprobs"), "refused"),
    **dict.fromkeys(("user", "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key",
                     "safety_identifier", "stream_options"), "ignored"),
}

# fields of a chat message an assistant turn carries when a client sends a reply back: accepted while unset
MESSAGE_OFF: dict[str, tuple[Any, ...]] = {"tool_calls": (None, []), "function_call": (None,), "audio": (None,),
                                           "refusal": (None,), "tool_call_id": (None,)}
# fields of a text content part that do not change its text
PART_IGNORED = frozenset({"annotations", "logprobs"})
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def is_off(name: str, value: Any) -> bool:
    """Whether a refused parameter's value means it is not used."""
    return value is None or any(value == off and isinstance(value, bool) == isinstance(off, bool)
                                for off in _OFF[name] if off is not None)
