"""Fuzz: random bytes, random JSON and random usage values through metrics (issue #15). Whatever
a server sends, `call_metrics` returns a record (never raises), every string it keeps is one
printable line, every number is finite or absent, the record survives its plain-data form, and
parsing stays linear enough to bound its time."""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_metrics import make_record

from pytest_latency.metrics import CallMetrics, call_metrics
from pytest_latency.wire import WireRecord

URLS = (
    "http://h/v1/chat/completions",
    "http://h/v1/responses",
    "http://h/v1/messages",
    "http://h/v1/completions",
    "http://h/unknown",
)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Usage values a hostile server may send: absurd ints, floats, strings, nesting, nulls.
USAGE_VALUES = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
USAGE_KEYS = (
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
# Anthropic's cache writes by TTL, and a service tier (any JSON where a name should be).
SPLIT = st.one_of(
    st.dictionaries(
        st.sampled_from(["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"]), USAGE_VALUES
    ),
    USAGE_VALUES,
)
TIER = st.one_of(st.text(max_size=60), USAGE_VALUES)
USAGE = st.fixed_dictionaries(
    {},
    optional={
        **{key: USAGE_VALUES for key in USAGE_KEYS},
        "prompt_tokens_details": st.dictionaries(st.just("cached_tokens"), USAGE_VALUES),
        "completion_tokens_details": st.dictionaries(st.just("reasoning_tokens"), USAGE_VALUES),
        "iterations": st.lists(
            st.fixed_dictionaries(
                {}, optional={**{key: USAGE_VALUES for key in USAGE_KEYS}, "cache_creation": SPLIT}
            )
        ),
        "cache_creation": SPLIT,
        "service_tier": TIER,
    },
)
TEXT = st.text(max_size=40)  # control characters, escapes, surrogate-free unicode
PAYLOAD = st.one_of(
    st.builds(
        lambda text, usage, kind, tier: {
            "object": "chat.completion.chunk",
            "model": kind,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
            "usage": usage,
            "service_tier": tier,
        },
        TEXT,
        USAGE,
        TEXT,
        TIER,
    ),
    st.builds(lambda usage: {"type": "message_delta", "usage": usage}, USAGE),
    st.builds(
        lambda usage, tier: {
            "type": "response.completed",
            "response": {"usage": usage, "service_tier": tier},
        },
        USAGE,
        TIER,
    ),
    st.builds(lambda usage: {"type": "message_start", "message": {"usage": usage}}, USAGE),
    st.builds(
        lambda kind, message: {"type": "error", "error": {"type": kind, "message": message}},
        TEXT,
        TEXT,
    ),
    st.builds(lambda text: {"type": "content_block_delta", "delta": {"text": text}}, TEXT),
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
        max_leaves=10,
    ),
)


def _event(payload: Any) -> bytes:
    try:
        data = json.dumps(payload)  # NaN and inf go out as JSON's non-standard literals
    except ValueError:
        data = "{}"
    return f"data: {data}\n\n".encode()


def _record(url: str, reads: list[bytes], status: int, content_type: str) -> WireRecord:
    # No model in the request: the server's own name for it is kept, so it is fuzzed too.
    chunks = [(2.0 + i, data) for i, data in enumerate(reads)]
    return make_record(
        url,
        chunks,
        headers_ms=1.0,
        status=status,
        content_type=content_type,
        body=b'{"stream": true}',
    )


def check_call(metrics: CallMetrics) -> None:
    """What a call's metrics hold to whatever the server sent (test_capture_fuzz reads it too)."""
    for name in ("error", "error_detail", "model", "service_tier"):
        value = getattr(metrics, name)
        assert value is None or not CONTROL.search(value), (name, value)
    assert metrics.service_tier is None or 0 < len(metrics.service_tier) <= 40
    assert all(not CONTROL.search(note) for note in metrics.notes), metrics.notes
    assert len(metrics.notes) <= 21
    for name in ("ttfb", "ttft", "ttfo", "e2e", "tpot"):
        value = getattr(metrics, name)
        assert value is None or math.isfinite(value), (name, value)
    counts = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    for name in (*counts, "cache_write_1h_tokens"):
        value = getattr(metrics, name)
        assert value is None or 0 <= value <= 4 * 10**9, (name, value)
    # The 1-hour writes are a part of all writes, never more, never without them.
    one_hour, writes = metrics.cache_write_1h_tokens, metrics.cache_write_tokens
    assert one_hour is None or (writes is not None and one_hour <= writes), (one_hour, writes)
    assert CallMetrics.from_dict(json.loads(json.dumps(metrics.to_dict()))) == metrics


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(
    url=st.sampled_from(URLS),
    payloads=st.lists(PAYLOAD, max_size=8),
    status=st.sampled_from([200, 200, 200, 400, 429, 500]),
)
def test_random_json_events_never_break_a_call(url: str, payloads: list[Any], status: int) -> None:
    reads = [_event(p) for p in payloads] + [b"data: [DONE]\n\n"]
    check_call(call_metrics(_record(url, reads, status, "text/event-stream")))


@FUZZ
@given(
    url=st.sampled_from(URLS),
    reads=st.lists(st.binary(max_size=200), max_size=8),
    content_type=st.sampled_from(["text/event-stream", "application/json", "", "text/plain"]),
)
def test_random_bytes_never_break_a_call(url: str, reads: list[bytes], content_type: str) -> None:
    check_call(call_metrics(_record(url, reads, 200, content_type)))


@FUZZ
@given(body=PAYLOAD, url=st.sampled_from(URLS))
def test_random_json_bodies_never_break_a_call(body: Any, url: str) -> None:
    try:
        data = json.dumps(body).encode()
    except ValueError:
        data = b"{}"
    check_call(call_metrics(_record(url, [data], 200, "application/json")))


def test_parsing_time_grows_linearly_with_events() -> None:
    """10× the events costs about 10× the time, not 100× (bounded for a loaded machine)."""

    def seconds(events: int) -> float:
        chunk = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "tok"}}]}
        reads = [_event(chunk)] * events + [b"data: [DONE]\n\n"]
        record = _record(URLS[0], reads, 200, "text/event-stream")
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            call_metrics(record)
            best = min(best, time.perf_counter() - start)
        return best

    small, large = seconds(1_000), seconds(10_000)
    assert large < 30 * small, (small, large)
