"""The request bodies the endpoint accepts: OpenAI's chat completions and responses (text in, text out),
plus the ``conductor`` extension field for per-request controls.

What each OpenAI field does here is in conductor/serving/api_parameters.py: honoured, refused by name
unless unset, or ignored because it cannot change the answer; any other field is refused by name. The
extension field is strict too: a misspelt control fails rather than silently doing nothing.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator
from pydantic_core import PydanticCustomError

from conductor.serving import api_parameters as parameters
from conductor.serving.api_errors import ApiError

MAX_TOKENS_LIMIT = 1_000_000  # a bound far above any worker's; each worker's own limit then applies


class Controls(BaseModel):
    """``extra_body={"conductor": {...}}``: narrow what this request may do; never widen the model's limits.
    ``cost_quality`` sets a dial policy's trade-off instead (a policy without the dial refuses it)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    workers: Optional[list[str]] = Field(default=None, min_length=1, description="worker ids it may call")
    max_steps: Optional[int] = Field(default=None, ge=1, le=32, strict=True)
    max_rounds: Optional[int] = Field(default=None, ge=0, le=8, strict=True)
    max_cost_usd: Optional[float] = Field(default=None, gt=0, strict=True)  # true is no cap of $1
    cost_quality: Optional[int] = Field(default=None, ge=0, le=10, strict=True, description="the cost dial: 0 "
                                        "cheapest .. 10 best quality, for a policy trained with it "
                                        "(conductor/cost_dial.py); default: the model's")
    trace: bool = Field(default=False, strict=True, description="return the workflow that answered (audit trail)")


class ContentPart(BaseModel):
    """One part of a message's content: text is read; any other type (an image, audio, a file) is refused
    by name, since the Conductor and its workers are asked in text."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: Optional[str] = None

    @model_validator(mode="after")
    def _text_only(self) -> ContentPart:
        if self.type not in parameters.TEXT_PART_TYPES:
            raise PydanticCustomError("unsupported_parameter", "content type '{kind}' is not supported: the "
                                      "Conductor reads text parts only", {"kind": self.type[:40], "field": "type"})
        unknown = sorted(set(self.model_extra or {}) - parameters.PART_IGNORED)
        if unknown:
            raise PydanticCustomError("extra_forbidden", "unrecognized field in a text part",
                                      {"field": unknown[0][:64]})
        if self.text is None:
            raise PydanticCustomError("missing", "a text part needs its text", {"field": "text"})
        return self


def _content_kind(value: Any) -> str:
    return "str" if isinstance(value, str) else "list"


Content = Annotated[Union[Annotated[str, Tag("str")], Annotated[list[ContentPart], Tag("list")]],
                    Discriminator(_content_kind)]


def text_of(content: Optional[Union[str, list[ContentPart]]]) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else "".join(part.text or "" for part in content)


def _refuse_set(fields: dict[str, Any], path: str, names: dict[str, tuple[Any, ...]]) -> None:
    for name in names:
        if fields.get(name) not in (None, *names[name]):
            raise ApiError(400, f"{path}{name} is not supported: the Conductor answers in text",
                           param=f"{path}{name}", code="unsupported_parameter")


TOOL_ROLES = ("tool", "function")


def _refuse_tool_turns(value: Any) -> Any:
    """A tool turn is refused by name; any other unknown role is an invalid value."""
    if isinstance(value, dict) and value.get("role") in TOOL_ROLES:
        raise PydanticCustomError("unsupported_parameter", "role '{role}' is not supported: the Conductor has no "
                                  "tools, so no tool turns", {"role": value["role"], "field": "role"})
    return value


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: Optional[Content] = None
    name: Optional[str] = None  # ignored: who spoke does not change the question
    tool_calls: Optional[list[Any]] = None
    function_call: Optional[Any] = None
    audio: Optional[Any] = None
    refusal: Optional[str] = None
    tool_call_id: Optional[str] = None
    annotations: Optional[list[Any]] = None  # ignored

    _tool_turns = model_validator(mode="before")(_refuse_tool_turns)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = Field(default=False, strict=True)
    include_obfuscation: Optional[bool] = None  # ignored: no obfuscation padding is sent


class ResponsesStreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_obfuscation: Optional[bool] = None


class _OpenAiRequest(BaseModel):
    """A request body: its honoured fields are declared; the refused and ignored ones of its parameter
    table arrive as extras, and any other field is refused as unknown."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    table: ClassVar[dict[str, parameters.Kind]]

    def refuse_unsupported(self) -> None:
        extra = self.model_extra or {}
        for name in extra:
            if name not in self.table:
                raise ApiError(400, f"Unrecognized request argument supplied: {name[:64]}", param=name[:64],
                               code="unknown_parameter")
        for name, value in extra.items():
            if self.table[name] == "refused" and not parameters.is_off(name, value):
                raise ApiError(400, f"{name} is not supported: the Conductor answers in text "
                               "(the README's parameter table)", param=name, code="unsupported_parameter")

    @property
    def answer_sampling(self) -> dict[str, Any]:
        """The honoured sampling parameters, for the worker that writes the answer."""
        return {name: value for name in ("temperature", "top_p", "seed")
                if (value := getattr(self, name, None)) is not None}


