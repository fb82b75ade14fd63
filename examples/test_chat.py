"""Streaming chat: time to first token (prefill) and time per output token (decode), measured
apart through streaming, for both SDKs. Budgets: budgets.toml, `test_chat.py::*`."""

from __future__ import annotations

QUESTION = [{"role": "user", "content": "In two sentences: why does streaming help a chat UI?"}]


def test_anthropic_streamed_answer(anthropic_client, claude_model):
    with anthropic_client.messages.stream(
        model=claude_model, max_tokens=128, messages=QUESTION
    ) as stream:
        text = "".join(stream.text_stream)
    assert text


def test_openai_streamed_answer(openai_client, openai_model):
    chunks = openai_client.chat.completions.create(
        model=openai_model,
        messages=QUESTION,
        max_tokens=128,
        stream=True,
        stream_options={"include_usage": True},  # without it OpenAI streams carry no usage
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
