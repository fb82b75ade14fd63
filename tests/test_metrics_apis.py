"""The wire API adapters behind `WireApi`: every registered one keeps the Protocol, paths pick at
most one, and an API is added by registering one more adapter, with no change anywhere else (a
test-local fake API, registered for a fake path, gets channels, usage, timing and errors through
`call_metrics`)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_metrics import (
    ANTHROPIC_URL,
    CHAT_URL,
    COMPLETIONS_URL,
    RESPONSES_URL,
    anthropic_text_stream,
    chat_text_stream,
    make_record,
    metrics_of,
    sse,
)

from pytest_latency import metrics
from pytest_latency.metrics import APIS, CHANNELS, REASONING, TEXT, UNKNOWN, call_metrics
from pytest_latency.metrics import apis as registry
from pytest_latency.metrics._fingerprint import OutputText
from pytest_latency.metrics._usage import Usage, UsageFields, count
from pytest_latency.metrics.apis import (
    ADAPTERS,
    NOTHING,
    UNKNOWN_API,
    Classified,
    ProviderError,
    Request,
    WireApi,
)
from pytest_latency.metrics.apis._shapes import body_request

ALL = (*ADAPTERS, UNKNOWN_API)
GEMINI_STREAM_URL = (
    "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent"
)
MEMBERS = [
    name
    for name, member in inspect.getmembers(WireApi, inspect.isfunction)
    if not name.startswith("_")
]


def test_the_protocol_has_the_members_the_scan_asks_for() -> None:
    assert sorted(MEMBERS) == sorted(
        [
            "matches_path",
            "matches_payload",
            "request",
            "error",
            "event",
            "body",
            "read_usage",
            "normalise_usage",
            "output_event",
            "output_body",
        ]
    )


@pytest.mark.parametrize("api", ALL, ids=lambda a: a.NAME)
def test_every_registered_adapter_satisfies_the_protocol(api: WireApi) -> None:
    assert isinstance(api, WireApi)
    assert isinstance(api.NAME, str) and api.NAME
    for name in MEMBERS:
        wanted = [p for p in inspect.signature(getattr(WireApi, name)).parameters if p != "self"]
        assert list(inspect.signature(getattr(api, name)).parameters) == wanted, name


def test_the_public_api_names_are_the_registry_s() -> None:
    assert APIS == (
        metrics.ANTHROPIC_MESSAGES,
        metrics.OPENAI_CHAT,
        metrics.OPENAI_RESPONSES,
        metrics.OPENAI_COMPLETIONS,
        metrics.GEMINI_GENERATE_CONTENT,
        UNKNOWN,
    )
    assert tuple(api.NAME for api in ALL) == APIS
    assert len(set(APIS)) == len(APIS)


@pytest.mark.parametrize(
    ("url", "api"),
    [
        (ANTHROPIC_URL, "anthropic.messages"),
        (CHAT_URL, "openai.chat"),
        (RESPONSES_URL, "openai.responses"),
        (COMPLETIONS_URL, "openai.completions"),
        ("https://x/openai/deployments/d/chat/completions/", "openai.chat"),
        ("https://api.anthropic.com/v1/messages/count_tokens", UNKNOWN),
        ("https://api.openai.com/v1/embeddings", UNKNOWN),
        (GEMINI_STREAM_URL, "gemini.generate_content"),
        (
            "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google"
            "/models/gemini-2.5-flash:generateContent",
            "gemini.generate_content",
        ),
        ("https://generativelanguage.googleapis.com/v1beta/models/m:countTokens", UNKNOWN),
    ],
)
def test_a_path_is_claimed_by_at_most_one_adapter(url: str, api: str) -> None:
    path = urlsplit(url).path
    claims = [a.NAME for a in ADAPTERS if a.matches_path(path.rstrip("/"))]
    assert claims == ([] if api == UNKNOWN else [api])
    assert api == registry.for_path(path).NAME


def test_every_adapter_reads_every_error_envelope() -> None:
    envelopes: list[tuple[dict[str, Any], ProviderError]] = [
        ({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
         ProviderError("overloaded_error", "busy")),
        ({"error": {"code": 500, "message": "boom"}}, ProviderError("500", "boom")),
        ({"type": "error", "code": "server_error", "message": "m"},
         ProviderError("server_error", "m")),
        ({"object": "error", "type": "BadRequestError", "message": "x"},
         ProviderError("BadRequestError", "x")),
        ({"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}},
         ProviderError("UNAVAILABLE", "busy")),
    ]  # fmt: skip
    for api in ALL:
        for payload, expected in envelopes:
            assert api.error(payload) == expected, api.NAME
        assert api.error({"type": "message_stop"}) is None


# --- A fake API, added by registering it and nothing else -------------------------------------


class FakeApi:
    """`POST /v1/fake/generate`: events {"kind": "think"|"token"|"end"|"oops", ...}."""

    NAME = "fake.generate"

    def matches_path(self, path: str) -> bool:
        return path.endswith("/fake/generate")

    def matches_payload(self, payload: Mapping[str, Any]) -> bool:
        return payload.get("kind") in ("think", "token", "end")

    def request(self, path: str, payload: Mapping[str, Any] | None) -> Request:
        return body_request(path, payload)

    def error(self, payload: Mapping[str, Any]) -> ProviderError | None:
        if payload.get("kind") == "oops":
            return ProviderError("fake_overloaded", str(payload.get("why")))
        return None

    def event(self, event: str, payload: Mapping[str, Any]) -> Classified:
        kind = payload.get("kind")
        if kind == "think":
            return Classified(channels=(REASONING,))
        if kind == "token":
            return Classified(channels=(TEXT,), model=str(payload.get("model")))
        if kind == "end":
            return Classified(usage=payload.get("usage"), terminal=True)
        return NOTHING

    def body(self, payload: Mapping[str, Any]) -> Classified:
        return Classified(usage=payload.get("usage"))

    def read_usage(self, usage: Mapping[str, Any], previous: UsageFields) -> UsageFields:
        return dataclasses.replace(
            previous, input_tokens=count(usage.get("in")), output_tokens=count(usage.get("out"))
        )

    def normalise_usage(self, fields: UsageFields) -> Usage:
        return Usage(input_tokens=fields.input_tokens, output_tokens=fields.output_tokens)

    def output_event(self, payload: Mapping[str, Any], out: OutputText) -> bool:
        out.add(("fake", 0), payload.get("text"))
        return "text" in payload

    def output_body(self, payload: Mapping[str, Any], out: OutputText) -> bool:
        out.add(("fake", 0), payload.get("text"))
        return "text" in payload


FAKE: WireApi = FakeApi()  # mypy checks the Protocol here
FAKE_URL = "https://llm.example/v1/fake/generate"


def fake_stream(end: bool = True) -> list[tuple[float, bytes]]:
    chunks: list[tuple[float, bytes]] = [
        (100, sse({"kind": "think"})),
        (150, sse({"kind": "token", "text": "Hel", "model": "fake-1"})),
        (170, sse({"kind": "token", "text": "lo"})),
        (190, sse({"kind": "token", "text": "!"})),
    ]
    if end:
        chunks.append((200, sse({"kind": "end", "usage": {"in": 7, "out": 4}})))
    return chunks


@pytest.fixture
def with_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "ADAPTERS", (*registry.ADAPTERS, FAKE))


def test_a_fake_api_is_unknown_until_registered() -> None:
    m = metrics_of(FAKE_URL, fake_stream())
    assert (m.api, m.ttft, m.content_events, m.output_tokens) == (UNKNOWN, None, 0, None)


@pytest.mark.usefixtures("with_fake")
def test_a_registered_fake_api_gets_channels_usage_and_timing() -> None:
    m = metrics_of(FAKE_URL, fake_stream())
    assert m.api == "fake.generate"
    assert m.channels == (REASONING, TEXT)
    assert m.content_events == 4
    assert (m.ttft, m.ttfo, m.e2e) == (100_000.0, 150_000.0, 190_000.0)
    assert m.itl == (50_000.0, 20_000.0, 20_000.0)
    assert (m.input_tokens, m.output_tokens) == (7, 4)
    assert m.tpot == pytest.approx(90_000.0 / 3)
    assert m.model == "m-1"  # the request's model wins over the server's
    assert m.error is None
    assert m.output_digests  # its output text reached the fingerprints


@pytest.mark.usefixtures("with_fake")
def test_a_registered_fake_api_is_sniffed_and_its_errors_and_cuts_are_seen() -> None:
    sniffed = metrics_of("https://proxy.internal/route/42", fake_stream())
    assert (sniffed.api, sniffed.content_events) == ("fake.generate", 4)
    cut = metrics_of(FAKE_URL, fake_stream(end=False))
    assert (cut.error, cut.output_tokens) == ("truncated", None)
    failed = metrics_of(
        FAKE_URL, [*fake_stream(end=False), (300, sse({"kind": "oops", "why": "x"}))]
    )
    assert (failed.error, failed.error_detail) == ("sse_error:fake_overloaded", "x")
    body = call_metrics(
        make_record(
            FAKE_URL,
            [(300, b'{"text": "whole", "usage": {"in": 3, "out": 9}}')],
            content_type="application/json",
        )
    )
    assert (body.api, body.input_tokens, body.output_tokens, body.ttft) == (
        "fake.generate",
        3,
        9,
        None,
    )


def test_registering_an_api_changes_no_other_api_s_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    streams = [(ANTHROPIC_URL, anthropic_text_stream()), (CHAT_URL, chat_text_stream())]
    before = [metrics_of(url, chunks).to_dict() for url, chunks in streams]
    monkeypatch.setattr(registry, "ADAPTERS", (FAKE, *registry.ADAPTERS))
    assert [metrics_of(url, chunks).to_dict() for url, chunks in streams] == before


def test_channels_are_the_protocol_s_vocabulary() -> None:
    assert CHANNELS == ("text", "reasoning", "tool", "refusal", "audio")


def test_responses_items_delivered_whole_are_content_and_hosted_output_is_not() -> None:
    """Items the model emits whole (a local shell command, an MCP approval request) arrive in
    `response.output_item.added` with no delta: that event is their first content (issue #14,
    item 8); a hosted shell's stdout (`shell_call_output_content.delta`) is the environment's,
    not the model's."""
    from pytest_latency.metrics.apis import openai_responses as responses

    for item in (
        {"type": "local_shell_call", "call_id": "c", "action": {"type": "exec", "command": ["ls"]}},
        {"type": "mcp_approval_request", "name": "deploy", "arguments": "{}", "server_label": "s"},
        {"type": "tool_search_call", "id": "ts_1", "status": "in_progress"},
    ):
        found = responses.event("", {"type": "response.output_item.added", "item": item})
        assert found.channels == ("tool",), item
    for streamed in ("message", "function_call", "reasoning"):
        found = responses.event(
            "", {"type": "response.output_item.added", "item": {"type": streamed}}
        )
        assert found.channels == (), streamed  # their deltas carry the content
    shell = {"type": "response.shell_call_output_content.delta", "delta": "total 8\n"}
    assert responses.event("", shell).channels == ()
    args = {"type": "response.shell_call_command.delta", "delta": "ls -la"}
    assert responses.event("", args).channels == ("tool",)
