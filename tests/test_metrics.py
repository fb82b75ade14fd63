"""Per-call metrics from hand-built wire records: every API, usage normalisation, encodings,
errors and the consumer-bound detector. Synthetic stamps only: no network, no sleeps.

The wire samples follow the real formats in research/sdk-findings.md §1.3, §2.2, §2.3.
"""

from __future__ import annotations

import gzip
import itertools
import json
import zlib
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_latency.capture._stream import ASK_PEEK_BYTES
from pytest_latency.metrics import CallMetrics, call_metrics
from pytest_latency.wire import EVENTS_UNKNOWN, READY_SLACK_BYTES, AskedArrival, WireRecord

MS = 1_000_000  # ns
T0 = 10_000 * MS  # an arbitrary perf_counter origin: metrics must subtract it

ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
CHAT_URL = "https://api.openai.com/v1/chat/completions"
RESPONSES_URL = "https://api.openai.com/v1/responses"
COMPLETIONS_URL = "http://localhost:8000/v1/completions"


def sse(payload: Any, event: str | None = None) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


def request(model: str = "m-1", stream: bool = True) -> bytes:
    return json.dumps({"model": model, "stream": stream, "messages": []}).encode()


def make_record(
    url: str,
    chunks: Sequence[tuple[float, bytes]],
    *,
    headers_ms: float | None = 50.0,
    status: int | None = 200,
    content_type: str = "text/event-stream; charset=utf-8",
    content_encoding: str = "",
    eof: bool = True,
    body: bytes | None = None,
    waits_ms: list[float] | None = None,
    **extra: Any,
) -> WireRecord:
    """`chunks` are (arrival ms after T0, bytes). By default the consumer is prompt: it asks
    0.01 ms after the previous chunk arrived and waits for the rest (`waits_ms` overrides)."""
    reads: list[tuple[int, int, bytes]] = []
    previous = T0 + int((headers_ms or 0) * MS)
    for i, (at_ms, data) in enumerate(chunks):
        arrived = T0 + int(at_ms * MS)
        asked = arrived - int(waits_ms[i] * MS) if waits_ms else min(previous + 10_000, arrived)
        reads.append((asked, arrived, data))
        previous = arrived
    t_eof = (reads[-1][1] if reads else previous) + 100_000 if eof else None
    return WireRecord(
        method="POST",
        url=url,
        request_body=request() if body is None else body,
        t_start_ns=T0,
        t_headers_ns=None if headers_ms is None else T0 + int(headers_ms * MS),
        status=status,
        content_type=content_type,
        content_encoding=content_encoding,
        reads=reads,
        t_eof_ns=t_eof,
        t_closed_ns=t_eof,
        **extra,
    )


def anthropic_usage(**fields: Any) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": 12,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2048,
        "output_tokens": 1,
    }
    usage.update(fields)
    return usage


def anthropic_start(usage: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "usage": anthropic_usage() if usage is None else usage,
    }
    return sse({"type": "message_start", "message": message}, "message_start")


def anthropic_block_start(index: int, block: dict[str, Any]) -> bytes:
    payload = {"type": "content_block_start", "index": index, "content_block": block}
    return sse(payload, "content_block_start")


def anthropic_delta(index: int, delta: dict[str, Any]) -> bytes:
    payload = {"type": "content_block_delta", "index": index, "delta": delta}
    return sse(payload, "content_block_delta")


def anthropic_text(text: str, index: int = 0) -> bytes:
    return anthropic_delta(index, {"type": "text_delta", "text": text})


def anthropic_end(usage: dict[str, Any] | None = None, index: int = 0) -> bytes:
    stop = sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 50} if usage is None else usage,
    }
    return stop + sse(delta, "message_delta") + sse({"type": "message_stop"}, "message_stop")


PING = sse({"type": "ping"}, "ping")


def anthropic_text_stream() -> list[tuple[float, bytes]]:
    return [
        (100, anthropic_start() + anthropic_block_start(0, {"type": "text", "text": ""}) + PING),
        (200, anthropic_text("Hel")),
        (220, anthropic_text("lo")),
        (240, anthropic_text("!")),
        (250, anthropic_end()),
    ]


def chat_chunk(delta: dict[str, Any] | None = None, **extra: Any) -> bytes:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-x",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": None}],
        "usage": None,
    }
    chunk.update(extra)
    return sse(chunk)


CHAT_USAGE = {
    "prompt_tokens": 2060,
    "completion_tokens": 50,
    "total_tokens": 2110,
    "prompt_tokens_details": {"cached_tokens": 2048},
    "completion_tokens_details": {"reasoning_tokens": 0},
}


def chat_finish() -> bytes:
    return chat_chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])


def chat_usage(usage: dict[str, Any] | None = None) -> bytes:
    return chat_chunk(choices=[], usage=CHAT_USAGE if usage is None else usage)


DONE = sse("[DONE]")


def chat_text_stream() -> list[tuple[float, bytes]]:
    return [
        (100, chat_chunk({"role": "assistant", "content": ""})),
        (200, chat_chunk({"content": "tok0 "})),
        (220, chat_chunk({"content": "tok1 "})),
        (240, chat_chunk({"content": "tok2"})),
        (245, chat_finish()),
        (300, chat_usage() + DONE),
    ]


def responses_event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, "sequence_number": 0, **fields}, kind)


RESPONSES_USAGE = {
    "input_tokens": 2060,
    "input_tokens_details": {"cached_tokens": 2048, "cache_write_tokens": 0},
    "output_tokens": 50,
    "output_tokens_details": {"reasoning_tokens": 10},
    "total_tokens": 2110,
}


def responses_final(kind: str = "response.completed", **response: Any) -> bytes:
    body: dict[str, Any] = {"id": "resp_1", "object": "response", "model": "gpt-x"}
    body["status"] = "completed"
    body["usage"] = RESPONSES_USAGE
    body.update(response)
    return responses_event(kind, response=body)


def responses_stream() -> list[tuple[float, bytes]]:
    created = {"id": "resp_1", "object": "response", "model": "gpt-x", "status": "in_progress"}
    return [
        (
            100,
            responses_event("response.created", response=created)
            + responses_event("response.in_progress", response=created)
            + responses_event("response.output_item.added", output_index=0, item={}),
        ),
        (150, responses_event("response.reasoning_summary_text.delta", delta="Thinking")),
        (170, responses_event("response.reasoning_summary_text.delta", delta="")),
        (200, responses_event("response.output_text.delta", delta="Hello")),
        (220, responses_event("response.output_text.delta", delta=" world")),
        (240, responses_event("response.function_call_arguments.delta", delta='{"a":')),
        (
            260,
            responses_event("response.output_text.done", text="Hello world") + responses_final(),
        ),
    ]


def metrics_of(url: str, chunks: Sequence[tuple[float, bytes]], **kw: Any) -> CallMetrics:
    return call_metrics(make_record(url, chunks, **kw))


# --- Anthropic Messages ---------------------------------------------------------------------


