"""The simulator against the real anthropic and openai SDKs: wire formats, usage, cache, faults,
overrides, channels and determinism, checked against the server's own truth log."""

from __future__ import annotations

import contextlib
import itertools
import json
import statistics
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from pytest_latency.sim import LatencyModel, SimServer, TruthRecord

pytest_plugins = ["sim_fixtures"]

# Millisecond-scale, noise-free: fast tests whose timing we can still see in the truth log.
BASE = LatencyModel(
    ttfb_ms=0.5, prefill_us_per_token=1.0, decode_ms_per_token=0.5, output_tokens=8, seed=7
)
# Any: the SDKs type messages as TypedDict unions; these tests check the wire, not the typing.
USER: Any = [{"role": "user", "content": "Say something short."}]
ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
OPENAI_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": ANTHROPIC_TOOL["name"],
        "description": ANTHROPIC_TOOL["description"],
        "parameters": ANTHROPIC_TOOL["input_schema"],
    },
}


@pytest.fixture
def ant(sim: SimServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sim") as c:
        yield c


@pytest.fixture
def oai(sim: SimServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.openai_base_url, api_key="sim") as c:
        yield c


def only(sim: SimServer) -> TruthRecord:
    records = sim.truth()
    assert len(records) == 1, records
    return records[0]


# --- well-formed content and usage through the real SDKs -----------------------------------------


def test_anthropic_sync_create_stream_and_stream_helper(sim: SimServer, ant: Any) -> None:
    events = list(
        ant.messages.create(model="claude-sim", max_tokens=64, messages=USER, stream=True)
    )
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert events[0].message.usage.input_tokens == only(sim).input_tokens
    assert events[0].message.usage.input_tokens > 0
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert len(text.split()) == BASE.output_tokens
    assert events[-2].usage.output_tokens == BASE.output_tokens
    sim.clear_truth()
    with ant.messages.stream(model="claude-sim", max_tokens=64, messages=USER) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text == streamed == text
    assert final.usage.output_tokens == only(sim).output_tokens == BASE.output_tokens
    assert final.usage.cache_read_input_tokens == 0
    assert final.stop_reason == "end_turn"


@pytest.mark.asyncio
async def test_anthropic_async_create_stream_stream_helper_and_whole(sim: SimServer) -> None:
    c: Any = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="sim")
    async with c:
        stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
        kinds = [e.type async for e in stream]
        assert kinds.count("content_block_delta") == BASE.output_tokens
        async with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
            final = await s.get_final_message()
        assert final.usage.output_tokens == BASE.output_tokens and final.content[0].text
        whole = await c.messages.create(model="m", max_tokens=3, messages=USER)
        assert whole.stop_reason == "max_tokens" and whole.usage.output_tokens == 3
        assert len(whole.content[0].text.split()) == 3
    assert [r.stream for r in sim.truth()] == [True, True, False]
    assert all(r.status == 200 and r.api == "anthropic.messages" for r in sim.truth())


