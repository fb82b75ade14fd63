"""Agents: latency ≈ steps × step time, and independent calls should run in parallel.
`calls` budgets the step count per sample; running the three lookups concurrently keeps the
sample's wall time near one call's, not three."""

from __future__ import annotations

import asyncio

import pytest

TOPICS = ["billing", "shipping", "returns"]


async def lookup(client, topic: str) -> str:
    message = await client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=32,
        messages=[{"role": "user", "content": f"Summarise our {topic} policy."}],
    )
    return message.content[0].text


@pytest.mark.latency("calls.max <= 4", "e2e.p95 < 1s", samples=5)
async def test_parallel_lookups_then_answer(async_anthropic_client, latency):
    notes = await asyncio.gather(*(lookup(async_anthropic_client, t) for t in TOPICS))
    answer = await lookup(async_anthropic_client, "; ".join(notes)[:200])
    assert answer