def test_anthropic_text_stream() -> None:
    m = metrics_of(ANTHROPIC_URL, anthropic_text_stream())
    assert m.api == "anthropic.messages"
    assert (m.model, m.endpoint, m.host, m.stream, m.status) == (
        "m-1",
        "/v1/messages",
        "api.anthropic.com",
        True,
        200,
    )
    assert m.ttfb == 50_000.0
    assert m.ttft == 200_000.0  # not the message_start/ping chunk at 100 ms
    assert m.ttfo == 200_000.0
    assert m.e2e == 240_000.0  # the last text delta, not message_stop at 250 ms
    assert m.itl == (20_000.0, 20_000.0)
    assert m.output_tokens == 50  # message_delta's cumulative count beats message_start's 1
    assert m.tpot == pytest.approx(40_000.0 / 49)
    assert m.content_events == 3
    assert m.channels == ("text",)
    assert (m.error, m.incomplete, m.opaque, m.consumer_bound) == (None, False, False, False)
    assert m.t_start_ns == T0
    assert m.t_end_ns == T0 + 250 * MS + 100_000


def test_anthropic_cache_usage_is_normalised_to_total_input() -> None:
    m = metrics_of(ANTHROPIC_URL, anthropic_text_stream())
    assert m.input_tokens == 2060  # 12 uncached + 2048 read + 0 written
    assert m.cache_read_tokens == 2048
    assert m.cache_write_tokens == 0
    assert m.cache_fields_reported is True


def test_anthropic_thinking_first_then_text() -> None:
    chunks = [
        (100, anthropic_start() + anthropic_block_start(0, {"type": "thinking", "thinking": ""})),
        (150, anthropic_delta(0, {"type": "thinking_delta", "thinking": "Let me"})),
        (170, anthropic_delta(0, {"type": "thinking_delta", "thinking": " think"})),
        (180, anthropic_delta(0, {"type": "signature_delta", "signature": "EqQBCgIYAh"})),
        (300, anthropic_block_start(1, {"type": "text", "text": ""}) + anthropic_text("Hi", 1)),
        (320, anthropic_text(" there", 1)),
        (
            330,
            anthropic_end({"output_tokens": 40, "output_tokens_details": {"thinking_tokens": 30}}),
        ),
    ]
    m = metrics_of(ANTHROPIC_URL, chunks)
    assert m.ttft == 150_000.0  # first thinking delta
    assert m.ttfo == 300_000.0  # first text delta
    assert m.e2e == 320_000.0
    assert m.channels == ("reasoning", "text")
    assert m.content_events == 4  # the signature_delta is not output
    assert m.itl == (20_000.0, 130_000.0, 20_000.0)
    assert m.reasoning_tokens == 30
    assert m.tpot == pytest.approx((320_000.0 - 150_000.0) / 39)


def test_anthropic_tool_use_input_json_counts_but_block_start_does_not() -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    chunks = [
        (100, anthropic_start() + anthropic_block_start(0, block)),
        (110, anthropic_delta(0, {"type": "input_json_delta", "partial_json": ""})),
        (210, anthropic_delta(0, {"type": "input_json_delta", "partial_json": '{"city":'})),
        (230, anthropic_delta(0, {"type": "input_json_delta", "partial_json": ' "Paris"}'})),
        (240, anthropic_end()),
    ]
    m = metrics_of(ANTHROPIC_URL, chunks)
    assert m.ttft == 210_000.0
    assert m.ttfo == 210_000.0  # tool output is output, not reasoning
    assert m.channels == ("tool",)
    assert m.content_events == 2


def test_anthropic_citations_delta_is_not_content() -> None:
    citation = {"type": "char_location", "cited_text": "x", "document_index": 0}
    chunks = [
        (100, anthropic_start()),
        (150, anthropic_delta(0, {"type": "citations_delta", "citation": citation})),
        (200, anthropic_text("Per the doc")),
        (210, anthropic_end()),
    ]
    m = metrics_of(ANTHROPIC_URL, chunks)
    assert m.ttft == 200_000.0
    assert m.content_events == 1


def test_anthropic_unknown_delta_type_is_noted_not_counted() -> None:
    chunks = [
        (100, anthropic_start()),
        (150, anthropic_delta(0, {"type": "hologram_delta", "hologram": "zz"})),
        (200, anthropic_text("x")),
        (210, anthropic_end()),
    ]
    m = metrics_of(ANTHROPIC_URL, chunks)
    assert m.ttft == 200_000.0
    assert "unknown delta type hologram_delta" in m.notes


def test_anthropic_message_delta_repeats_input_and_cache_fields_latest_wins() -> None:
    start = anthropic_start(
        anthropic_usage(input_tokens=12, cache_read_input_tokens=0, cache_creation_input_tokens=0)
    )
    end = anthropic_end(
        {
            "input_tokens": None,  # null: not reported here, the earlier value stands
            "cache_read_input_tokens": 2048,
            "cache_creation_input_tokens": 100,
            "output_tokens": 7,
        }
    )
    m = metrics_of(ANTHROPIC_URL, [(100, start), (200, anthropic_text("a")), (210, end)])
    assert m.input_tokens == 12 + 2048 + 100
    assert m.cache_read_tokens == 2048
    assert m.cache_write_tokens == 100
    assert m.output_tokens == 7


def test_anthropic_without_cache_fields_reports_them_absent() -> None:
    usage = {"input_tokens": 30, "output_tokens": 1}
    m = metrics_of(
        ANTHROPIC_URL,
        [(100, anthropic_start(usage)), (200, anthropic_text("a")), (210, anthropic_end())],
    )
    assert m.input_tokens == 30
    assert m.cache_read_tokens is None
    assert m.cache_write_tokens is None
    assert m.cache_fields_reported is False


def test_anthropic_error_event_mid_stream() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    chunks = [(100, anthropic_start()), (200, anthropic_text("a")), (210, sse(error, "error"))]
    m = metrics_of(ANTHROPIC_URL, chunks)
    assert m.error == "sse_error:overloaded_error"
    assert m.error_detail == "Overloaded"
    assert m.failed
    assert m.ttft == 200_000.0  # what arrived is still measured


# --- OpenAI Chat Completions ----------------------------------------------------------------


def test_chat_role_only_first_chunk_and_usage_chunk_are_not_content() -> None:
    m = metrics_of(CHAT_URL, chat_text_stream())
    assert m.api == "openai.chat"
    assert m.ttft == 200_000.0  # not the role-only chunk at 100 ms
    assert m.e2e == 240_000.0  # not the finish chunk (245) nor the usage chunk (300)
    assert m.itl == (20_000.0, 20_000.0)
    assert m.content_events == 3
    assert m.output_tokens == 50
    assert m.tpot == pytest.approx(40_000.0 / 49)
    assert m.reasoning_tokens == 0
    assert m.error is None


def test_chat_cache_usage_equals_anthropic_for_same_prompt() -> None:
    chat = metrics_of(CHAT_URL, chat_text_stream())
    anthropic = metrics_of(ANTHROPIC_URL, anthropic_text_stream())
    assert (chat.input_tokens, chat.cache_read_tokens) == (2060, 2048)
    assert (chat.input_tokens, chat.cache_read_tokens) == (
        anthropic.input_tokens,
        anthropic.cache_read_tokens,
    )
    assert chat.cache_fields_reported is True
    assert chat.cache_write_tokens is None  # OpenAI did not send cache_write_tokens


