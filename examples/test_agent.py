"""An agent turn: three independent lookups run in parallel, then one answer that uses them.
Latency ≈ steps × step time, so the budget bounds the steps (`calls.max`) and the whole turn
(`turn`, the wall time of one run of this body); running the lookups concurrently keeps the turn
near two call times (~190 ms on the simulator), where running them one after another takes four
(~370 ms) and misses `turn.p75 < 300ms`. Budgets: budgets.toml, marker `agent`."""

from __future__ import annotations

import asyncio

import pytest

TOPICS = ["billing", "shipping", "returns"]


async def lookup(client, model: str, topic: str) -> str:
    message = await client.messages.create(
        model=model,
        max_tokens=48,
        messages=[{"role": "user", "content": f"Summarise our {topic} policy in one line."}],
    )
    return message.content[0].text


@pytest.mark.agent
async def test_parallel_lookups_then_answer(async_anthropic_client, claude_model):
    notes = await asyncio.gather(*(lookup(async_anthropic_client, claude_model, t) for t in TOPICS))
    answer = await async_anthropic_client.messages.create(
        model=claude_model,
        max_tokens=64,
        messages=[{"role": "user", "content": "Answer the customer using:\n" + "\n".join(notes)}],
    )
    assert answer.content[0].text
