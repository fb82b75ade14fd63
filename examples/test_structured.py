"""Structured output through a forced tool call: the arguments stream as tool-call deltas, which
count as content, so `ttft` is the time to the first argument fragment."""

from __future__ import annotations

import json

import pytest

TICKET_TOOL = {
    "name": "file_ticket",
    "description": "File a support ticket.",
    "input_schema": {
        "type": "object",
        "properties": {"summary": {"type": "string"}, "priority": {"type": "string"}},
        "required": ["summary", "priority"],
    },
}


@pytest.mark.latency("ttft.p90 < 80ms", "e2e.p90 < 200ms", samples=20)
def test_ticket_is_extracted(anthropic_client, claude_model):
    with anthropic_client.messages.stream(
        model=claude_model,
        max_tokens=128,
        tools=[TICKET_TOOL],
        tool_choice={"type": "tool", "name": "file_ticket"},
        messages=[{"role": "user", "content": "My invoice is wrong and I am charged twice!"}],
    ) as stream:
        message = stream.get_final_message()
    (call,) = [block for block in message.content if block.type == "tool_use"]
    assert isinstance(call.input, dict)
    json.dumps(call.input)