def test_chat_cache_write_tokens_when_sent() -> None:
    usage = dict(CHAT_USAGE, prompt_tokens_details={"cached_tokens": 0, "cache_write_tokens": 2048})
    chunks = [(200, chat_chunk({"content": "x"})), (210, chat_finish() + chat_usage(usage) + DONE)]
    m = metrics_of(CHAT_URL, chunks)
    assert (m.cache_read_tokens, m.cache_write_tokens) == (0, 2048)
    assert m.cache_fields_reported is True  # 0 reported is not absent


def test_chat_without_usage_leaves_tokens_absent_not_zero() -> None:
    chunks = [c for c in chat_text_stream() if b'"usage": {' not in c[1]]
    chunks.append((300, DONE))
    m = metrics_of(CHAT_URL, chunks)
    assert m.content_events == 3
    assert m.input_tokens is None
    assert m.output_tokens is None
    assert m.cache_read_tokens is None
    assert m.cache_fields_reported is False
    assert m.tpot is None  # never guessed from the chunk count


def test_chat_usage_without_details_has_no_cache_fields() -> None:
    usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    chunks = [(200, chat_chunk({"content": "x"})), (210, chat_finish() + chat_usage(usage) + DONE)]
    m = metrics_of(CHAT_URL, chunks)
    assert (m.input_tokens, m.output_tokens) == (20, 5)
    assert m.cache_read_tokens is None
    assert m.cache_fields_reported is False


def test_chat_tool_calls_name_delta_counts_as_tool_content() -> None:
    first = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    chunks = [
        (100, chat_chunk({"role": "assistant", "content": None})),
        (150, chat_chunk({"tool_calls": [first]})),
        (160, chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]})),
        (200, chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]})),
        (220, chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]})),
        (230, chat_chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        (240, chat_usage() + DONE),
    ]
    m = metrics_of(CHAT_URL, chunks)
    assert m.ttft == 150_000.0
    assert m.e2e == 220_000.0
    assert m.content_events == 3  # the empty-arguments delta at 160 is not content
    assert m.channels == ("tool",)


def test_chat_reasoning_content_then_content() -> None:
    chunks = [
        (100, chat_chunk({"role": "assistant", "content": ""})),
        (150, chat_chunk({"reasoning_content": "Hmm"})),
        (170, chat_chunk({"reasoning": " ok"})),  # the other spelling compatible servers use
        (300, chat_chunk({"content": "Answer"})),
        (310, chat_finish() + chat_usage() + DONE),
    ]
    m = metrics_of(CHAT_URL, chunks)
    assert (m.ttft, m.ttfo, m.e2e) == (150_000.0, 300_000.0, 300_000.0)
    assert m.channels == ("reasoning", "text")


def test_chat_refusal_and_multiple_choices() -> None:
    two = [
        {"index": 0, "delta": {"content": ""}, "finish_reason": None},
        {"index": 1, "delta": {"refusal": "I can't"}, "finish_reason": None},
    ]
    chunks = [
        (100, chat_chunk(choices=two)),
        (
            120,
            chat_chunk(choices=[{"index": 0, "delta": {"content": "Sure"}, "finish_reason": None}]),
        ),
        (130, chat_finish() + chat_usage() + DONE),
    ]
    m = metrics_of(CHAT_URL, chunks)
    assert m.ttft == 100_000.0
    assert m.ttfo == 100_000.0  # a refusal is output too
    assert m.channels == ("refusal", "text")


def test_chat_error_chunk() -> None:
    error = {"error": {"message": "boom", "type": "server_error", "code": None}}
    chunks = [(200, chat_chunk({"content": "x"})), (210, sse(error))]
    m = metrics_of(CHAT_URL, chunks)
    assert m.error == "sse_error:server_error"
    assert m.error_detail == "boom"


def test_legacy_completions_stream() -> None:
    def chunk(text: str, finish: str | None = None) -> bytes:
        choice = {"index": 0, "text": text, "finish_reason": finish}
        return sse({"object": "text_completion", "model": "m", "choices": [choice]})

    usage = sse({"object": "text_completion", "choices": [], "usage": CHAT_USAGE})
    chunks = [
        (100, chunk("")),
        (200, chunk("a")),
        (230, chunk("b")),
        (240, chunk("", "length") + usage + DONE),
    ]
    m = metrics_of(COMPLETIONS_URL, chunks)
    assert m.api == "openai.completions"
    assert (m.ttft, m.e2e, m.content_events) == (200_000.0, 230_000.0, 2)
    assert m.host == "localhost:8000"
    assert (m.input_tokens, m.cache_read_tokens) == (2060, 2048)


# --- OpenAI Responses -----------------------------------------------------------------------


def test_responses_reasoning_text_and_function_arguments() -> None:
    m = metrics_of(RESPONSES_URL, responses_stream())
    assert m.api == "openai.responses"
    assert m.ttft == 150_000.0  # reasoning summary delta; the empty one at 170 is not content
    assert m.ttfo == 200_000.0
    assert m.e2e == 240_000.0
    assert m.itl == (50_000.0, 20_000.0, 20_000.0)
    assert m.channels == ("reasoning", "text", "tool")
    assert (m.input_tokens, m.cache_read_tokens, m.cache_write_tokens) == (2060, 2048, 0)
    assert (m.output_tokens, m.reasoning_tokens) == (50, 10)
    assert m.cache_fields_reported is True
    assert m.error is None


def test_responses_failed_is_an_error() -> None:
    chunks = [
        *responses_stream()[:-1],
        (
            260,
            responses_final(
                "response.failed",
                status="failed",
                error={"code": "server_error", "message": "oops"},
            ),
        ),
    ]
    m = metrics_of(RESPONSES_URL, chunks)
    assert m.error == "sse_error:server_error"
    assert m.error_detail == "oops"
    assert m.output_tokens == 50  # usage on response.failed still counts


def test_responses_incomplete_is_noted_not_an_error() -> None:
    final = responses_final(
        "response.incomplete",
        status="incomplete",
        incomplete_details={"reason": "max_output_tokens"},
    )
    m = metrics_of(RESPONSES_URL, [*responses_stream()[:-1], (260, final)])
    assert m.error is None
    assert "response incomplete: max_output_tokens" in m.notes
    assert m.output_tokens == 50


