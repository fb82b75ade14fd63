"""Prompt caching is the biggest TTFT lever, and `cache_read` in usage is the only hard evidence
that it works. These tests keep a long, stable prefix and demand that it is read from cache."""

from __future__ import annotations

import pytest

MANUAL = " ".join(f"Rule {i}: answer briefly, cite the section, never guess." for i in range(400))


@pytest.mark.latency("cache_read_ratio > 0.5", "ttft.p95 < 300ms", samples=10, warmup=1)
def test_system_prompt_is_cached(anthropic_client):
    stream = anthropic_client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=32,
        system=[{"type": "text", "text": MANUAL, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "What does rule 7 say?"}],
        stream=True,
    )
    for _ in stream:
        pass


@pytest.mark.latency("cache_read_ratio > 0.5", samples=10, warmup=1)
def test_openai_prefix_is_cached(openai_client):
    stream = openai_client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=[
            {"role": "system", "content": MANUAL},
            {"role": "user", "content": "What does rule 7 say?"},
        ],
        max_tokens=32,
        stream=True,
        stream_options={"include_usage": True},
    )
    for _ in stream:
        pass
