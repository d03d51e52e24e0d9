"""The request bodies the endpoint accepts: OpenAI's chat completions and responses (text in, text out),
plus the ``conductor`` extension field for per-request controls.

OpenAI fields this endpoint has no use for (``temperature``, ``top_p``, ``user``, ``metadata``...) are
accepted and ignored, so existing client code runs unchanged; fields it cannot honour (``n`` > 1, tools,
non-text content) are refused with a 400 naming them. The extension field is strict: a misspelt
control fails rather than silently doing nothing.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from conductor.serving.api_errors import ApiError


class Controls(BaseModel):
    """``extra_body={"conductor": {...}}``: narrow what this request may do; never widen the model's limits."""

    model_config = ConfigDict(extra="forbid")

    workers: Optional[list[str]] = Field(default=None, min_length=1, description="worker ids it may call")
    max_steps: Optional[int] = Field(default=None, ge=1, le=32)
    max_rounds: Optional[int] = Field(default=None, ge=0, le=8)
    max_cost_usd: Optional[float] = Field(default=None, gt=0)
    trace: bool = Field(default=False, description="return the workflow that answered (audit trail)")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "input_text", "output_text"]
    text: str


Content = Union[str, list[TextPart]]


def text_of(content: Optional[Content]) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else "".join(part.text for part in content)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: Optional[Content] = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    max_tokens: Optional[int] = Field(default=None, ge=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=1, description="one answer per request")
    conductor: Controls = Field(default_factory=Controls)

    @field_validator("messages")
    @classmethod
    def _ends_with_the_user(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        if messages[-1].role != "user" or not text_of(messages[-1].content).strip():
            raise ValueError("the last message must be a non-empty user message")
        return messages

    def refuse_unsupported(self) -> None:
        for name in ("tools", "functions", "tool_choice", "response_format"):
            if (self.model_extra or {}).get(name) not in (None, [], "none", {"type": "text"}):
                raise ApiError(400, f"{name} is not supported: the Conductor answers in text", param=name,
                               code="unsupported_parameter")

    @property
    def answer_max_tokens(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens

    def question(self) -> str:
        return conversation_as_question([(m.role, text_of(m.content)) for m in self.messages])


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: Content
    type: Literal["message"] = "message"


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: Union[str, list[InputMessage]]
    instructions: Optional[str] = None
    stream: bool = False
    max_output_tokens: Optional[int] = Field(default=None, ge=1)
    conductor: Controls = Field(default_factory=Controls)

    @field_validator("input")
    @classmethod
    def _has_a_question(cls, value: Union[str, list[InputMessage]]) -> Union[str, list[InputMessage]]:
        last = value if isinstance(value, str) else (text_of(value[-1].content) if value else "")
        if not last.strip() or (not isinstance(value, str) and value[-1].role != "user"):
            raise ValueError("the input must end with a non-empty user message")
        return value

    def refuse_unsupported(self) -> None:
        for name in ("tools", "previous_response_id", "tool_choice"):
            if (self.model_extra or {}).get(name) not in (None, [], "none"):
                raise ApiError(400, f"{name} is not supported: the Conductor answers in text", param=name,
                               code="unsupported_parameter")

    @property
    def answer_max_tokens(self) -> Optional[int]:
        return self.max_output_tokens

    def question(self) -> str:
        turns = [("system", self.instructions)] if self.instructions else []
        if isinstance(self.input, str):
            turns.append(("user", self.input))
        else:
            turns += [(m.role, text_of(m.content)) for m in self.input]
        return conversation_as_question(turns)


def conversation_as_question(turns: list[tuple[str, str]]) -> str:
    """What the Conductor and its workers are asked. One user message is the question as it stands; with
    instructions or earlier turns, those come first, labelled, and the last user message closes it."""
    *earlier, (_, last) = turns
    if not earlier:
        return last
    label = {"system": "Instructions", "developer": "Instructions", "user": "User", "assistant": "Assistant"}
    lines = [f"{label[role]}: {text}" for role, text in earlier if text.strip()]
    return "\n\n".join([*lines, f"User: {last}"])