def test_responses_error_event() -> None:
    error = {"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None}
    m = metrics_of(RESPONSES_URL, [*responses_stream()[:2], (200, sse(error, "error"))])
    assert m.error == "sse_error:rate_limit_exceeded"


# --- Non-streaming JSON ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "body", "expected"),
    [
        (
            ANTHROPIC_URL,
            {
                "type": "message",
                "model": "claude-x",
                "content": [{"type": "text", "text": "hi"}],
                "usage": anthropic_usage(output_tokens=9),
            },
            ("anthropic.messages", 2060, 9, 2048),
        ),
        (
            CHAT_URL,
            {
                "object": "chat.completion",
                "model": "gpt-x",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": CHAT_USAGE,
            },
            ("openai.chat", 2060, 50, 2048),
        ),
        (
            RESPONSES_URL,
            {
                "object": "response",
                "model": "gpt-x",
                "status": "completed",
                "output": [],
                "usage": RESPONSES_USAGE,
            },
            ("openai.responses", 2060, 50, 2048),
        ),
    ],
)
def test_non_streaming_json(url: str, body: dict[str, Any], expected: tuple[Any, ...]) -> None:
    raw = json.dumps(body).encode()
    record = make_record(
        url,
        [(300, raw[:10]), (310, raw[10:])],
        content_type="application/json",
        body=request(stream=False),
    )
    m = call_metrics(record)
    assert (m.api, m.input_tokens, m.output_tokens, m.cache_read_tokens) == expected
    assert m.stream is False
    # A JSON body has no token timing: only ttfb and e2e (the body read to its end).
    assert (m.ttft, m.ttfo, m.tpot, m.itl) == (None, None, None, ())
    assert record.t_eof_ns is not None
    assert m.e2e == (record.t_eof_ns - T0) / 1000
    assert m.content_events == 0
    assert m.error is None


def test_unknown_api_gets_ttfb_and_e2e() -> None:
    m = metrics_of(
        "https://api.openai.com/v1/embeddings",
        [(80, b'{"object": "list", "data": []}')],
        content_type="application/json",
        body=b'{"model": "text-embedding-3-small", "input": "x"}',
    )
    assert m.api == "unknown"
    assert m.model == "text-embedding-3-small"
    assert m.ttfb == 50_000.0
    assert m.e2e == 80_100.0
    assert m.ttft is None


def test_api_is_sniffed_from_events_when_the_path_is_unknown() -> None:
    m = metrics_of(
        "https://proxy.internal/v1/projects/p/models/claude:streamRawPredict",
        anthropic_text_stream(),
    )
    assert m.api == "anthropic.messages"
    assert m.ttft == 200_000.0


def test_non_json_request_body_and_odd_url_are_tolerated() -> None:
    m = metrics_of("http://[::1", chat_text_stream(), body=b"\xff\x00not json")
    assert m.model == "gpt-x"  # falls back to the model the server named
    assert m.stream is True  # the response was a stream
    assert m.host == ""


def test_host_never_carries_user_info() -> None:
    m = metrics_of("https://user:secret@llm.example:8443/v1/chat/completions", chat_text_stream())
    assert m.host == "llm.example:8443"


# --- Content encodings ----------------------------------------------------------------------


def _body(chunks: list[tuple[float, bytes]]) -> bytes:
    return b"".join(data for _, data in chunks)


def test_gzip_stream_with_sync_flush_keeps_per_event_stamps() -> None:
    plain = anthropic_text_stream()
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    gz = [(t, compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)) for t, data in plain]
    gz[-1] = (gz[-1][0], gz[-1][1] + compressor.flush())
    compressed = call_metrics(make_record(ANTHROPIC_URL, gz, content_encoding="gzip")).to_dict()
    identity = call_metrics(make_record(ANTHROPIC_URL, plain)).to_dict()
    assert compressed == identity
    assert compressed["ttft"] == 200_000.0


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw", "gzip, identity"])
def test_compressed_stream_split_at_odd_boundaries(encoding: str) -> None:
    raw = _body(anthropic_text_stream())
    if encoding == "deflate-raw":
        compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        packed = compressor.compress(raw) + compressor.flush()
        encoding = "deflate"
    elif encoding == "deflate":
        packed = zlib.compress(raw)
    else:
        packed = gzip.compress(raw)
    cuts = [0, 1, 2, 3, 7, 50, 51, 200, len(packed)]
    pieces = [(300.0, packed[a:b]) for a, b in itertools.pairwise(cuts)]
    m = call_metrics(make_record(ANTHROPIC_URL, pieces, content_encoding=encoding))
    expected = call_metrics(make_record(ANTHROPIC_URL, [(300.0, raw)]))
    assert m.to_dict() == expected.to_dict()
    assert m.content_events == 3


def test_concatenated_gzip_members() -> None:
    raw = _body(chat_text_stream())
    packed = gzip.compress(raw[:100]) + gzip.compress(raw[100:])
    m = call_metrics(make_record(CHAT_URL, [(300, packed)], content_encoding="gzip"))
    assert m.content_events == 3
    assert m.output_tokens == 50


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, br"])
def test_undecodable_encoding_is_opaque_not_guessed(encoding: str) -> None:
    m = call_metrics(
        make_record(ANTHROPIC_URL, [(300, b"\x8b\x01\x02garbage")], content_encoding=encoding)
    )
    assert m.opaque is True
    assert (m.ttft, m.ttfo, m.tpot, m.itl) == (None, None, None, ())
    assert (m.input_tokens, m.output_tokens, m.cache_fields_reported) == (None, None, False)
    assert m.e2e == 300_100.0  # not content-based: the body was read to its end
    assert m.ttfb == 50_000.0
    assert any("br" in note or "zstd" in note for note in m.notes)
    assert m.error is None


def test_corrupt_gzip_is_opaque() -> None:
    m = call_metrics(
        make_record(CHAT_URL, [(300, b"\x1f\x8b\x08garbage-not-deflate")], content_encoding="gzip")
    )
    assert m.opaque is True
    assert m.content_events == 0


# --- Errors and incomplete calls ------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "status", "body", "detail"),
    [
        (
            CHAT_URL,
            429,
            {"error": {"message": "Rate limit", "type": "requests", "code": "rate_limit_exceeded"}},
            "requests",
        ),
        (
            ANTHROPIC_URL,
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "overloaded_error",
        ),
        (RESPONSES_URL, 500, {"detail": "upstream died"}, None),
    ],
)
def test_http_errors(url: str, status: int, body: dict[str, Any], detail: str | None) -> None:
    m = metrics_of(
        url, [(60, json.dumps(body).encode())], status=status, content_type="application/json"
    )
    assert m.error == f"http_{status}"
    assert m.error_detail == detail
    assert m.failed
    assert m.stream is True  # the request asked for a stream even though the error is JSON
    assert m.ttft is None
    assert m.e2e == 60_100.0


def test_http_error_with_non_json_body() -> None:
    m = metrics_of(
        CHAT_URL, [(60, b"<html>502 Bad Gateway</html>")], status=502, content_type="text/html"
    )
    assert (m.error, m.error_detail) == ("http_502", None)


def test_transport_error_mid_stream_keeps_what_arrived() -> None:
    record = make_record(ANTHROPIC_URL, anthropic_text_stream()[:3], eof=False)
    record.error, record.error_message = "RemoteProtocolError", "peer closed connection"
    m = call_metrics(record)
    assert m.error == "RemoteProtocolError"
    assert m.error_detail == "peer closed connection"
    assert m.incomplete is True
    assert (m.ttft, m.e2e, m.content_events) == (200_000.0, 220_000.0, 2)
    assert m.output_tokens == 1  # only message_start's count arrived
    assert m.tpot is None
    assert m.t_end_ns == T0 + 220 * MS