class ChatCompletionRequest(_OpenAiRequest):
    table: ClassVar[dict[str, parameters.Kind]] = parameters.CHAT

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = Field(default=False, strict=True)
    stream_options: Optional[StreamOptions] = None
    max_tokens: Optional[int] = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT, strict=True)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT, strict=True)
    temperature: Optional[float] = Field(default=None, ge=0, le=2, strict=True)
    top_p: Optional[float] = Field(default=None, gt=0, le=1, strict=True)
    seed: Optional[int] = Field(default=None, ge=-(2**63), lt=2**63, strict=True)
    n: int = Field(default=1, ge=1, le=1, strict=True, description="one answer per request")
    conductor: Controls = Field(default_factory=Controls)

    @field_validator("messages")
    @classmethod
    def _ends_with_the_user(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        if messages[-1].role != "user" or not text_of(messages[-1].content).strip():
            raise ValueError("the last message must be a non-empty user message")
        return messages

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        for index, message in enumerate(self.messages):
            _refuse_set(message.model_dump(include=set(parameters.MESSAGE_OFF)), f"messages[{index}].",
                        parameters.MESSAGE_OFF)

    @property
    def answer_max_tokens(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens

    def question(self) -> str:
        return conversation_as_question([(m.role, text_of(m.content)) for m in self.messages])


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: Content
    id: Optional[str] = None      # ignored: an earlier output's id
    status: Optional[str] = None  # ignored

    @model_validator(mode="before")
    @classmethod
    def _messages_only(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("type", "message") != "message":
            raise PydanticCustomError("unsupported_parameter", "input item type '{kind}' is not supported: the "
                                      "Conductor reads messages only", {"kind": str(value.get("type"))[:40],
                                                                        "field": "type"})
        return value


class TextOptions(BaseModel):
    """``text``: the output format. Plain text is what the Conductor writes; any other format is refused."""

    model_config = ConfigDict(extra="forbid")

    format: Optional[dict[str, Any]] = None
    verbosity: Optional[str] = None

    @model_validator(mode="after")
    def _plain_text(self) -> TextOptions:
        if self.format is not None and self.format != {"type": "text"}:
            raise PydanticCustomError("unsupported_parameter", "format '{kind}' is not supported: the Conductor "
                                      "answers in plain text", {"kind": str(self.format.get("type"))[:40],
                                                                "field": "format"})
        if self.verbosity is not None:
            raise PydanticCustomError("unsupported_parameter", "verbosity is not supported", {"field": "verbosity"})
        return self


class ResponsesRequest(_OpenAiRequest):
    table: ClassVar[dict[str, parameters.Kind]] = parameters.RESPONSES

    model: str = Field(min_length=1)
    input: Annotated[Union[Annotated[str, Tag("str")], Annotated[list[InputMessage], Tag("list")]],
                     Discriminator(_content_kind)]
    instructions: Optional[str] = None
    stream: bool = Field(default=False, strict=True)
    max_output_tokens: Optional[int] = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT, strict=True)
    temperature: Optional[float] = Field(default=None, ge=0, le=2, strict=True)
    top_p: Optional[float] = Field(default=None, gt=0, le=1, strict=True)
    text: Optional[TextOptions] = None
    stream_options: Optional[ResponsesStreamOptions] = None  # ignored: no obfuscation padding is sent
    conductor: Controls = Field(default_factory=Controls)

    @field_validator("input")
    @classmethod
    def _has_a_question(cls, value: Union[str, list[InputMessage]]) -> Union[str, list[InputMessage]]:
        last = value if isinstance(value, str) else (text_of(value[-1].content) if value else "")
        if not last.strip() or (not isinstance(value, str) and value[-1].role != "user"):
            raise ValueError("the input must end with a non-empty user message")
        return value

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
