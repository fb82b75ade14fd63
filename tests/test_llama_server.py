"""Integration: capture + metrics against a real self-hosted server, llama.cpp's `llama-server`.

Owns the proof that what pytest-latency measures through the real `openai` (chat and responses)
and `anthropic` SDKs is right on a real server, not only on our simulator: well-formed content
and usage on all three wire formats, TTFT that grows with prompt length, prefix-cache reads that
show up as `cache_read_tokens` and a lower TTFT, an absent `cache_creation_input_tokens` that stays
absent (None, not 0), and TPOT/TTFT that agree with the server's own `timings`.

The server and its tiny random-weight model come from `scripts/llama_server.py` (`build`,
`model`); without them every test here is skipped with the command to run. One server serves the
whole module (one slot, so calls never overlap). Uses the library directly (`instrument` +
`call_metrics`), as tests/test_accuracy.py does; may import pytest_latency's public modules and
the SDKs, nothing else of the project. Tolerances and measured figures: docs/self-hosted.md.
"""

from __future__ import annotations

import importlib.util
import json
import random
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import openai
import pytest

from pytest_latency import instrument
from pytest_latency.metrics import (
    ANTHROPIC_MESSAGES,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    CallMetrics,
    call_metrics,
)
from pytest_latency.wire import WireRecord

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "llama_server.py"


def _load_script() -> ModuleType:
    # scripts/ is not a package and not on sys.path: load the file itself, once.
    spec = importlib.util.spec_from_file_location("llama_server_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve string annotations through sys.modules[cls.__module__].
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


llama = _load_script()
_REASON: str | None = llama.unavailable_reason()

pytestmark = [
    pytest.mark.llama_server,
    pytest.mark.skipif(_REASON is not None, reason=str(_REASON)),
]

# The tiny model never emits its end token (scripts/llama_server.py bans it), so every call bounds
# its output and gets exactly that many tokens.
MAX_TOKENS = 16
NO_CACHE: dict[str, Any] = {"cache_prompt": False}


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    """One llama-server for the module, on a free loopback port; stopped after the last test."""
    with llama.running() as running:
        yield running


@pytest.fixture
def records() -> list[WireRecord]:
    return []


# llama-server closes a connection after each streamed response while advertising keep-alive, so
# a pooled connection's next request can meet a closed socket ("Server disconnected without
# sending a response", about one call in forty here). A fresh connection per call avoids the race;
# on loopback it adds well under a millisecond to ttft.
CLOSE = {"Connection": "close"}


@pytest.fixture
def openai_client(server: Any, records: list[WireRecord]) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key="none", max_retries=0, default_headers=CLOSE
    )
    with instrument(client, sink=records.append) as instrumented:
        yield instrumented


@pytest.fixture
def anthropic_client(server: Any, records: list[WireRecord]) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(
        base_url=server.base_url, api_key="none", max_retries=0, default_headers=CLOSE
    )
    with instrument(client, sink=records.append) as instrumented:
        yield instrumented


def _words(n: int, seed: int) -> str:
    """About `n` prompt tokens: the tiny model's tokenizer maps each common word to one token."""
    rng = random.Random(seed)
    return " ".join(rng.choices(llama.WORDS, k=n))


def _chat(
    client: openai.OpenAI,
    prompt: str,
    *,
    max_tokens: int = MAX_TOKENS,
    extra: dict[str, Any] | None = None,
) -> str:
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=extra,
    )
    text = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
    return "".join(text)


def _sse_json(record: WireRecord) -> list[dict[str, Any]]:
    """Every `data:` payload of the recorded stream that is a JSON object, in order."""
    body = b"".join(data for _, _, data in record.reads).decode()
    out: list[dict[str, Any]] = []
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip().startswith("{"):
            out.append(json.loads(line[5:]))
    return out