def test_connect_error_has_no_timings() -> None:
    record = make_record(CHAT_URL, [], headers_ms=None, status=None, eof=False)
    record.error = "ConnectError"
    m = call_metrics(record)
    assert (m.error, m.status, m.ttfb, m.e2e) == ("ConnectError", None, None, None)
    assert m.t_end_ns == T0


def test_early_break_is_incomplete_but_not_an_error() -> None:
    m = call_metrics(make_record(CHAT_URL, chat_text_stream()[:3], eof=False))
    assert m.incomplete is True
    assert m.error is None
    assert not m.failed
    assert (m.ttft, m.e2e) == (200_000.0, 220_000.0)


def test_clean_eof_without_end_marker_is_truncated() -> None:
    m = metrics_of(ANTHROPIC_URL, anthropic_text_stream()[:3])
    assert m.error == "truncated"
    assert m.incomplete is False


def test_chat_finish_reason_without_done_is_not_truncated() -> None:
    m = metrics_of(CHAT_URL, chat_text_stream()[:5])
    assert m.error is None


def test_final_event_without_blank_line_at_eof_counts() -> None:
    chunks = chat_text_stream()
    last_t, last = chunks[-1]
    chunks[-1] = (last_t, last.rstrip(b"\n"))  # "data: [DONE]" with no line ending at all
    m = metrics_of(CHAT_URL, chunks)
    assert m.error is None  # [DONE] was seen
    assert m.output_tokens == 50


def test_prefetched_body_has_no_token_timing() -> None:
    m = metrics_of(CHAT_URL, chat_text_stream(), prefetched=True)
    assert (m.ttft, m.ttfo, m.tpot, m.itl) == (None, None, None, ())
    assert m.e2e == m.ttfb  # the body was in memory when the transport returned
    assert m.content_events == 3
    assert m.output_tokens == 50
    assert any(note.startswith("prefetched") for note in m.notes)


# --- Consumer-bound detector ----------------------------------------------------------------


def _paced_stream(n: int) -> list[tuple[float, bytes]]:
    return [(100.0, chat_chunk({"role": "assistant", "content": ""}))] + [
        (200 + 20 * i, chat_chunk({"content": f"t{i} "})) for i in range(n)
    ]


def test_prompt_consumer_is_not_consumer_bound() -> None:
    chunks = _paced_stream(20)
    m = metrics_of(CHAT_URL, chunks, eof=False)
    assert m.content_chunks == 20
    assert m.consumer_bound_chunks == 0
    assert m.consumer_bound is False


def _slow_consumer_record(queued_ms: float = 0.0, read_ms: float = 0.1) -> WireRecord:
    """The test body spends 50 ms per token while the server sends every 20 ms: each read after
    the first finds its data already buffered and returns in `read_ms`. Its thread waited
    `queued_ms` of each absence for a CPU."""
    chunks = [
        (100.0, chat_chunk({"role": "assistant", "content": ""})),
        (200.0, chat_chunk({"content": "t0"})),
    ]
    waits = [50.0, 100.0]
    for i in range(1, 20):
        chunks.append((chunks[-1][0] + 50.0 + read_ms, chat_chunk({"content": f"t{i}"})))
        waits.append(read_ms)
    queued = [(index, int(queued_ms * MS)) for index in range(2, 21)]
    return make_record(CHAT_URL, chunks, waits_ms=waits, eof=False, queued=queued)


def _slow_consumer(queued_ms: float = 0.0) -> CallMetrics:
    return call_metrics(_slow_consumer_record(queued_ms))


def test_slow_consumer_is_flagged() -> None:
    m = _slow_consumer()
    assert m.consumer_bound_chunks == 19
    assert m.consumer_bound is True


def test_a_single_buffered_chunk_does_not_flag_the_call() -> None:
    chunks = _paced_stream(20)
    waits = [19.99] * len(chunks)
    waits[5] = 0.1  # one chunk found buffered after a 19.9 ms absence
    m = metrics_of(CHAT_URL, chunks, waits_ms=waits, eof=False)
    assert m.consumer_bound_chunks == 1
    assert m.consumer_bound is False


def test_a_consumer_away_because_its_thread_waited_for_a_cpu_is_starved_not_bound() -> None:
    """Issue #14, item 11: at load 7-10 on 2 cores `for _ in stream: pass` was flagged
    consumer_bound. The absences were the machine's: the thread waited, runnable, for a CPU."""
    m = _slow_consumer(49.5)
    assert (m.consumer_bound, m.cpu_starved, m.consumer_bound_chunks) == (False, True, 0)
    assert m.flagged == ("cpu_starved",)
    (note,) = [n for n in m.notes if n.startswith("cpu_starved")]
    assert "19 chunks" in note and "busy machine" in note, note
    # A wait for a CPU longer than the absence (the reading spans more) explains all of it.
    assert _slow_consumer(80.0).flagged == ("cpu_starved",)


def test_a_consumer_whose_own_work_outlasts_its_wait_for_a_cpu_is_still_bound() -> None:
    m = _slow_consumer(30.0)  # 20 ms of each absence was the test body's
    assert (m.consumer_bound, m.cpu_starved, m.consumer_bound_chunks) == (True, False, 19)
    assert not any(n.startswith("cpu_starved") for n in m.notes)
    assert _slow_consumer().flagged == ("consumer_bound",)


def test_the_absence_before_the_first_content_event_counts_less_its_wait_for_a_cpu() -> None:
    chunks = [
        (60.0, chat_chunk({"role": "assistant", "content": ""})),
        (86.0, chat_chunk({"content": "t0"})),
        (90.0, chat_chunk({"content": "t1"})),
    ]
    # Away ~26 ms between the role chunk and the first token, which was buffered by then.
    record = make_record(CHAT_URL, chunks, waits_ms=[10.0, 0.05, 3.0])
    m = call_metrics(record)
    assert (m.consumer_bound, m.consumer_bound_chunks, m.cpu_starved) == (True, 1, False)
    record.queued = [(1, 24 * MS)]  # 24 ms of it waiting for a CPU: 2 ms the consumer's own
    m = call_metrics(record)
    assert (m.consumer_bound, m.cpu_starved) == (False, True)


def _consumer_reads(work_ms: list[float], pace_ms: float = 4.5) -> WireRecord:
    """A role chunk, then len(work_ms) tokens sent every `pace_ms`; the consumer spends
    work_ms[k] after reading token k before it asks again. A read whose data is there returns in
    0.01 ms (buffered); one that is early waits for it."""
    true = [100.0] + [200.0 + pace_ms * k for k in range(len(work_ms))]
    data = [chat_chunk({"role": "assistant", "content": ""})] + [
        chat_chunk({"content": f"t{k} "}) for k in range(len(work_ms))
    ]
    chunks, waits, ready = [], [], 50.0
    for k, at in enumerate(true):
        asked = ready
        arrived = max(at, asked + 0.01)
        chunks.append((arrived, data[k]))
        waits.append(arrived - asked)
        ready = arrived + (work_ms[k - 1] if k else 0.2)
    return make_record(CHAT_URL, chunks, waits_ms=waits, eof=False)


