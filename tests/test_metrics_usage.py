"""The usage prices need beyond the token counts (issue #18): Anthropic's cache writes split by
TTL (`cache_write_1h_tokens`, the 1-hour part of `cache_write_tokens`) and the service tier the
response names (`service_tier`), on every API, streamed and not, from hand-built wire records;
then through the real anthropic and openai SDKs against the simulator, whose truth log says what
it sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from test_metrics import (
    ANTHROPIC_URL,
    CHAT_URL,
    CHAT_USAGE,
    COMPLETIONS_URL,
    DONE,
    RESPONSES_URL,
    anthropic_end,
    anthropic_start,
    anthropic_text,
    anthropic_usage,
    chat_chunk,
    chat_finish,
    chat_usage,
    make_record,
    metrics_of,
    request,
    responses_event,
    responses_final,
    sse,
)

from pytest_latency import instrument
from pytest_latency.metrics import CallMetrics, call_metrics
from pytest_latency.metrics._usage import MAX_TOKEN_COUNT
from pytest_latency.sim import LatencyModel, SimServer
from pytest_latency.wire import WireRecord


def split(five_minutes: Any, one_hour: Any) -> dict[str, Any]:
    return {"ephemeral_5m_input_tokens": five_minutes, "ephemeral_1h_input_tokens": one_hour}


def anthropic_call(start: dict[str, Any], end: dict[str, Any]) -> CallMetrics:
    chunks = [
        (100, anthropic_start(start)),
        (200, anthropic_text("Hi")),
        (210, anthropic_end(end)),
    ]
    return metrics_of(ANTHROPIC_URL, chunks)


def body_metrics(url: str, body: dict[str, Any]) -> CallMetrics:
    raw = json.dumps(body).encode()
    record = make_record(
        url, [(300, raw)], content_type="application/json", body=request(stream=False)
    )
    return call_metrics(record)


# --- Anthropic: cache writes by TTL ---------------------------------------------------------


def test_anthropic_streamed_cache_writes_split_by_ttl() -> None:
    """message_start splits the writes; message_delta repeats the total without the split (the
    recorded streams do): the split read first stands, the total is the latest."""
    start = anthropic_usage(
        input_tokens=13,
        cache_read_input_tokens=0,
        cache_creation_input_tokens=4000,
        cache_creation=split(1000, 3000),
        service_tier="standard",
    )
    end = {"input_tokens": 13, "cache_creation_input_tokens": 4000, "output_tokens": 4}
    m = anthropic_call(start, end)
    assert (m.cache_write_tokens, m.cache_write_1h_tokens) == (4000, 3000)
    assert m.input_tokens == 13 + 4000  # the total counts every write, whatever its TTL
    assert m.service_tier == "standard"
    assert m.error is None


def test_anthropic_a_later_split_wins_field_by_field() -> None:
    start = anthropic_usage(cache_creation_input_tokens=100, cache_creation=split(100, 0))
    end = {"cache_creation_input_tokens": 700, "cache_creation": split(100, 600)}
    m = anthropic_call(start, end)
    assert (m.cache_write_tokens, m.cache_write_1h_tokens) == (700, 600)


def test_anthropic_without_the_split_the_1h_part_is_absent_not_zero() -> None:
    m = anthropic_call(anthropic_usage(cache_creation_input_tokens=500), {"output_tokens": 3})
    assert (m.cache_write_tokens, m.cache_write_1h_tokens, m.service_tier) == (500, None, None)
    # A split with no total to be a part of is not kept either.
    usage = {"input_tokens": 5, "output_tokens": 1, "cache_creation": split(0, 40)}
    m = anthropic_call(usage, {"output_tokens": 3})
    assert (m.cache_write_tokens, m.cache_write_1h_tokens) == (None, None)


def test_anthropic_json_body_split_and_tier() -> None:
    usage = anthropic_usage(
        cache_creation_input_tokens=418,
        cache_creation=split(18, 400),
        output_tokens=9,
        service_tier="priority",
    )
    body = {"type": "message", "model": "claude-x", "content": [], "usage": usage}
    m = body_metrics(ANTHROPIC_URL, body)
    assert (m.api, m.stream, m.error) == ("anthropic.messages", False, None)
    assert (m.cache_write_tokens, m.cache_write_1h_tokens, m.service_tier) == (418, 400, "priority")


def test_anthropic_iterations_sum_their_1h_writes() -> None:
    """A call of several passes is the sum of its iterations (issue #14, item 7): their 1-hour
    writes too, over the iterations that split theirs."""
    passes = [
        {
            "type": "compaction",
            "input_tokens": 100,
            "output_tokens": 83,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 2000,
            "cache_creation": split(500, 1500),
        },
        {
            "type": "message",
            "input_tokens": 181,
            "output_tokens": 8,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 300,
            "cache_creation": split(0, 300),
        },
        {
            "type": "message",
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_creation_input_tokens": 7,
        },
    ]
    end = {
        "input_tokens": 181,
        "output_tokens": 8,
        "cache_creation_input_tokens": 300,  # the final pass's only: the iterations are the call
        "iterations": passes,
    }
    m = anthropic_call(anthropic_usage(cache_creation_input_tokens=0), end)
    assert m.cache_write_tokens == 2000 + 300 + 7
    assert m.cache_write_1h_tokens == 1500 + 300
    assert m.output_tokens == 83 + 8 + 1
    unsplit = [{k: v for k, v in p.items() if k != "cache_creation"} for p in passes]
    m = anthropic_call(anthropic_usage(), {**end, "iterations": unsplit})
    assert (m.cache_write_tokens, m.cache_write_1h_tokens) == (2307, None)


@pytest.mark.parametrize(
    ("one_hour", "detail"),
    [
        (-1, "token count -1 out of range"),
        (MAX_TOKEN_COUNT + 1, "out of range"),
        (10**400, "~2^1329 out of range"),
        (4001, "1-hour cache writes 4001 exceed the cache writes 4000"),
    ],
)
def test_anthropic_1h_writes_out_of_range_are_a_protocol_error(one_hour: int, detail: str) -> None:
    """The same guard as every count: the call records `bad_usage`, its timing and the counts
    read before the bad object stand."""
    start = anthropic_usage(cache_creation_input_tokens=4000, cache_creation=split(0, 0))
    end = {"cache_creation_input_tokens": 4000, "cache_creation": split(0, one_hour)}
    m = anthropic_call(start, end)
    assert m.error == "bad_usage"
    assert m.error_detail is not None and detail in m.error_detail
    assert len(m.error_detail) < 200
    assert (m.cache_write_tokens, m.cache_write_1h_tokens) == (4000, 0)  # message_start's
    assert m.ttft == 200_000.0


@pytest.mark.parametrize("one_hour", ["300", 3.0, True, None, [300], {"n": 300}])
def test_anthropic_1h_writes_that_are_no_count_are_absent(one_hour: object) -> None:
    m = anthropic_call(
        anthropic_usage(cache_creation_input_tokens=300, cache_creation=split(0, one_hour)),
        {"output_tokens": 3},
    )
    assert (m.error, m.cache_write_tokens, m.cache_write_1h_tokens) == (None, 300, None)
    odd = anthropic_usage(cache_creation_input_tokens=300, cache_creation="1h")
    assert anthropic_call(odd, {"output_tokens": 3}).cache_write_1h_tokens is None


# --- OpenAI: no TTL split; the tier on every API --------------------------------------------


def test_openai_apis_never_split_cache_writes() -> None:
    usage = dict(CHAT_USAGE, prompt_tokens_details={"cached_tokens": 0, "cache_write_tokens": 64})
    chunks = [(200, chat_chunk({"content": "x"})), (210, chat_finish() + chat_usage(usage) + DONE)]
    m = metrics_of(CHAT_URL, chunks)
    assert (m.cache_write_tokens, m.cache_write_1h_tokens) == (64, None)


def test_chat_streamed_tier_from_the_chunks_latest_wins() -> None:
    chunks = [
        (100, chat_chunk({"role": "assistant", "content": ""}, service_tier="default")),
        (200, chat_chunk({"content": "a"}, service_tier="default")),
        (210, chat_chunk({"content": "b"})),  # a chunk naming none changes nothing
        (220, chat_finish() + chat_usage() + DONE),
    ]
    assert metrics_of(CHAT_URL, chunks).service_tier == "default"
    # A chunk naming nothing else still names the tier (the usage chunk, a role-only one).
    later = [*chunks[:-1], (220, chat_chunk(choices=[], service_tier="flex") + DONE)]
    assert metrics_of(CHAT_URL, later).service_tier == "flex"
    plain = [(200, chat_chunk({"content": "a"})), (220, chat_finish() + chat_usage() + DONE)]
    assert metrics_of(CHAT_URL, plain).service_tier is None


def test_legacy_completions_tier() -> None:
    choice = {"index": 0, "text": "a", "finish_reason": "stop"}
    chunk = sse({"object": "text_completion", "choices": [choice], "service_tier": "scale"})
    m = metrics_of(COMPLETIONS_URL, [(200, chunk + DONE)])
    assert (m.api, m.service_tier) == ("openai.completions", "scale")


def test_responses_streamed_tier_is_the_final_event_s() -> None:
    """`response.created` echoes the tier asked for ("auto"); `response.completed` names the
    one that served the call (pydantic-ai's and vercel/ai's recordings)."""
    created = {"id": "r", "object": "response", "model": "gpt-x", "service_tier": "auto"}
    head = (100, responses_event("response.created", response=created))
    text = (200, responses_event("response.output_text.delta", delta="Hi"))
    m = metrics_of(RESPONSES_URL, [head, text, (260, responses_final(service_tier="default"))])
    assert m.service_tier == "default"
    # Cut before its final event, the call keeps the echo: what the response said.
    cut = metrics_of(RESPONSES_URL, [head, text])
    assert (cut.error, cut.service_tier) == ("truncated", "auto")
    failed = responses_final("response.failed", status="failed", service_tier="flex")
    incomplete = responses_final("response.incomplete", status="incomplete", service_tier="flex")
    for end in (failed, incomplete):
        assert metrics_of(RESPONSES_URL, [head, text, (260, end)]).service_tier == "flex"


@pytest.mark.parametrize(
    ("url", "body"),
    [
        (
            CHAT_URL,
            {
                "object": "chat.completion",
                "model": "gpt-x",
                "service_tier": "priority",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": CHAT_USAGE,
            },
        ),
        (
            RESPONSES_URL,
            {
                "object": "response",
                "model": "gpt-x",
                "status": "completed",
                "service_tier": "priority",
                "output": [],
                "usage": {"input_tokens": 5, "output_tokens": 2},
            },
        ),
    ],
)
def test_openai_json_body_tier(url: str, body: dict[str, Any]) -> None:
    m = body_metrics(url, body)
    assert (m.stream, m.error, m.service_tier, m.cache_write_1h_tokens) == (
        False,
        None,
        "priority",
        None,
    )


@pytest.mark.parametrize("tier", [3, True, "", None, ["default"], {"name": "default"}])
def test_a_tier_that_is_no_name_is_absent(tier: object) -> None:
    chunks = [(200, chat_chunk({"content": "a"}, service_tier=tier)), (220, chat_finish() + DONE)]
    m = metrics_of(CHAT_URL, chunks)
    assert (m.error, m.service_tier) == (None, None)
    usage = anthropic_usage(service_tier=tier)
    assert anthropic_call(usage, {"output_tokens": 3}).service_tier is None


def test_a_hostile_tier_is_one_short_printable_word_without_secrets() -> None:
    key = "sk-ant-api03-" + "Q" * 40
    hostile = f"flex\x1b[31m\nBearer {key} " + "x" * 500
    chunks = [(200, chat_chunk({"content": "a"}, service_tier=hostile)), (220, chat_finish())]
    tier = metrics_of(CHAT_URL, chunks).service_tier
    assert tier is not None and tier.startswith("flex")
    assert len(tier) <= 40 and tier.isprintable() and " " not in tier
    assert key not in tier


def test_the_sniffed_api_reads_the_tier_too() -> None:
    """A path no adapter owns (a proxy route): the API is sniffed, the tier read as usual."""
    chunks = [(200, chat_chunk({"content": "a"}, service_tier="flex")), (220, chat_finish())]
    m = metrics_of("https://proxy.internal/route/7", chunks)
    assert (m.api, m.service_tier) == ("openai.chat", "flex")


# --- CallMetrics carries them ---------------------------------------------------------------


def test_both_fields_round_trip_and_older_data_reads_without_them() -> None:
    start = anthropic_usage(
        cache_creation_input_tokens=900, cache_creation=split(0, 900), service_tier="batch"
    )
    m = anthropic_call(start, {"output_tokens": 3})
    data = m.to_dict()
    assert (data["cache_write_1h_tokens"], data["service_tier"]) == (900, "batch")
    assert CallMetrics.from_dict(json.loads(json.dumps(data))) == m
    older = {k: v for k, v in data.items() if k not in ("cache_write_1h_tokens", "service_tier")}
    old = CallMetrics.from_dict(older)
    assert (old.cache_write_1h_tokens, old.service_tier) == (None, None)
    # Absent is left out of the plain form, as every empty field is; 0 is a count and is kept.
    plain = anthropic_call(anthropic_usage(), {"output_tokens": 3}).to_dict()
    assert "cache_write_1h_tokens" not in plain and "service_tier" not in plain
    zero = anthropic_call(anthropic_usage(cache_creation=split(0, 0)), {"output_tokens": 3})
    assert zero.to_dict()["cache_write_1h_tokens"] == 0


# --- Through the real SDKs, against the simulator -------------------------------------------

LONG = "The quick brown fox jumps over the lazy dog. " * 400  # ~4,500 tokens, over the minimum
MESSAGES: Any = [{"role": "user", "content": "Say something short."}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    model = LatencyModel.preset("instant").replace(output_tokens=8, cache_min_tokens=1024)
    with SimServer(model, port=0) as server:
        yield server


@pytest.fixture
def records(sim: SimServer) -> list[WireRecord]:
    sim.clear_truth()
    sim.reset_cache()
    return []


def test_a_1h_cache_write_and_the_tier_through_the_sdks(
    sim: SimServer, records: list[WireRecord]
) -> None:
    """An Anthropic request whose breakpoint asks for the 1-hour cache: its write lands in
    `cache_write_1h_tokens`, the tier in `service_tier`, streamed and not, as the simulator's
    truth log says it sent them; an OpenAI request asking for the flex tier gets it named."""
    system: Any = [
        {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    with instrument(
        anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sim"), sink=records.append
    ) as ant:
        with ant.messages.stream(
            model="claude-sim", max_tokens=64, system=system, messages=MESSAGES
        ) as stream:
            streamed = stream.get_final_message().usage
        sim.reset_cache()
        whole = ant.messages.create(
            model="claude-sim", max_tokens=64, system=system, messages=MESSAGES
        ).usage
    with instrument(
        openai.OpenAI(base_url=sim.openai_base_url, api_key="sim"), sink=records.append
    ) as oai:
        for _ in oai.chat.completions.create(
            model="gpt-sim",
            messages=MESSAGES,
            stream=True,
            service_tier="flex",
            stream_options={"include_usage": True},
        ):
            pass
        with oai.responses.stream(model="gpt-sim", input="Say something short.") as events:
            for _ in events:
                pass
    truth = sim.truth()
    calls = [call_metrics(r) for r in records]
    assert [c.api for c in calls] == [t.api for t in truth]
    assert [c.stream for c in calls] == [True, False, True, True]
    for usage in (streamed, whole):  # the SDK's own reading of what the simulator sent
        assert usage.cache_creation is not None
        assert usage.cache_creation.ephemeral_1h_input_tokens == usage.cache_creation_input_tokens
        assert usage.cache_creation.ephemeral_5m_input_tokens == 0
        assert usage.cache_creation_input_tokens > 3000 and usage.service_tier == "standard"
    for call, said in zip(calls, truth, strict=True):
        assert call.error is None, call.notes
        assert (call.cache_write_1h_tokens, call.service_tier) == (
            said.cache_write_1h_tokens,
            said.service_tier,
        )
    assert [c.cache_write_tokens for c in calls[:2]] == [t.cache_write_tokens for t in truth[:2]]
    assert [c.service_tier for c in calls] == ["standard", "standard", "flex", "default"]
    assert calls[0].cache_write_1h_tokens == streamed.cache_creation_input_tokens
    assert calls[1].cache_write_1h_tokens == whole.cache_creation_input_tokens
    assert [c.cache_write_1h_tokens for c in calls[2:]] == [None, None]  # OpenAI splits nothing