def test_openai_chat_sync_stream_and_whole(sim: SimServer, oai: Any) -> None:
    chunks = list(
        oai.chat.completions.create(
            model="gpt-sim", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and first.content == ""
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == BASE.output_tokens
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0
    assert chunks[-2].choices[0].finish_reason == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole = oai.chat.completions.create(model="gpt-sim", messages=USER)
    assert whole.choices[0].message.content == text  # same request, same answer
    assert whole.usage is not None and whole.usage.prompt_tokens == sim.truth()[0].input_tokens
    rec = sim.truth()[0]
    assert len(rec.content_events) == BASE.output_tokens
    assert rec.ttft_ns is not None and rec.e2e_ns is not None and rec.e2e_ns > rec.ttft_ns


@pytest.mark.asyncio
async def test_openai_async_chat_and_responses(sim: SimServer) -> None:
    async with openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="sim") as c:
        stream = await c.chat.completions.create(
            model="g", messages=USER, stream=True, stream_options={"include_usage": True}
        )
        chunks = [ch async for ch in stream]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
        whole = await c.chat.completions.create(model="g", messages=USER)
        assert whole.choices[0].message.content
        events = [e async for e in await c.responses.create(model="g", input="hi", stream=True)]
        assert events[-1].type == "response.completed"
        assert events[-1].response.usage is not None
        assert events[-1].response.usage.output_tokens == 8
        resp = await c.responses.create(model="g", input="hi")
        assert resp.output_text and resp.usage is not None and resp.usage.total_tokens > 8
    assert [r.api for r in sim.truth()] == ["openai.chat"] * 2 + ["openai.responses"] * 2


def test_openai_responses_sync_stream_helper_and_whole(sim: SimServer, oai: Any) -> None:
    events = list(oai.responses.create(model="g", input="hello there", stream=True))
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 8 and all(d.item_id and d.output_index == 0 for d in deltas)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    usage = events[-1].response.usage
    assert usage.input_tokens_details.cached_tokens == 0 and usage.output_tokens == 8
    assert usage.output_tokens_details.reasoning_tokens == 0
    with oai.responses.stream(model="g", input="hello there") as s:
        for _ in s:
            pass
        final = s.get_final_response()
    assert final.output_text == "".join(d.delta for d in deltas)
    assert oai.responses.create(model="g", input="hello there").output_text == final.output_text


def test_request_id_header_matches_truth(sim: SimServer, oai: Any) -> None:
    raw = oai.chat.completions.with_raw_response.create(model="g", messages=USER)
    assert raw.headers["x-sim-request-id"] == only(sim).request_id


# --- prompt cache -----------------------------------------------------------------------------

LONG = "".join(
    f"Rule {i}: answer briefly, cite the source, keep latency low.\n" for i in range(300)
)
# A prefill cost large enough (~160 ms for the long prompt) that the saving stands well clear of
# the scheduling noise of a loaded 2-core machine (tens of ms at worst).
CACHE_MODEL = BASE.replace(prefill_us_per_token=40.0, cache_min_tokens=1024)


def _check_cache_pair(first: TruthRecord, second: TruthRecord, cacheable: int) -> None:
    assert first.cache_read_tokens == 0
    assert second.cache_read_tokens is not None and second.input_tokens is not None
    assert cacheable - 64 < second.cache_read_tokens <= cacheable
    assert first.ttft_ns is not None and second.ttft_ns is not None
    saved = first.prefill_ns - second.prefill_ns
    assert saved > 120_000_000  # ~4000 tokens × 40 µs
    # The TTFT drop is the modelled prefill saving, give or take scheduling noise.
    assert abs((first.ttft_ns - second.ttft_ns) - saved) < 0.3 * saved


def test_openai_chat_and_responses_automatic_prefix_cache(sim: SimServer, oai: Any) -> None:
    sim.set_model(CACHE_MODEL)
    msgs = [{"role": "system", "content": LONG}, *USER]
    for _ in range(2):
        list(
            oai.chat.completions.create(
                model="g", messages=msgs, stream=True, stream_options={"include_usage": True}
            )
        )
    first, second = sim.truth()
    _check_cache_pair(first, second, first.input_tokens or 0)
    assert second.cache_write_tokens == 0  # OpenAI reports reads only
    changed = [{"role": "system", "content": "X" + LONG[1:]}, *USER]
    out = oai.chat.completions.create(model="g", messages=changed)
    assert out.usage is not None and out.usage.prompt_tokens_details.cached_tokens == 0
    sim.clear_truth()
    resp = [oai.responses.create(model="g", instructions=LONG, input="hi") for _ in range(2)]
    assert resp[1].usage is not None and resp[1].usage.input_tokens_details.cached_tokens > 3000
    assert resp[1].usage.input_tokens == resp[0].usage.input_tokens  # includes the cached part
    first, second = sim.truth()
    assert second.cache_read_tokens == resp[1].usage.input_tokens_details.cached_tokens


def test_openai_prompt_below_cache_minimum_is_never_cached(sim: SimServer, oai: Any) -> None:
    sim.set_model(CACHE_MODEL.replace(cache_min_tokens=100_000))
    msgs = [{"role": "system", "content": LONG}, *USER]
    for _ in range(2):
        oai.chat.completions.create(model="g", messages=msgs)
    assert [r.cache_read_tokens for r in sim.truth()] == [0, 0]


def test_anthropic_cache_control_breakpoint(sim: SimServer, ant: Any) -> None:
    sim.set_model(CACHE_MODEL)
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    finals = []
    for _ in range(2):
        with ant.messages.stream(model="m", max_tokens=64, system=system, messages=USER) as s:
            finals.append(s.get_final_message())
    u1, u2 = finals[0].usage, finals[1].usage
    assert u1.cache_read_input_tokens == 0 and u1.cache_creation_input_tokens > 3000
    assert u2.cache_read_input_tokens == u1.cache_creation_input_tokens
    assert u2.cache_creation_input_tokens == 0
    total = u1.input_tokens + u1.cache_creation_input_tokens + u1.cache_read_input_tokens
    assert total == u2.input_tokens + u2.cache_read_input_tokens + u2.cache_creation_input_tokens
    first, second = sim.truth()
    assert (
        first.input_tokens == total and first.cache_write_tokens == u1.cache_creation_input_tokens
    )
    _check_cache_pair(first, second, u1.cache_creation_input_tokens)
    # No breakpoint: nothing is cacheable, however often it is sent.
    plain = ant.messages.create(model="m", max_tokens=8, system=LONG, messages=USER)
    assert plain.usage.cache_read_input_tokens == plain.usage.cache_creation_input_tokens == 0
    # One changed byte at the start of the prefix misses the cache again.
    system[0]["text"] = "X" + LONG[1:]
    miss = ant.messages.create(model="m", max_tokens=8, system=system, messages=USER)
    assert miss.usage.cache_read_input_tokens == 0 and miss.usage.cache_creation_input_tokens > 0
    miss_ttft = sim.truth()[-1].ttft_ns
    assert miss_ttft is not None and miss_ttft > 30_000_000


def test_anthropic_1h_breakpoint_writes_to_the_1h_cache(sim: SimServer, ant: Any) -> None:
    """`ttl: "1h"` on a breakpoint: the writes up to it are 1-hour writes, those after it up to a
    later 5-minute breakpoint 5-minute ones; `cache_creation` splits the total."""
    sim.set_model(CACHE_MODEL)
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    system = [{"type": "text", "text": LONG, "cache_control": one_hour}]
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": LONG.upper(), "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Say something short."},
            ],
        }
    ]
    with ant.messages.stream(model="m", max_tokens=64, system=system, messages=messages) as s:
        first = s.get_final_message().usage
    split = first.cache_creation
    assert split is not None and first.service_tier == "standard"
    assert split.ephemeral_1h_input_tokens > 3000 and split.ephemeral_5m_input_tokens > 3000
    total = split.ephemeral_1h_input_tokens + split.ephemeral_5m_input_tokens
    assert total == first.cache_creation_input_tokens
    truth = only(sim)
    assert (truth.cache_write_tokens, truth.cache_write_1h_tokens, truth.service_tier) == (
        total,
        split.ephemeral_1h_input_tokens,
        "standard",
    )
    # The 1-hour part ends where its breakpoint does: the system prompt's ~LONG/4 tokens.
    assert abs(split.ephemeral_1h_input_tokens - len(LONG) // 4) <= 64
    sim.clear_truth()
    again = ant.messages.create(model="m", max_tokens=8, system=system, messages=messages).usage
    assert again.cache_read_input_tokens == total and again.cache_creation_input_tokens == 0
    assert again.cache_creation is not None
    assert again.cache_creation.ephemeral_1h_input_tokens == 0
    assert only(sim).cache_write_1h_tokens == 0


@pytest.mark.parametrize(
    ("controls", "message"),
    [
        (({"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}), "cannot come after"),
        (({"type": "ephemeral", "ttl": "2h"}, None), "'5m' or '1h'"),
    ],
)
def test_anthropic_bad_cache_ttls_are_a_400(
    sim: SimServer, ant: Any, controls: tuple[Any, Any], message: str
) -> None:
    first, second = controls
    system = [{"type": "text", "text": "a", "cache_control": first}]
    content = [{"type": "text", "text": "b", **({"cache_control": second} if second else {})}]
    with pytest.raises(anthropic.BadRequestError, match=message):
        ant.messages.create(
            model="m", max_tokens=8, system=system, messages=[{"role": "user", "content": content}]
        )


ENDS = ("response.created", "response.completed")


def test_the_service_tier_is_named_and_an_openai_request_s_is_answered(
    sim: SimServer, ant: Any, oai: Any
) -> None:
    chunks = list(
        oai.chat.completions.create(model="g", messages=USER, stream=True, service_tier="priority")
    )
    assert {c.service_tier for c in chunks} == {"priority"}
    assert oai.chat.completions.create(model="g", messages=USER).service_tier == "default"
    assert (
        oai.chat.completions.create(model="g", messages=USER, service_tier="auto").service_tier
        == "default"
    )
    with oai.responses.stream(model="g", input="hi", service_tier="flex") as stream:
        events = list(stream)
    assert [e.response.service_tier for e in events if e.type in ENDS] == [
        "flex",
        "flex",
    ]
    with oai.responses.stream(model="g", input="hi") as stream:
        echoed = [e.response.service_tier for e in stream if e.type in ENDS]
    assert echoed == ["auto", "default"]  # created echoes what was asked, completed what served
    assert oai.responses.create(model="g", input="hi", service_tier="scale").service_tier == "scale"
    assert ant.messages.create(model="m", max_tokens=8, messages=USER).usage.service_tier == (
        "standard"
    )
    assert [r.service_tier for r in sim.truth()] == [
        "priority",
        "default",
        "default",
        "flex",
        "default",
        "scale",
        "standard",
    ]
    with pytest.raises(openai.BadRequestError, match="service_tier"):
        oai.chat.completions.create(model="g", messages=USER, service_tier="gold")


# --- faults -----------------------------------------------------------------------------------


def test_429_is_retried_by_the_sdks_after_retry_after(sim: SimServer) -> None:
    hdr = {"x-sim-fault": "429", "x-sim-fault-attempts": "1", "x-sim-retry-after-ms": "5"}
    c: Any = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="s", max_retries=2)
    with c:
        msg = c.messages.create(model="m", max_tokens=8, messages=USER, extra_headers=hdr)
    assert msg.content[0].text
    with openai.OpenAI(base_url=sim.openai_base_url, api_key="s", max_retries=2) as o:
        out = o.chat.completions.create(model="g", messages=USER, extra_headers=hdr)
    assert out.choices[0].message.content
    statuses = [(r.api, r.status, r.attempt, r.fault) for r in sim.truth()]
    assert statuses == [
        ("anthropic.messages", 429, 0, "429"),
        ("anthropic.messages", 200, 1, None),
        ("openai.chat", 429, 0, "429"),
        ("openai.chat", 200, 1, None),
    ]


@pytest.mark.parametrize(
    ("fault", "ant_error", "oai_error"),
    [
        ("429", anthropic.RateLimitError, openai.RateLimitError),
        ("500", anthropic.InternalServerError, openai.InternalServerError),
        ("529", anthropic.OverloadedError, openai.InternalServerError),
    ],
)
def test_http_faults_raise_the_providers_errors(
    sim: SimServer,
    fault: str,
    ant_error: type[anthropic.APIStatusError],
    oai_error: type[openai.APIStatusError],
) -> None:
    hdr = {"x-sim-fault": fault}
    with anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="s", max_retries=0) as c:
        with pytest.raises(ant_error) as info:
            c.messages.create(
                model="m", max_tokens=8, messages=USER, stream=True, extra_headers=hdr
            )
        assert info.value.status_code == int(fault)
        assert isinstance(info.value.body, dict) and info.value.body["type"] == "error"
    with openai.OpenAI(base_url=sim.openai_base_url, api_key="s", max_retries=0) as o:
        with pytest.raises(oai_error) as oinfo:
            o.chat.completions.create(model="g", messages=USER, extra_headers=hdr)
        assert oinfo.value.status_code == int(fault)
        assert isinstance(oinfo.value.body, dict) and "message" in oinfo.value.body
    recs = sim.truth()
    assert [r.status for r in recs] == [int(fault)] * 2
    assert all(r.fault == fault and not r.content_events for r in recs)


def test_sse_error_event_mid_stream(sim: SimServer, ant: Any, oai: Any) -> None:
    hdr = {"x-sim-fault": "sse_error"}
    got: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        ant.messages.stream(model="m", max_tokens=64, messages=USER, extra_headers=hdr) as s,
    ):
        got.extend(s.text_stream)
    assert got and "overloaded_error" in str(info.value)
    # OpenAI's SDK raises its base APIError for an in-stream error object (no HTTP status).
    with pytest.raises(openai.APIError, match="Overloaded"):
        list(oai.chat.completions.create(model="g", messages=USER, stream=True, extra_headers=hdr))
    events = list(oai.responses.create(model="g", input="hi", stream=True, extra_headers=hdr))
    assert events[-1].type == "error"
    for rec in sim.truth():
        assert rec.fault == "sse_error" and rec.events[-1].kind == "error"
        assert 0 < len(rec.content_events) < BASE.output_tokens and rec.output_tokens is None


def test_dropped_connection_mid_stream(sim: SimServer, ant: Any, oai: Any) -> None:
    hdr = {"x-sim-fault": "drop"}
    # anthropic 2.14 let httpx2's error through from a stream; 2.17 wraps it, as openai does.
    with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)):
        list(ant.messages.create(model="m", max_tokens=64, messages=USER, stream=True, extra_headers=hdr))  # fmt: skip # noqa: E501
    with openai.OpenAI(base_url=sim.openai_base_url, api_key="s", max_retries=0) as o:
        with pytest.raises(openai.APIConnectionError):
            list(o.chat.completions.create(model="g", messages=USER, stream=True, extra_headers=hdr))  # fmt: skip # noqa: E501
        with pytest.raises(openai.APIConnectionError):
            o.chat.completions.create(model="g", messages=USER, extra_headers=hdr)
    recs = sim.truth()
    assert [r.fault for r in recs] == ["drop"] * 3 and [r.status for r in recs] == [0] * 3
    assert recs[0].content_events and recs[2].events == ()