def test_a_consumer_that_falls_a_few_ms_behind_and_catches_up_is_not_bound() -> None:
    """On this project's VM the SDK's work on a chunk takes 4-6 ms now and then, against 0.5 ms
    at the median: on a 4.5 ms-a-chunk stream the next chunks are found buffered (3 counted of
    20, which flagged the call before) but no stamp is more than ~4 ms late."""
    work = [0.4] * 20
    work[4] = work[5] = work[6] = 6.0
    m = call_metrics(_consumer_reads(work))
    assert m.consumer_bound_chunks >= 2 and m.consumer_bound is False
    # Held back for longer, the same shape is flagged: 20 ms a chunk for five chunks.
    work[4:9] = [20.0] * 5
    m = call_metrics(_consumer_reads(work))
    assert m.consumer_bound is True


def test_a_consumer_behind_to_the_end_is_judged_on_the_streams_own_pace() -> None:
    # In step for ten tokens (their gaps give the pace), then 6 ms a 4.5 ms chunk to the end:
    # 1.5 ms later each chunk, 15 ms by the last.
    m = call_metrics(_consumer_reads([0.4] * 10 + [6.0] * 10))
    assert m.consumer_bound is True
    # Only three chunks behind at the end: ~4.5 ms.
    assert call_metrics(_consumer_reads([0.4] * 17 + [6.0] * 3)).consumer_bound is False


def test_a_consumer_held_back_by_garbage_collection_is_paused_not_bound() -> None:
    """CI flagged a prompt `for _ in stream: pass` loop consumer_bound: a full collection in the
    suite's own large process (~110 ms for ~230k objects) held the thread between two reads.
    The absence was the collector's: named so, not blamed on the test body."""
    record = _slow_consumer_record()
    record.paused = [(index, int(49.5 * MS)) for index in range(2, 21)]
    m = call_metrics(record)
    assert (m.consumer_bound, m.gc_paused, m.cpu_starved) == (False, True, False)
    assert m.flagged == ("gc_paused",)
    (note,) = [n for n in m.notes if n.startswith("gc_paused")]
    assert "garbage collection held the process 940 ms" in note, note
    # Where the body's own work outlasts the pause, it is still the body's.
    record.paused = [(index, int(30 * MS)) for index in range(2, 21)]
    assert call_metrics(record).flagged == ("consumer_bound",)
    # The pause and the wait for a CPU together: neither alone explains the absence, both do;
    # the pause is named (the process's own doing) before the machine.
    record.paused = [(index, int(25 * MS)) for index in range(2, 21)]
    record.queued = [(index, int(25 * MS)) for index in range(2, 21)]
    assert call_metrics(record).flagged == ("gc_paused",)


def test_a_pause_before_the_first_content_event_is_the_collectors() -> None:
    chunks = [
        (60.0, chat_chunk({"role": "assistant", "content": ""})),
        (86.0, chat_chunk({"content": "t0"})),
        (90.0, chat_chunk({"content": "t1"})),
    ]
    record = make_record(CHAT_URL, chunks, waits_ms=[10.0, 0.05, 3.0])
    assert call_metrics(record).flagged == ("consumer_bound",)
    record.paused = [(1, 24 * MS)]  # 24 ms of the ~26 ms absence: a collection
    m = call_metrics(record)
    assert (m.consumer_bound, m.gc_paused, m.cpu_starved) == (False, True, False)


def test_a_buffered_read_slowed_by_its_own_cpu_work_still_counts_as_buffered() -> None:
    """A buffered read through the HTTP stack took 0.3-0.5 ms of CPU in the plugin's own suite
    (a large process; a tracer such as coverage makes it more): over WAIT_NS on wall time, so
    the slow consumer went unflagged. Its wait is the wall time less the read's own CPU."""
    record = _slow_consumer_record(read_ms=0.4)  # 0.4 ms a read, all of it CPU
    assert call_metrics(record).consumer_bound is False  # wall time alone: "it waited"
    record.read_cpu = [(index, int(0.38 * MS)) for index in range(2, 21)]
    m = call_metrics(record)
    assert (m.consumer_bound, m.consumer_bound_chunks) == (True, 19)
    # CPU time that explains only part of a read leaves a real wait: not buffered.
    record.read_cpu = [(index, int(0.05 * MS)) for index in range(2, 21)]
    assert call_metrics(record).consumer_bound is False


def test_reads_whose_bytes_the_socket_held_at_an_earlier_ask_are_buffered_however_long() -> None:
    """A read held off the GIL by another thread looks, on its wall time, like one that waited
    for its data. Where an ask found the socket holding bytes (`ready`: read index, bytes), the
    reads from it on whose bytes, each with READY_SLACK_BYTES, fit in those had come before the
    consumer (26 ms away before the role event's read) asked."""
    chunks = [
        (60.0, chat_chunk({"role": "assistant", "content": ""})),
        (87.0, chat_chunk({"content": "t0"})),
        (90.0, chat_chunk({"content": "t1"})),
    ]
    record = make_record(CHAT_URL, chunks, waits_ms=[10.0, 1.5, 3.0])  # 1.5 ms: "it waited"
    assert call_metrics(record).flagged == ()
    sizes = [len(read[2]) + READY_SLACK_BYTES for read in record.reads]
    record.ready = [(0, sizes[0] + sizes[1])]  # the role event's ask: both events had come
    assert call_metrics(record).flagged == ("consumer_bound",)
    record.ready = [(0, sizes[0] + sizes[1] - 1)]  # the first content's bytes not all there
    assert call_metrics(record).flagged == ()
    record.ready = [(1, sizes[1])]  # at its own ask
    assert call_metrics(record).flagged == ("consumer_bound",)
    record.ready = [(2, 10_000), (7, 10_000)]  # only later (and an index past the reads)
    assert call_metrics(record).flagged == ()


