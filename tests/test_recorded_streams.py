"""Streams nobody here wrote (issue #14, items 3-6): excerpts of recorded provider responses from
other projects' test fixtures and cassettes, in tests/corpus/recorded/ (each excerpt starts with
a `SOURCE:` line naming the repository, path and commit; README.md there says what each shows).
Their facts carry over: xAI and Gemini's OpenAI-compatible endpoint leave reasoning out of
`completion_tokens`, Groq puts usage in `x_groq.usage`, Magistral streams thinking as content
parts, OpenRouter puts usage on its mid-stream error chunk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_metrics import make_record

from pytest_latency.metrics import call_metrics
from pytest_latency.metrics.apis import REASONING, TEXT
from pytest_latency.wire import WireRecord

CORPUS = Path(__file__).parent / "corpus" / "recorded"


def _segments(name: str) -> list[tuple[str, list[str]]]:
    """The file's recordings: (its SOURCE line, its SSE payloads in order). The excerpts keep
    the payloads verbatim, as `data: {...}` lines (indented in a YAML cassette) or as bare JSON
    lines (vercel/ai's `.chunks.txt` convention); everything else is commentary."""
    out: list[tuple[str, list[str]]] = []
    for raw in (CORPUS / name).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("SOURCE:"):
            out.append((line, []))
            continue
        if line.startswith("data: "):
            line = line[len("data: ") :]
        if out and (line == "[DONE]" or (line.startswith("{") and _is_json(line))):
            out[-1][1].append(line)
    return out


def _is_json(line: str) -> bool:
    # An excerpt may quote a payload as an escaped string (a YAML scalar): commentary here.
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _record(payloads: list[str]) -> WireRecord:
    """The payloads as a Chat Completions stream, one event a read, 10 ms apart."""
    chunks = [(10.0 * (i + 1), f"data: {p}\n\n".encode()) for i, p in enumerate(payloads)]
    return make_record("http://h/v1/chat/completions", chunks, headers_ms=5.0)


def _usages() -> list[tuple[str, dict[str, Any]]]:
    """Every recorded OpenAI-compatible usage object with a total, top-level or Groq's."""
    found = []
    for path in sorted(CORPUS.glob("case[1-4]-*.txt")):
        for source, payloads in _segments(path.name):
            for payload in payloads:
                if payload == "[DONE]":
                    continue
                data = json.loads(payload)
                usage = data.get("usage") or (data.get("x_groq") or {}).get("usage")
                if isinstance(usage, dict) and "total_tokens" in usage:
                    found.append((f"{path.name}: {source[:60]}", data))
    return found


USAGES = _usages()


def test_the_corpus_holds_what_it_is_for() -> None:
    names = {name.split(":")[0] for name, _ in USAGES}
    assert len(USAGES) >= 10, USAGES
    for prefix in ("case1-vercel-ai-xai", "case2-pydantic-ai-groq-xgroq", "case3-", "case4-"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)


@pytest.mark.parametrize(("name", "chunk"), USAGES, ids=[n for n, _ in USAGES])
def test_output_tokens_are_every_generated_token_whatever_the_provider_counts(
    name: str, chunk: dict[str, Any]
) -> None:
    """input + output = total on every provider: reasoning is in output_tokens whether the
    provider counted it in completion_tokens (OpenAI, Groq, Mistral, OpenRouter) or beside it
    (xAI: total = prompt + completion + reasoning; Gemini: the same, reasoning unreported)."""
    usage = chunk.get("usage") or chunk["x_groq"]["usage"]
    metrics = call_metrics(_record([json.dumps(chunk), "[DONE]"]))
    assert metrics.input_tokens == usage["prompt_tokens"], name
    assert metrics.input_tokens is not None and metrics.output_tokens is not None, name
    assert metrics.input_tokens + metrics.output_tokens == usage["total_tokens"], name
    reported = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]:
        assert metrics.output_tokens == usage["completion_tokens"], name
        assert metrics.reasoning_tokens == reported, name
    else:
        assert (
            metrics.reasoning_tokens
            == usage["total_tokens"] - usage["prompt_tokens"] - (usage["completion_tokens"])
        )


