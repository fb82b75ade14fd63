"""The simulator's wire formats behind `WireFormat`: every registered one keeps the Protocol and
is served on its path, and a simulated API is added by registering one more format, with no
change anywhere else: a test-local fake API, served by a real `SimServer`, captured through the
transport wrapper and read by the fake metrics adapter, gives the numbers the server's truth
log says it sent."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Mapping
from typing import Any

import httpx2
import pytest
from test_metrics_apis import FAKE

from pytest_latency import wrap_transport
from pytest_latency.metrics import APIS, REASONING, TEXT, call_metrics
from pytest_latency.metrics import apis as metrics_apis
from pytest_latency.sim import LatencyModel, SimServer
from pytest_latency.sim import _apis as sim_apis
from pytest_latency.sim._schedule import Plan
from pytest_latency.sim._wire import (
    Out,
    SimRequest,
    Usage,
    WireError,
    WireFormat,
    require_mapping,
    sse,
)
from pytest_latency.wire import WireRecord

FAST = LatencyModel(
    ttfb_ms=0.5,
    prefill_us_per_token=1.0,
    decode_ms_per_token=0.5,
    output_tokens=6,
    reasoning_tokens=3,
    seed=3,
)
MEMBERS = [
    name
    for name, member in inspect.getmembers(WireFormat, inspect.isfunction)
    if not name.startswith("_")
]


def test_the_protocol_has_the_members_the_server_asks_for() -> None:
    assert sorted(MEMBERS) == ["error_body", "json_body", "parse", "stream_error", "stream_events"]


@pytest.mark.parametrize("wire", sim_apis.WIRE_FORMATS, ids=lambda w: w.API)
def test_every_registered_wire_format_satisfies_the_protocol(wire: WireFormat) -> None:
    assert isinstance(wire, WireFormat)
    assert wire.API in APIS  # the simulator speaks only what the metrics know
    assert wire.PATH.startswith(("/v1/", "/{version:v1"))
    assert isinstance(wire.REPORTS_CACHE_WRITES, bool)
    for name in MEMBERS:
        wanted = [p for p in inspect.signature(getattr(WireFormat, name)).parameters]
        assert ["self", *inspect.signature(getattr(wire, name)).parameters] == wanted, name


def test_registered_formats_have_distinct_names_and_paths() -> None:
    formats = sim_apis.WIRE_FORMATS
    assert len({w.API for w in formats}) == len({w.PATH for w in formats}) == len(formats) == 4
    assert [w.REPORTS_CACHE_WRITES for w in formats] == [
        w.API == "anthropic.messages" for w in formats
    ]


# --- A fake simulated API, added by registering it and nothing else ---------------------------


class FakeWire:
    """`POST /v1/fake/generate` as `test_metrics_apis.FakeApi` reads it."""

    API = "fake.generate"
    PATH = "/v1/fake/generate"
    REPORTS_CACHE_WRITES = False

    def parse(self, raw: Any, route: Mapping[str, str]) -> SimRequest:
        body = require_mapping(raw)
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise WireError(400, "prompt must be a non-empty string")
        text = f"user: {prompt}\n"
        return SimRequest(
            api=self.API,
            model=str(body.get("model", "")),
            stream=bool(body.get("stream", False)),
            prompt_text=text,
            cacheable_chars=len(text),
            max_tokens=None,
            reasoning="stream" if body.get("think") else "none",
        )

    def stream_events(
        self, req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
    ) -> list[Out]:
        outs = []
        for i, p in enumerate(plan.pieces):
            kind = "think" if p.channel == "reasoning" else "token"
            data = {"kind": kind, "text": p.text, "model": req.model}
            outs.append(Out(sse(data), p.channel, p.tokens, p.due_ns, i))
        end = {"kind": "end", "usage": {"in": usage.input_tokens, "out": usage.output_tokens}}
        outs.append(Out(sse(end), "other", 0, plan.end_ns))
        return outs

    def json_body(
        self, req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
    ) -> dict[str, Any]:
        text = "".join(p.text for p in plan.pieces if p.channel == "content")
        return {"text": text, "usage": {"in": usage.input_tokens, "out": usage.output_tokens}}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"kind": "oops", "why": message}

    def stream_error(self, message: str, sequence: int) -> bytes:
        return sse({"kind": "oops", "why": message})


FAKE_WIRE: WireFormat = FakeWire()  # mypy checks the Protocol here


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimServer]:
    monkeypatch.setattr(sim_apis, "WIRE_FORMATS", (*sim_apis.WIRE_FORMATS, FAKE_WIRE))
    monkeypatch.setattr(metrics_apis, "ADAPTERS", (*metrics_apis.ADAPTERS, FAKE))
    with SimServer(FAST) as s:
        yield s


def _captured(server: SimServer, body: dict[str, Any]) -> WireRecord:
    records: list[WireRecord] = []
    transport = wrap_transport(httpx2.HTTPTransport(), sink=records.append)
    with httpx2.Client(base_url=server.base_url, transport=transport, timeout=30) as http:
        response = http.post(FakeWire.PATH, content=json.dumps(body))
        assert response.status_code == 200, response.text
    (record,) = records
    return record


def test_a_registered_fake_api_is_served_and_measured_as_its_truth_says(
    server: SimServer,
) -> None:
    record = _captured(
        server, {"model": "fake-1", "prompt": "hi there", "stream": True, "think": 1}
    )
    (truth,) = server.truth()
    m = call_metrics(record)
    assert truth.api == m.api == "fake.generate"
    assert m.channels == (REASONING, TEXT)
    sent = [e for e in truth.events if e.kind in ("reasoning", "content")]
    assert m.content_events == len(sent) >= 2
    assert (m.input_tokens, m.output_tokens) == (truth.input_tokens, truth.output_tokens)
    assert m.output_tokens == FAST.output_tokens + FAST.reasoning_tokens
    assert m.error is None and m.ttft is not None and m.tpot is not None


def test_a_registered_fake_api_answers_whole_and_with_its_errors(server: SimServer) -> None:
    whole = call_metrics(_captured(server, {"model": "fake-1", "prompt": "hi"}))
    assert (whole.api, whole.stream, whole.output_tokens) == ("fake.generate", False, 6)
    with httpx2.Client(base_url=server.base_url, timeout=30) as http:
        bad = http.post(FakeWire.PATH, content=json.dumps({"model": "fake-1"}))
    assert bad.status_code == 400
    assert bad.json() == {"kind": "oops", "why": "prompt must be a non-empty string"}