def _timings(record: WireRecord) -> dict[str, Any]:
    """The server's own timings: llama-server puts them on the last chunk of a chat stream."""
    found = [event["timings"] for event in _sse_json(record) if "timings" in event]
    assert found, "llama-server sent no timings"
    timings: dict[str, Any] = found[-1]
    return timings


def _only(records: list[WireRecord]) -> CallMetrics:
    assert len(records) == 1, f"expected one captured call, got {len(records)}"
    metrics = call_metrics(records[0])
    assert metrics.error is None, (metrics.error, metrics.error_detail)
    return metrics


def test_openai_chat_stream_content_and_usage(
    openai_client: openai.OpenAI, records: list[WireRecord]
) -> None:
    text = _chat(openai_client, "Say something about latency.")
    m = _only(records)
    assert text
    assert m.api == OPENAI_CHAT and m.stream and m.status == 200
    assert m.output_tokens == MAX_TOKENS
    assert m.input_tokens is not None and m.input_tokens > 5
    # prompt_tokens_details.cached_tokens is reported, so cache reads are known (maybe 0).
    assert m.cache_fields_reported and m.cache_read_tokens is not None
    # Equal where every content event was found queued at one ask and read back to the
    # newest's arrival (a sync consumer whose events all came while it was away; session 25).
    assert m.ttft is not None and m.e2e is not None and m.ttft <= m.e2e
    assert m.tpot is not None and m.tpot > 0
    assert len(m.itl) >= 1


def test_openai_responses_stream_content_and_usage(
    openai_client: openai.OpenAI, records: list[WireRecord]
) -> None:
    text = []
    stream = openai_client.responses.create(
        model="tiny",
        input="Say something about caching.",
        max_output_tokens=MAX_TOKENS,
        stream=True,
    )
    for event in stream:
        if event.type == "response.output_text.delta":
            text.append(event.delta)
    m = _only(records)
    assert "".join(text)
    assert m.api == OPENAI_RESPONSES and m.stream and m.status == 200
    assert m.output_tokens == MAX_TOKENS
    assert m.input_tokens is not None and m.input_tokens > 5
    assert m.ttft is not None and m.tpot is not None