def test_stall_is_a_measurable_gap(sim: SimServer, oai: Any) -> None:
    sim.set_model(BASE.replace(fault="stall", stall_ms=40.0, output_tokens=10))
    chunks = list(oai.chat.completions.create(model="g", messages=USER, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks)
    rec = only(sim)
    assert rec.fault == "stall" and rec.status == 200
    due = [e.t_due_ns for e in rec.content_events]
    planned = [b - a for a, b in itertools.pairwise(due)]
    assert planned.index(max(planned)) == 4  # fault_at=0.5 of 10 deltas: before the 6th
    assert max(planned) == 40_500_000  # the stall plus one token's decode
    # As sent: a busy machine delays the server's writes (one hog run sent the five events
    # before the stall 6 ms late, in a burst), which shortens the stall's gap by the lateness
    # of the event that opens it; the gap plus that lateness is what the schedule kept.
    events = rec.content_events
    late = events[4].t_sent_ns - events[4].t_due_ns
    gaps = rec.itl_ns
    assert gaps[4] + late >= 40_500_000  # never sent early: the stall was kept
    assert gaps[4] > statistics.median(gaps) + 20_000_000  # and it stands out of the stream


def test_random_faults_follow_their_probability(sim: SimServer, oai: Any) -> None:
    sim.set_model(BASE.replace(fault_500_prob=0.5, output_tokens=1))
    with openai.OpenAI(base_url=sim.openai_base_url, api_key="s", max_retries=0) as o:
        for i in range(40):
            with contextlib.suppress(openai.InternalServerError):
                o.chat.completions.create(model="g", messages=[{"role": "user", "content": str(i)}])
    failed = sum(r.status == 500 for r in sim.truth())
    assert 8 <= failed <= 32


# --- overrides --------------------------------------------------------------------------------


def test_per_request_overrides_by_header_and_body(sim: SimServer, oai: Any, ant: Any) -> None:
    out = oai.chat.completions.create(
        model="g", messages=USER, extra_body={"sim": {"output_tokens": 3}}
    )
    assert out.usage is not None and out.usage.completion_tokens == 3
    json_hdr = {"x-sim-model": json.dumps({"output_tokens": 5, "tokens_per_chunk": 2})}
    events = list(
        ant.messages.create(
            model="m", max_tokens=64, messages=USER, stream=True, extra_headers=json_hdr
        )
    )
    assert sum(e.type == "content_block_delta" for e in events) == 3  # 5 tokens in chunks of 2
    assert [e.tokens for e in sim.truth()[1].content_events] == [2, 2, 1]
    out = oai.chat.completions.create(
        model="g",
        messages=USER,
        extra_headers={"x-sim-preset": "instant", "x-sim-output-tokens": "2"},
    )
    assert out.usage is not None and out.usage.completion_tokens == 2
    assert sim.model == BASE  # overrides never leak into the server's model


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"extra_headers": {"x-sim-decode-ms-per-token": "-1"}}, "decode_ms_per_token"),
        ({"extra_headers": {"x-sim-model": "{not json"}}, "x-sim-model"),
        ({"extra_body": {"sim": {"tail_prob": 2}}}, "tail_prob"),
        ({"extra_body": {"sim": {"warp_speed": 1}}}, "warp_speed"),
        ({"extra_body": {"sim": {"preset": "nope"}}}, "unknown preset"),
    ],
)
def test_bad_override_is_a_400_naming_the_field(
    sim: SimServer, oai: Any, ant: Any, kwargs: dict[str, Any], needle: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=needle) as info:
        oai.chat.completions.create(model="g", messages=USER, **kwargs)
    assert info.value.status_code == 400
    with pytest.raises(anthropic.BadRequestError, match=needle):
        ant.messages.create(model="m", max_tokens=8, messages=USER, **kwargs)
    assert [r.status for r in sim.truth()] == [400, 400]


