"""Chat latency budgets: time to first token (prefill) and time per output token (decode),
measured apart through streaming, for the Anthropic and OpenAI SDKs."""

from __future__ import annotations

import pytest

QUESTION = [{"role": "user", "content": "In two sentences: why does streaming help a chat UI?"}]


@pytest.mark.latency("ttft.p95 < 400ms", "tpot.p50 < 40ms", "error_rate < 1%", samples=20)
def test_anthropic_streamed_answer(anthropic_client):
    with anthropic_client.messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=QUESTION
    ) as stream:
        text = "".join(stream.text_stream)
    assert text


@pytest.mark.latency("ttft.p95 < 400ms", "tpot.p50 < 40ms", samples=20, warmup=1)
def test_openai_streamed_answer(openai_client):
    chunks = openai_client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=QUESTION,
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