def test_anthropic_messages_stream_content_and_usage(
    anthropic_client: anthropic.Anthropic, records: list[WireRecord]
) -> None:
    with anthropic_client.messages.stream(
        model="tiny",
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": "Say something about budgets."}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    m = _only(records)
    assert text
    assert final.usage.output_tokens == m.output_tokens
    assert m.api == ANTHROPIC_MESSAGES and m.stream and m.status == 200
    assert m.output_tokens == MAX_TOKENS
    assert m.input_tokens is not None and m.input_tokens > 5
    assert m.ttft is not None and m.tpot is not None
    # llama-server sends cache_read_input_tokens but never cache_creation_input_tokens: absent
    # stays absent (None), it is not a reported zero.
    assert m.cache_read_tokens is not None
    assert m.cache_write_tokens is None


def _median_ttft_ms(client: openai.OpenAI, records: list[WireRecord], n_words: int) -> float:
    ttfts = []
    for seed in range(3):
        records.clear()
        _chat(client, _words(n_words, seed), extra=NO_CACHE)
        m = _only(records)
        assert m.ttft is not None and m.input_tokens is not None
        # The prompt really is as long as intended (±25%, template and tokenizer overhead).
        assert 0.75 * n_words <= m.input_tokens <= 1.25 * n_words + 20, m.input_tokens
        ttfts.append(m.ttft / 1000)
    return statistics.median(ttfts)


def test_ttft_grows_with_prompt_length(
    openai_client: openai.OpenAI, records: list[WireRecord]
) -> None:
    short = _median_ttft_ms(openai_client, records, 50)
    long = _median_ttft_ms(openai_client, records, 1500)
    print(f"median ttft: {short:.1f} ms at ~50 tokens, {long:.1f} ms at ~1500 tokens")
    assert long > 2 * short


def _cache_pair(call: Any, records: list[WireRecord]) -> tuple[CallMetrics, CallMetrics]:
    """A cold call with a long prompt, then the same prompt again: (cold, warm)."""
    out = []
    for _ in range(2):
        records.clear()
        call()
        out.append(_only(records))
    return out[0], out[1]


def _assert_cache_hit(cold: CallMetrics, warm: CallMetrics) -> None:
    assert cold.input_tokens is not None and warm.input_tokens is not None
    assert warm.cache_read_tokens is not None and cold.cache_read_tokens is not None
    ratio = warm.cache_read_tokens / warm.input_tokens
    print(
        f"cold: ttft {cold.ttft and cold.ttft / 1000:.1f} ms, read {cold.cache_read_tokens}"
        f"/{cold.input_tokens}; warm: ttft {warm.ttft and warm.ttft / 1000:.1f} ms,"
        f" read {warm.cache_read_tokens}/{warm.input_tokens} (ratio {ratio:.3f})"
    )
    assert cold.cache_read_tokens / cold.input_tokens < 0.1
    assert ratio > 0.9
    assert warm.ttft is not None and cold.ttft is not None and warm.ttft < cold.ttft


def test_repeated_long_prompt_reads_the_prefix_cache_openai(
    openai_client: openai.OpenAI, records: list[WireRecord]
) -> None:
    # A seed of its own, so no earlier test left this prefix in the cache.
    prompt = _words(1500, seed=101)
    cold, warm = _cache_pair(lambda: _chat(openai_client, prompt), records)
    _assert_cache_hit(cold, warm)


def test_repeated_long_prompt_reads_the_prefix_cache_anthropic(
    anthropic_client: anthropic.Anthropic, records: list[WireRecord]
) -> None:
    prompt = _words(1500, seed=202)

    def call() -> None:
        with anthropic_client.messages.stream(
            model="tiny", max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": prompt}]
        ) as stream:
            for _ in stream.text_stream:
                pass

    cold, warm = _cache_pair(call, records)
    _assert_cache_hit(cold, warm)
    assert warm.cache_write_tokens is None and cold.cache_write_tokens is None


# Agreement bounds, measured on the 2-core CI machine (docs/self-hosted.md has the figures).
TPOT_TOLERANCE_MS = 0.25
TTFT_OVERHEAD_MAX_MS = 25.0
TIMING_CALLS = 8


def test_tpot_and_ttft_agree_with_the_servers_timings(
    openai_client: openai.OpenAI, records: list[WireRecord]
) -> None:
    tpot_diffs: list[float] = []
    ttft_overheads: list[float] = []
    server_tpots: list[float] = []
    for seed in range(TIMING_CALLS):
        records.clear()
        _chat(openai_client, _words(200, seed=300 + seed), max_tokens=32, extra=NO_CACHE)
        m = _only(records)
        timings = _timings(records[0])
        assert m.tpot is not None and m.ttft is not None
        assert timings["predicted_n"] == m.output_tokens
        tpot_diffs.append(m.tpot / 1000 - timings["predicted_per_token_ms"])
        server_tpots.append(timings["predicted_per_token_ms"])
        ttft_overheads.append(m.ttft / 1000 - timings["prompt_ms"])
    print(f"server tpot median {statistics.median(server_tpots):.3f} ms")
    print(
        "tpot − timings.predicted_per_token_ms (ms):",
        " ".join(f"{d:+.3f}" for d in tpot_diffs),
    )
    print("ttft − timings.prompt_ms (ms):", " ".join(f"{d:+.2f}" for d in ttft_overheads))
    assert abs(statistics.median(tpot_diffs)) <= TPOT_TOLERANCE_MS
    # TTFT contains the server's prompt processing plus what the server does not time (HTTP
    # parsing, templating and tokenisation, sampling and writing the first token, loopback).
    assert all(d >= 0 for d in ttft_overheads)
    assert statistics.median(ttft_overheads) <= TTFT_OVERHEAD_MAX_MS