def test_a_buffered_sync_read_s_events_whole_at_its_ask_are_timed_by_the_kernel() -> None:
    """A sync consumer away when its data came finds it queued, and the read is stamped at the
    ask. The kernel's arrival time of the newest data queued then (`asked_arrivals`: read
    index, arrival, events whole, ending at one's end) is the latest each event whole there can
    have come by: the events counted from the asked read on, as many as the queue held, are
    timed by it (and by no more than a later event is: they come in order); not the events
    past them, nor where the note cannot be right or says nothing."""
    chunks = [
        (60.0, chat_chunk({"role": "assistant", "content": ""})),
        (90.0, chat_chunk({"content": "t0"})),
        (95.0, chat_chunk({"content": "t1"})),
        (100.0, chat_chunk({"content": "t2"})),
    ]
    # Away 20 ms after the role event: t0 and t1 found queued, stamped at their asks.
    record = make_record(CHAT_URL, chunks, waits_ms=[10.0, 0.1, 0.1, 1.0])
    plain = call_metrics(record)
    assert plain.ttft == 90_000 and plain.itl == (5_000.0, 5_000.0)  # the stamps (us)
    record.asked_arrivals = [AskedArrival(1, T0 + 72 * MS, 1, True)]  # t0 alone, come at 72 ms
    m = call_metrics(record)
    assert m.ttft == 72_000 and m.itl == (23_000.0, 5_000.0)  # t1 and t2: as stamped
    record.asked_arrivals = [AskedArrival(1, T0 + 76 * MS, 2, True)]  # t0 and t1, the newest 76
    m = call_metrics(record)
    assert m.ttft == 76_000 and m.itl == (0.0, 24_000.0)
    assert m.e2e == plain.e2e and m.flagged == plain.flagged  # the flags are the reads' to say
    for wrong in (
        AskedArrival(1, T0 - 1 * MS, 1, True),  # before the request
        AskedArrival(1, T0 + 91 * MS, 1, True),  # after the read it was taken at came
        AskedArrival(1, T0 + 72 * MS, EVENTS_UNKNOWN, False),  # its bytes said nothing
        AskedArrival(9, T0 + 72 * MS, 1, True),  # a read that is not there
    ):
        record.asked_arrivals = [wrong]
        assert call_metrics(record).ttft == plain.ttft, wrong
    # A later event's note bounds the earlier ones too: t2, queued alone at 97 ms.
    record.asked_arrivals = [AskedArrival(3, T0 + 97 * MS, 1, True)]
    m = call_metrics(record)
    assert m.ttft == plain.ttft and m.itl == (5_000.0, 2_000.0)
    # A capped record's last read may be cut short: its events cannot be counted.
    record.asked_arrivals = [AskedArrival(1, T0 + 72 * MS, 1, True)]
    record.dropped_reads = 1
    assert call_metrics(record).ttft == plain.ttft


def _behind_record(
    stream_ms: float,
    away_ms: float,
    tokens: int,
    *,
    kernel: bool = True,
    lead_ms: float = 0.0,
    pad: int = 1500,
    pause: tuple[int, float] = (-1, 0.0),
    slack: int = 0,
) -> WireRecord:
    """A sync consumer reading a stream of `tokens` content events (~`pad` bytes each) sent every
    `stream_ms` after its role event (the first `lead_ms` early), away `away_ms` after each read
    (under `wire.AWAY_NS`: no absence is counted by the consumer-bound detector) and `pause`'s ms
    longer before the event it names, a read of data queued returning in 0.05 ms. Each ask noted
    as capture notes it: the socket's bytes (`ready`, `slack` more an event for its framing),
    and where they are under `ASK_PEEK_BYTES` and `kernel`, the kernel's arrival of the newest
    event queued (`asked_arrivals`)."""
    role = chat_chunk({"role": "assistant", "content": ""})
    data = [chat_chunk({"content": f"t{k} " + "x" * pad}) for k in range(tokens)]
    sent = [T0 + int((60.0 + stream_ms * (k + 1) - lead_ms) * MS) for k in range(tokens)]
    reads = [(T0 + 50 * MS, T0 + 60 * MS, role)]  # the role event: waited 10 ms for it
    ready: list[tuple[int, int]] = []
    notes: list[AskedArrival] = []
    for k, payload in enumerate(data):
        asked = reads[-1][1] + int((away_ms + (pause[1] if k == pause[0] else 0.0)) * MS)
        arrived = max(sent[k], asked + 50_000)
        if sent[k] <= asked:  # queued: it and whatever else had come by the ask
            newest = max(j for j in range(k, tokens) if sent[j] <= asked)
            queue = sum(len(d) + slack for d in data[k : newest + 1])
            ready.append((k + 1, queue))
            if queue < ASK_PEEK_BYTES and kernel:
                notes.append(AskedArrival(k + 1, sent[newest], newest - k + 1, True))
        reads.append((asked, arrived, payload))
    return WireRecord(
        method="POST",
        url=CHAT_URL,
        request_body=request(),
        t_start_ns=T0,
        t_headers_ns=T0 + 50 * MS,
        status=200,
        content_type="text/event-stream",
        reads=reads,
        ready=ready,
        asked_arrivals=notes,
    )


def _lateness_ms(m: CallMetrics, stream_ms: float, tokens: int) -> float:
    """The most any content event's time as measured is after the event was sent, ms."""
    assert m.ttft is not None
    shown = list(itertools.accumulate(m.itl, initial=m.ttft))
    sent = [60.0 + stream_ms * (k + 1) for k in range(tokens)]
    return max(t / 1000 - at for t, at in zip(shown, sent, strict=True))


def _at_least_ms(m: CallMetrics, flag: str) -> float:
    (note,) = [n for n in m.notes if n.startswith(f"{flag}: a content event's time is at least")]
    return float(note.split("at least ")[1].split(" ms")[0])


def test_a_sync_consumer_falling_behind_in_absences_too_short_to_count_is_flagged() -> None:
    """litellm's sync stream parses each event of a 2 ms-a-token stream in just under 1 ms and
    stays 10-26 ms behind it: no absence long enough for the detector, and 10-13 of 20 calls
    over 5 ms off unflagged (session 23). The socket's word at an ask (`ready`: those bytes had
    come) bounds how late a later read of them is, from below: never more than it is, and over
    the target the call is flagged."""
    record = _behind_record(0.5, 0.9, 30)
    m = call_metrics(record)
    late = _lateness_ms(m, 0.5, 30)
    assert late > 5.0, late  # the case: late past the target
    assert m.flagged == ("consumer_bound",)
    assert 5.0 < _at_least_ms(m, "consumer_bound") <= late + 0.5, (m.notes, late)
    assert m.consumer_bound_chunks > 1
    # Without the socket's word, the detector alone: the hole this closes.
    record.ready, record.asked_arrivals = [], []
    assert call_metrics(record).flagged == ()


def test_a_sync_consumer_in_step_whose_asks_find_its_own_event_queued_is_not_flagged() -> None:
    """A consumer whose every ask finds its own event queued, alone, reads it at once: however
    long the stream, no event is shown late by the socket's word, with the kernel's arrival
    times or without (an upper bound counted from the last read that waited flagged such a
    consumer "up to 60 ms late", 0.08 ms true; review, session 24)."""
    for kernel in (True, False):
        record = _behind_record(1.0, 0.95, 60, kernel=kernel, lead_ms=0.2)
        assert len(record.ready) == 60, "the case: every ask found its event queued"
        m = call_metrics(record)
        assert m.flagged == (), (kernel, m.notes)
        assert _lateness_ms(m, 1.0, 60) < (0.1 if kernel else 0.3)


def test_a_sync_consumer_behind_because_its_thread_waited_for_a_cpu_is_starved() -> None:
    record = _behind_record(0.5, 0.9, 30)
    # Of each absence, 0.8 ms the thread's wait for a CPU: a busy machine's doing.
    record.queued = [(index, 800_000) for index in range(1, len(record.reads))]
    m = call_metrics(record)
    assert m.flagged == ("cpu_starved",)
    assert _at_least_ms(m, "cpu_starved") > 5.0


