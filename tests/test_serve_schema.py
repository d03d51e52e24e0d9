"""Request bodies: what is accepted, what is refused and how the 400 names the field; the question a
conversation becomes."""

import pytest
from pydantic import ValidationError

from conductor.serving.api_errors import ApiError, from_validation
from conductor.serving.api_schema import ChatCompletionRequest, ResponsesRequest


def refusal(body, schema=ChatCompletionRequest):
    with pytest.raises(ValidationError) as info:
        schema.model_validate(body)
    return from_validation(info.value)


@pytest.mark.parametrize("body,param", [
    ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"model": "m", "messages": []}, "messages"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "conductor": {"max_cost_usd": -1}},
     "conductor.max_cost_usd"),
    ({"model": "m", "messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
    # OpenAI refuses these; coerced, `true` was a $1 cap and one step, "yes" a trace
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "conductor": {"max_cost_usd": True}},
     "conductor.max_cost_usd"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "conductor": {"max_cost_usd": "1"}},
     "conductor.max_cost_usd"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "conductor": {"max_steps": True}},
     "conductor.max_steps"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "conductor": {"trace": "yes"}},
     "conductor.trace"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": "0.5"}, "temperature"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_p": True}, "top_p"),
])
def test_a_bad_body_is_a_400_naming_the_field(body, param):
    error = refusal(body)
    assert error.status == 400 and error.param == param and param in error.message


def test_openai_fields_without_a_use_here_are_accepted_and_unsupported_ones_refused():
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "temperature": 0.3, "top_p": 0.9, "user": "u-1", "metadata": {"a": "b"}, "seed": 3}
    ChatCompletionRequest.model_validate(body).refuse_unsupported()
    with pytest.raises(ApiError) as info:
        ChatCompletionRequest.model_validate(dict(body, tools=[{"type": "function"}])).refuse_unsupported()
    assert info.value.param == "tools"
    assert refusal({"model": "m", "input": "  "}, ResponsesRequest).param == "input"


def test_a_conversation_becomes_one_question_with_its_context_first():
    chat = ChatCompletionRequest.model_validate({"model": "m", "messages": [
        {"role": "system", "content": "Answer in French."}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]})
    assert chat.question() == "Instructions: Answer in French.\n\nUser: 2+2?\n\nAssistant: 4\n\nUser: And 3+3?"
    single = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "2+2?"}]})
    assert single.question() == "2+2?"
    responses = ResponsesRequest.model_validate({"model": "m", "input": "2+2?", "instructions": "Be brief."})
    assert responses.question() == "Instructions: Be brief.\n\nUser: 2+2?"
