"""RAG: a long, stable context (instructions + retrieved documents) before a varying question.
Prompt caching is the biggest TTFT lever, and `cache_read` in usage is the only hard evidence that
it works, so the budget demands it (budgets.toml: `cache_read_ratio > 0.8`)."""

from __future__ import annotations

import itertools

INSTRUCTIONS = "You answer questions about the handbook below. Cite the section; never guess."
HANDBOOK = "\n".join(
    f"Section {i}: employees may {verb} up to {i % 9 + 1} days a year; approval by the team lead."
    for i, verb in zip(range(300), itertools.cycle(["carry over", "donate", "split", "defer"]))
)
QUESTIONS = itertools.cycle(
    ["How many days may I defer?", "Who approves a split?", "Can I donate days?"]
)


def test_anthropic_cached_handbook(anthropic_client, claude_model):
    with anthropic_client.messages.stream(
        model=claude_model,
        max_tokens=64,
        system=[
            {"type": "text", "text": INSTRUCTIONS},
            # The breakpoint: everything up to here is cached and read back on the next call.
            {"type": "text", "text": HANDBOOK, "cache_control": {"type": "ephemeral"}},
        ],
        messages=[{"role": "user", "content": next(QUESTIONS)}],
    ) as stream:
        stream.until_done()


def test_openai_cached_handbook(openai_client, openai_model):
    # OpenAI caches long stable prefixes automatically: keep the stable part first.
    for _ in openai_client.chat.completions.create(
        model=openai_model,
        messages=[
            {"role": "system", "content": f"{INSTRUCTIONS}\n{HANDBOOK}"},
            {"role": "user", "content": next(QUESTIONS)},
        ],
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    ):
        pass