def test_xai_reasoning_is_counted_in_output_and_tpot_is_per_generated_token() -> None:
    source, payloads = _segments("case1-vercel-ai-xai-grok-3-mini.txt")[0]
    assert "xai-text.chunks.txt" in source
    metrics = call_metrics(_record(payloads))
    assert metrics.error is None and not metrics.incomplete
    assert (metrics.input_tokens, metrics.output_tokens, metrics.reasoning_tokens) == (12, 291, 290)
    assert metrics.channels[0] == REASONING and TEXT in metrics.channels
    assert metrics.ttft is not None and metrics.ttfo is not None and metrics.ttft < metrics.ttfo
    # 291 tokens over the stream, not 1: tpot is per generated token (was 290x too large).
    assert metrics.tpot is not None and metrics.e2e is not None
    assert metrics.tpot == pytest.approx((metrics.e2e - metrics.ttft) / 290)


def test_groq_usage_only_in_x_groq_is_read() -> None:
    source, payloads = _segments("case2-pydantic-ai-groq-xgroq-only.txt")[0]
    data = [json.loads(p) for p in payloads if p != "[DONE]"]
    assert not any("usage" in d for d in data), "this recording has no top-level usage"
    last = next(d["x_groq"]["usage"] for d in reversed(data) if "usage" in d.get("x_groq", {}))
    metrics = call_metrics(_record(payloads))
    assert metrics.input_tokens == last["prompt_tokens"], source
    assert metrics.output_tokens == last["completion_tokens"]


@pytest.mark.parametrize(
    "name",
    ["case3-pydantic-ai-magistral-stream.txt", "case3-llm-mistral-magistral-high-stream.txt"],
)
def test_magistral_thinking_parts_are_reasoning_and_the_answer_is_output(name: str) -> None:
    source, payloads = _segments(name)[0]
    metrics = call_metrics(_record(payloads))
    assert metrics.error is None, source
    assert metrics.channels[:2] == (REASONING, TEXT), metrics.channels
    # The first thinking part is the first token; the answer comes after the thinking.
    assert metrics.ttft is not None and metrics.ttfo is not None and metrics.ttft < metrics.ttfo


def test_openrouter_usage_on_the_error_chunk_is_kept() -> None:
    source, payloads = _segments("case4-pydantic-ai-openrouter-error-with-usage.txt")[0]
    metrics = call_metrics(_record(payloads))
    assert metrics.error is not None and metrics.error.startswith("sse_error:"), source
    assert (metrics.input_tokens, metrics.output_tokens) == (43, 10)


def _anthropic_record(name: str) -> WireRecord:
    """An excerpt of an Anthropic SSE body (event: and data: lines kept), one event a read."""
    text = (CORPUS / name).read_text(encoding="utf-8")
    events, current = [], []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("event: ", "data: ")):
            current.append(line)
            if line.startswith("data: "):
                events.append("\n".join(current) + "\n\n")
                current = []
    chunks = [(10.0 * (i + 1), event.encode()) for i, event in enumerate(events)]
    return make_record("http://h/v1/messages", chunks, headers_ms=5.0)


def test_anthropic_compaction_counts_every_iteration() -> None:
    """The top-level message_delta usage is the final pass only (input 181, cache read 0,
    output 8); the compaction pass (input 100, cache read 55,096, output 83) is in
    `usage.iterations`: the call read 55,096 tokens from the cache and generated 91."""
    metrics = call_metrics(_anthropic_record("case5-pydantic-ai-anthropic-compaction-stream.txt"))
    assert metrics.error is None
    assert metrics.cache_read_tokens == 55_096
    assert metrics.output_tokens == 91
    assert metrics.input_tokens == 100 + 55_096 + 181