def _preempted_record(stream_ms: float, queued_ms: float) -> WireRecord:
    """A sync consumer 0.45 ms a chunk on a stream of 40 content events `stream_ms` apart, away
    12 ms once (before the 11th), `queued_ms` of it waiting for a CPU; the socket held each
    event's chunked framing too."""
    record = _behind_record(stream_ms, 0.45, 40, pad=300, pause=(10, 12.0), slack=READY_SLACK_BYTES)
    record.queued = [(11, int(queued_ms * MS))]
    return record


def test_the_chunks_queued_behind_a_long_absence_count_with_it() -> None:
    """One absence can buffer many chunks: a consumer preempted for 12 ms on a 1 ms-a-token
    stream found 12 events queued at its next ask, and they were shown at the newest one's
    arrival, the oldest 11 ms late. Counted as one starved chunk (of 40; two are needed), the
    call was not flagged (session 27). Each chunk whose bytes had all come by the ask counts."""
    m = call_metrics(_preempted_record(1.0, queued_ms=11.5))
    assert _lateness_ms(m, 1.0, 40) > 10.0  # the case: past the target
    assert m.flagged == ("cpu_starved",), m.notes
    (note,) = [n for n in m.notes if n.startswith("cpu_starved")]
    assert "12 chunks were found buffered after the test had been away 12 ms" in note, note
    # The same absence the test body's own: its doing.
    m = call_metrics(_preempted_record(1.0, queued_ms=0.0))
    assert (m.flagged, m.consumer_bound_chunks) == (("consumer_bound",), 12)
    # On a 20 ms stream the absence buffered one event, which the kernel's stamp times.
    m = call_metrics(_preempted_record(20.0, queued_ms=11.5))
    assert m.flagged == () and _lateness_ms(m, 20.0, 40) < 0.1


def test_a_sync_read_woken_by_its_data_and_left_waiting_for_a_cpu_is_starved() -> None:
    """A sync read blocks until its data comes; on a busy machine its thread, woken by the
    data, then waits, runnable, for a CPU, and stamps the data that late: the openai and
    anthropic SDKs' prompt reads came 5-8 ms late beside a running suite, none flagged (session
    24). The run-queue wait noted at such a read, less the absence before it and no more than
    the read's own span, is the least its stamp is late (`_pace.wake_delay`); over the target
    the call is cpu_starved."""
    chunks = [
        (60.0, chat_chunk({"role": "assistant", "content": ""})),
        (70.0, chat_chunk({"content": "t0"})),
        (80.0, chat_chunk({"content": "t1"})),
    ]
    record = make_record(CHAT_URL, chunks, waits_ms=[10.0, 9.8, 9.8])  # prompt: each waited
    assert call_metrics(record).flagged == ()
    record.queued = [(2, 7 * MS)]  # t1's read: its thread 7 ms in the run queue
    m = call_metrics(record)
    assert m.flagged == ("cpu_starved",)
    (note,) = [n for n in m.notes if n.startswith("cpu_starved")]
    assert "came at least 7 ms before the test's thread, woken by it, got a CPU" in note
    record.queued = [(2, 3 * MS)]  # within the target
    assert call_metrics(record).flagged == ()
    # Not the absence's: a wait for a CPU noted over a long absence before the read (the
    # counter's last reading was before it) need not have been the read's.
    record.reads[2] = (T0 + 79 * MS, T0 + 80 * MS, record.reads[2][2])
    record.queued = [(2, 9 * MS)]
    assert call_metrics(record).cpu_starved is False


def _crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param([(200.0, chat_chunk({"content": "B"})[:-1])], id="ended-by-the-body-end"),
        pytest.param(
            [(200.0, _crlf(chat_chunk({"content": "B"}))[:-1]), (300.0, b"\n")],
            id="crlf-blank-line-split",
        ),
        pytest.param(
            [(200.0, chat_chunk({"content": "B"})[:-1] + b"\r\n")], id="lf-then-crlf-blank-line"
        ),
    ],
)
def test_a_peeks_count_is_not_paired_with_events_the_parser_ended_otherwise(
    tail: list[tuple[float, bytes]],
) -> None:
    """The queue at t0's ask held t0 alone. An event the parser ends where the count of blank
    lines does not (a last event without its blank line, a CRLF blank line split across two
    reads, a blank line the count does not know) must not be timed by that queue's arrival:
    it came 110 ms later (review, session 23: 150 ms early, end to end)."""
    chunks = [(60.0, chat_chunk({"role": "assistant", "content": ""}))]
    chunks += [(90.0, chat_chunk({"content": "A"})), *tail]
    record = make_record(CHAT_URL, chunks, waits_ms=[10.0, 0.1] + [50.0] * len(tail))
    record.asked_arrivals = [AskedArrival(1, T0 + 72 * MS, 1, True)]
    m = call_metrics(record)
    assert m.ttft == 72_000  # A, alone in the queue
    assert m.e2e is not None and m.e2e >= 200_000, m.e2e  # B: its own stamp


# --- Plain data -----------------------------------------------------------------------------


def test_to_dict_round_trips_through_json() -> None:
    m = metrics_of(RESPONSES_URL, responses_stream())
    data = json.loads(json.dumps(m.to_dict()))
    assert CallMetrics.from_dict(data) == m
    assert isinstance(data["itl"], list)


def test_plain_data_leaves_out_empty_values_and_absent_stays_absent() -> None:
    m = metrics_of(CHAT_URL, chat_text_stream())
    data = m.to_dict()
    # None, False, 0 and () are left out: a key that is there carries information.
    assert all(v not in (None, False, (), []) or type(v) in (int, float) for v in data.values())
    assert "loop_lag_max_ms" not in data and m.loop_lag_max_ms is None
    assert m.ttft is not None and data["ttft"] == m.ttft
    del data["ttft"]
    # A missing time is absent (None), never zero.
    assert CallMetrics.from_dict(data).ttft is None


def test_plain_data_without_fingerprints_drops_only_the_serial_shingles() -> None:
    m = metrics_of(CHAT_URL, chat_text_stream())
    assert m.request_shingles or m.output_shingles
    lean = CallMetrics.from_dict(json.loads(json.dumps(m.to_dict(fingerprints=False))))
    assert lean == m.without_fingerprints()
    assert (lean.request_shingles, lean.output_shingles, lean.output_digests) == ((), (), ())
    assert lean.prefix_hashes == m.prefix_hashes and lean.ttft == m.ttft


def test_error_body_sent_with_the_stream_content_type_is_read_as_json() -> None:
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
    m = metrics_of(ANTHROPIC_URL, [(60, json.dumps(body).encode())], status=429)
    assert (m.error, m.error_detail) == ("http_429", "rate_limit_error")


def test_2xx_json_error_body_is_a_body_error() -> None:
    body = {"object": "error", "type": "BadRequestError", "message": "bad", "code": 400}
    m = metrics_of(CHAT_URL, [(60, json.dumps(body).encode())], content_type="application/json")
    assert (m.error, m.error_detail) == ("body_error:BadRequestError", "bad")