# --- channels: thinking, tools, reasoning -----------------------------------------------------


def test_anthropic_thinking_first_then_text(sim: SimServer, ant: Any) -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    with ant.messages.stream(model="m", max_tokens=2048, messages=USER, thinking=thinking) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].thinking
    assert final.content[0].signature
    assert final.content[1].type == "text" and final.content[1].text
    assert "signature" in kinds and kinds.index("thinking") < kinds.index("text")
    rec = only(sim)
    assert rec.content_events[0].kind == "reasoning"
    assert rec.ttfo_ns is not None and rec.ttft_ns is not None and rec.ttfo_ns > rec.ttft_ns
    assert final.usage.output_tokens == BASE.reasoning_tokens + BASE.output_tokens


def test_anthropic_tool_use_streams_input_json(sim: SimServer, ant: Any) -> None:
    raw = list(
        ant.messages.create(
            model="m",
            max_tokens=256,
            messages=USER,
            stream=True,
            tools=[ANTHROPIC_TOOL],
            tool_choice={"type": "any"},
        )
    )
    parts = [e.delta.partial_json for e in raw if e.type == "content_block_delta"]
    assert len(parts) > 1 and set(json.loads("".join(parts))) == {"city", "days"}
    assert raw[1].content_block.type == "tool_use"
    with ant.messages.stream(
        model="m", max_tokens=256, messages=USER, tools=[ANTHROPIC_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as s:  # fmt: skip
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use" and "city" in final.content[0].input
    assert {e.kind for e in sim.truth()[0].content_events} == {"tool"}
    auto = ant.messages.create(model="m", max_tokens=64, messages=USER, tools=[ANTHROPIC_TOOL])
    assert auto.content[0].type == "text"  # tool_choice auto: the model just answers


def test_openai_tool_call_argument_deltas(sim: SimServer, oai: Any) -> None:
    chunks = list(
        oai.chat.completions.create(
            model="g", messages=USER, tools=[OPENAI_TOOL], tool_choice="required", stream=True
        )
    )
    calls = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]
    assert calls[0][0].function.name == "get_weather" and calls[0][0].id
    args = "".join(tc[0].function.arguments or "" for tc in calls)
    assert set(json.loads(args)) == {"city", "days"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    whole = oai.chat.completions.create(
        model="g", messages=USER, tools=[OPENAI_TOOL], tool_choice="required"
    )
    call = whole.choices[0].message.tool_calls[0]
    assert call.function.arguments == args  # same request, same arguments
    named = oai.chat.completions.create(
        model="g", messages=USER, tools=[OPENAI_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )  # fmt: skip
    assert named.choices[0].message.tool_calls[0].function.name == "get_weather"
    resp = oai.responses.create(
        model="g", input="hi", tool_choice="required",
        tools=[{"type": "function", **OPENAI_TOOL["function"]}],
    )  # fmt: skip
    assert resp.output[0].type == "function_call" and json.loads(resp.output[0].arguments)


def test_openai_reasoning_content_deltas_and_hidden_responses_reasoning(
    sim: SimServer, oai: Any
) -> None:
    chunks = list(
        oai.chat.completions.create(
            model="g",
            messages=USER,
            reasoning_effort="low",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    reasoning = [
        c.choices[0].delta.model_extra.get("reasoning_content") for c in chunks if c.choices
    ]
    reasoning = [r for r in reasoning if r]
    assert len(reasoning) == BASE.reasoning_tokens
    usage = chunks[-1].usage
    assert usage.completion_tokens_details.reasoning_tokens == BASE.reasoning_tokens
    assert usage.completion_tokens == BASE.reasoning_tokens + BASE.output_tokens
    assert sim.truth()[0].content_events[0].kind == "reasoning"
    resp = oai.responses.create(model="g", input="hi", reasoning={"effort": "low"})
    assert resp.usage.output_tokens_details.reasoning_tokens == BASE.reasoning_tokens
    assert resp.output[0].type == "reasoning" and resp.output_text


# --- timing and determinism -------------------------------------------------------------------


def test_schedule_follows_the_model(sim: SimServer, oai: Any) -> None:
    sim.set_model(BASE.replace(ttfb_ms=2.0, decode_ms_per_token=3.0, output_tokens=12))
    list(oai.chat.completions.create(model="g", messages=USER, stream=True))
    rec = only(sim)
    assert rec.ttfb_ns is not None and 2_000_000 <= rec.ttfb_ns < 30_000_000
    assert rec.ttft_ns is not None and rec.ttft_ns >= 5_000_000
    planned = [b.t_due_ns - a.t_due_ns for a, b in itertools.pairwise(rec.content_events)]
    assert planned == [3_000_000] * 11
    # The schedule is absolute, so lateness never accumulates: the sent span stays ~11 × 3 ms.
    assert rec.e2e_ns is not None
    assert abs((rec.e2e_ns - rec.ttft_ns) - 33_000_000) < 10_000_000
    late = sorted(rec.lateness_ns)
    assert late[0] >= 0 and statistics.median(late) < 5_000_000  # never early, rarely late


def test_same_seed_same_request_same_text_and_schedule() -> None:
    noisy = BASE.replace(jitter=0.4, decode_ms_per_token=1.0, output_tokens=12, seed=42)
    runs = []
    for _ in range(2):
        with (
            SimServer(noisy) as s,
            openai.OpenAI(base_url=s.openai_base_url, api_key="s") as o,
        ):
            chunks = list(o.chat.completions.create(model="g", messages=USER, stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks)
            runs.append((text, only(s)))
    (text_a, a), (text_b, b) = runs
    assert text_a == text_b
    due_a = [e.t_due_ns - a.t_received_ns for e in a.events]
    due_b = [e.t_due_ns - b.t_received_ns for e in b.events]
    assert due_a == due_b
    # As sent: never early. How late is the machine's business (a 2-core box running valgrind
    # beside the suite delayed one run by a 22 ms median); the seeded schedule above is the
    # deterministic part, and the server logs each event's lateness against it.
    assert all(e.t_sent_ns >= e.t_due_ns for e in (*a.events, *b.events))
    # Each streamed event's bytes left between its write's start, after it was due, and its
    # write's return: the span the accuracy checks judge a stamp against.
    for e in (*a.events, *b.events):
        assert e.t_write_ns is not None and e.t_due_ns <= e.t_write_ns <= e.t_sent_ns
        assert e.sent_span_ns == (e.t_write_ns, e.t_sent_ns)
    with (
        SimServer(noisy.replace(seed=43)) as s,
        openai.OpenAI(base_url=s.openai_base_url, api_key="s") as o,
    ):
        other = o.chat.completions.create(model="g", messages=USER)
        assert other.choices[0].message.content != text_a


# --- control surface --------------------------------------------------------------------------


def test_truth_cache_and_model_over_http(sim: SimServer, oai: Any) -> None:
    oai.chat.completions.create(model="g", messages=USER)
    with httpx2.Client(base_url=sim.base_url) as http:
        assert http.get("/health").json()["status"] == "ok"
        records = http.get("/_sim/truth").json()["records"]
        assert [TruthRecord.from_json(r) for r in records] == sim.truth()
        rid = records[0]["request_id"]
        assert len(http.get("/_sim/truth", params={"request_id": rid}).json()["records"]) == 1
        assert http.delete("/_sim/truth").status_code == 200 and sim.truth() == []
        assert http.post("/_sim/cache/reset").json() == {"reset": True}
        assert http.put("/_sim/model", json={"ttfb_ms": 3}).json()["ttfb_ms"] == 3
        assert sim.model.ttfb_ms == 3
        bad = http.put("/_sim/model", json={"ttfb_ms": -3})
        assert bad.status_code == 400 and "ttfb_ms" in bad.text
        assert http.get("/_sim/model").json()["ttfb_ms"] == 3


def test_server_lifecycle_and_port_in_use() -> None:
    s = SimServer(LatencyModel.preset("instant"))
    with pytest.raises(RuntimeError, match="not running"):
        _ = s.base_url
    with s:
        assert s.base_url.startswith("http://127.0.0.1:")
        assert s.openai_base_url == s.base_url + "/v1" and s.anthropic_base_url == s.base_url
        with pytest.raises(OSError):
            SimServer(port=s.port).start()
    s.stop()  # idempotent


def test_the_model_list_names_the_providers_models_it_answers_with(
    sim: SimServer, ant: Any, oai: Any
) -> None:
    """Both SDKs' `models.list()` read real providers' model names (what the examples price),
    in their own shapes, and any other name the server has since answered with."""
    ant.messages.create(model="claude-opus-4-1", max_tokens=8, messages=USER)
    oai.chat.completions.create(model="my-finetune", messages=USER)
    claude = [m.id for m in ant.models.list()]
    assert claude[:2] == ["claude-haiku-4-5", "claude-sonnet-4-5"]
    assert "claude-opus-4-1" in claude and "gpt-4.1-mini" not in claude
    listed = {m.id: m.owned_by for m in oai.models.list()}
    assert listed["gpt-4.1-mini"] == listed["gpt-4o"] == listed["my-finetune"] == "openai"
    assert listed["claude-haiku-4-5"] == listed["claude-opus-4-1"] == "anthropic"
    assert "sim" not in listed
