"""The SDK corpus (issue #14): response bodies recorded by openai-python, anthropic-sdk-python,
pydantic-ai and vercel/ai (tests/corpus/sdk/: manifest.toml names each one's repository, commit
and path, and the facts read from it by hand), replayed from loopback through the real openai,
anthropic and google-genai clients and measured by the plugin's capture.

Every body goes through every SDK path of its API (sync and async; `create(stream=True)` and the
stream helpers), each captured with `instrument` and turned into metrics by `call_metrics`, as
the plugin does in a test. Each call must give the body's facts: the API, the channels, the
number of content events, every token and cache field (the 1-hour cache writes too), the service
tier, the error kind and whether the call read its stream's end, and tpot per generated token.

One path per body (a different one from body to body) is replayed on a known schedule: the
events either side of the first content event, the first answer and the last content event are
GAP apart, the others back to back, and the server stamps each event just before writing it.
ttft, ttfo and e2e must each be the arrival of the very read that completed their event (the
replayed bytes say which read that was) and that read must come after the server wrote it. A
busy machine may deliver several events in one read, late: the stamps are then late too, and
still those of the right read, so the check holds under any load; on a quiet machine the gaps
put the pinned events in reads of their own, so an event one off has another stamp and fails.

The last test replays two bodies through the plugin's own fixtures and result file: an SDK's
retries after two recorded 429s, and openai's sync stream read to [DONE].
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors
from hostile_server import HostileServer, replay

from pytest_latency.capture import instrument
from pytest_latency.metrics import CallMetrics, call_metrics
from pytest_latency.plugin._fixtures import gemini_client_for
from pytest_latency.wire import WireRecord

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on the 3.10 CI job only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

# The SDKs' own models lag some recordings (openai's Responses web search `sources` of type
# "api" in pydantic-ai's cassette): the helpers warn while serialising their snapshot.
# google-genai (3.6) subclasses aiohttp's ClientSession for its sessions, which aiohttp warns of.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning"),
    pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning"),
]

CORPUS = Path(__file__).parent / "corpus" / "sdk"
# Before and after each event a timed replay pins (the others go out back to back): long
# enough that, on a quiet machine, the client reads the event before the next one is written.
GAP_S = 0.02
ROUTES = {
    "openai.chat": "/v1/chat/completions",
    "openai.completions": "/v1/completions",
    "openai.responses": "/v1/responses",
    "anthropic.messages": "/v1/messages",
    # google-genai names the model and the method in the path (its default API version: v1).
    "gemini.generate_content": "/v1/models/m:generateContent",
}
GEMINI_STREAM_ROUTE = "/v1/models/m:streamGenerateContent"
TOKENS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
)
MESSAGES: Any = [{"role": "user", "content": "Replay, please."}]


class Tokens(NamedTuple):
    input_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    cache_write_1h_tokens: int | None


@dataclass(frozen=True)
class Body:
    """One corpus body and the facts its manifest entry says it must give."""

    file: str
    api: str
    status: int
    headers: dict[str, str]
    pieces: tuple[bytes, ...]  # a stream's events (each with its blank line), or the JSON body
    streamed: bool
    first: int | None  # event indices, as the manifest counts them
    answer: int | None
    last: int | None
    content_events: int
    channels: tuple[str, ...]
    tokens: Tokens
    service_tier: str | None
    error: str | None
    complete: bool

    @classmethod
    def load(cls, entry: dict[str, Any]) -> Body:
        raw = (CORPUS / entry["file"]).read_bytes()
        streamed = entry["file"].endswith(".sse")

        def index(key: str) -> int | None:
            value = entry.get(key, -1)
            return None if value < 0 else int(value)

        def count(key: str) -> int | None:
            value = entry[key]
            return None if value == "absent" else int(value)

        return cls(
            file=entry["file"],
            api=entry["api"],
            status=entry["status"],
            headers=entry.get("headers", {}),
            pieces=tuple(events(raw)) if streamed else (raw,),
            streamed=streamed,
            first=index("first_content"),
            answer=index("first_answer"),
            last=index("last_content"),
            content_events=entry["content_events"],
            channels=tuple(entry["channels"]),
            tokens=Tokens(*(count(key) for key in TOKENS)),
            service_tier=None if entry["service_tier"] == "absent" else entry["service_tier"],
            error=None if entry["error"] == "none" else entry["error"],
            complete=entry["complete"],
        )

    def schedule(self, timed: bool) -> list[float]:
        """Each piece's delay after the one before it: none untimed; timed, GAP either side
        of each pinned event."""
        if not timed:
            return [0.0] * len(self.pieces)
        pinned = {i for i in (self.first, self.answer, self.last) if i is not None}
        if not self.streamed:
            pinned = {0}
        gapped = pinned | {i + 1 for i in pinned}
        return [GAP_S if i in gapped else 0.0 for i in range(len(self.pieces))]


def events(raw: bytes) -> Iterator[bytes]:
    """The body's events, each with the blank line that ends it (the last may have none; Gemini
    ends them CRLF CRLF): the blocks the manifest's event indices count."""
    for piece in re.split(rb"(?<=\n\n)|(?<=\r\n\r\n)", raw):
        if piece:
            yield piece


MANIFEST = tomllib.loads((CORPUS / "manifest.toml").read_text(encoding="utf-8"))["body"]
BODIES = [Body.load(entry) for entry in MANIFEST]


# ---- the SDK paths ------------------------------------------------------------------------------


def chat_create(c: Any) -> None:
    for _ in c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass


def chat_stream(c: Any) -> None:
    with c.chat.completions.stream(model="m", messages=MESSAGES) as stream:
        for _ in stream:
            pass


async def chat_create_async(c: Any) -> None:
    async for _ in await c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass


def chat_whole(c: Any) -> None:
    c.chat.completions.create(model="m", messages=MESSAGES)


async def chat_whole_async(c: Any) -> None:
    await c.chat.completions.create(model="m", messages=MESSAGES)


def completions_create(c: Any) -> None:
    for _ in c.completions.create(model="m", prompt="Replay, please.", stream=True):
        pass


async def completions_create_async(c: Any) -> None:
    async for _ in await c.completions.create(model="m", prompt="Replay, please.", stream=True):
        pass


def responses_create(c: Any) -> None:
    for _ in c.responses.create(model="m", input="Replay, please.", stream=True):
        pass


def responses_stream(c: Any) -> None:
    with c.responses.stream(model="m", input="Replay, please.") as stream:
        for _ in stream:
            pass


async def responses_create_async(c: Any) -> None:
    async for _ in await c.responses.create(model="m", input="Replay, please.", stream=True):
        pass


async def responses_stream_async(c: Any) -> None:
    async with c.responses.stream(model="m", input="Replay, please.") as stream:
        async for _ in stream:
            pass


def responses_whole(c: Any) -> None:
    c.responses.create(model="m", input="Replay, please.")


async def responses_whole_async(c: Any) -> None:
    await c.responses.create(model="m", input="Replay, please.")


def messages_create(c: Any) -> None:
    for _ in c.messages.create(model="m", max_tokens=64, messages=MESSAGES, stream=True):
        pass


def messages_stream(c: Any) -> None:
    with c.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
        for _ in stream:
            pass


async def messages_create_async(c: Any) -> None:
    stream = await c.messages.create(model="m", max_tokens=64, messages=MESSAGES, stream=True)
    async for _ in stream:
        pass


async def messages_stream_async(c: Any) -> None:
    async with c.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
        async for _ in stream:
            pass


def messages_whole(c: Any) -> None:
    c.messages.create(model="m", max_tokens=64, messages=MESSAGES)


async def messages_whole_async(c: Any) -> None:
    await c.messages.create(model="m", max_tokens=64, messages=MESSAGES)


def gemini_stream(c: Any) -> None:
    for _ in c.models.generate_content_stream(model="m", contents="Replay, please."):
        pass


async def gemini_stream_async(c: Any) -> None:
    stream = await c.aio.models.generate_content_stream(model="m", contents="Replay, please.")
    async for _ in stream:
        pass


def gemini_whole(c: Any) -> None:
    c.models.generate_content(model="m", contents="Replay, please.")


async def gemini_whole_async(c: Any) -> None:
    await c.aio.models.generate_content(model="m", contents="Replay, please.")


SdkPath = Callable[[Any], None] | Callable[[Any], Awaitable[None]]
# (api, streamed) → the SDK paths that make such a call.
PATHS: dict[tuple[str, bool], tuple[SdkPath, ...]] = {
    ("openai.chat", True): (chat_create, chat_stream, chat_create_async),
    ("openai.chat", False): (chat_whole, chat_whole_async),
    ("openai.completions", True): (completions_create, completions_create_async),
    ("openai.responses", True): (
        responses_create,
        responses_stream,
        responses_create_async,
        responses_stream_async,
    ),
    ("openai.responses", False): (responses_whole, responses_whole_async),
    ("anthropic.messages", True): (
        messages_create,
        messages_stream,
        messages_create_async,
        messages_stream_async,
    ),
    ("anthropic.messages", False): (messages_whole, messages_whole_async),
    # google-genai: sync through httpx2, async through its aiohttp sessions.
    ("gemini.generate_content", True): (gemini_stream, gemini_stream_async),
    ("gemini.generate_content", False): (gemini_whole, gemini_whole_async),
}


def route_for(api: str, path: SdkPath) -> str:
    """Where `path` sends its request: Gemini's streamed and whole calls differ in the path."""
    if api == "gemini.generate_content" and path.__name__.startswith("gemini_stream"):
        return GEMINI_STREAM_ROUTE
    return ROUTES[api]


def paths_for(body: Body) -> tuple[SdkPath, ...]:
    if body.streamed:
        return PATHS[body.api, True]
    if body.status >= 400:  # an error answers a stream request as it does a whole one
        return PATHS[body.api, False] + PATHS.get((body.api, True), ())
    return PATHS[body.api, False]


class Clients:
    """One instrumented client per SDK, sync and async, for the whole module (building one
    loads the CA certificates: 50 ms), the async ones on one event loop; `records` gets every
    wire record they make."""

    def __init__(self, base_url: str) -> None:
        self.records: list[WireRecord] = []
        self.loop = asyncio.new_event_loop()
        kw: dict[str, Any] = {"api_key": "replay", "max_retries": 0}
        self._sync: dict[Any, Any] = {
            openai: instrument(openai.OpenAI(base_url=f"{base_url}/v1", **kw), sink=self._sink),
            anthropic: instrument(anthropic.Anthropic(base_url=base_url, **kw), sink=self._sink),
        }
        self._async: dict[Any, Any] = {
            openai: instrument(
                openai.AsyncOpenAI(base_url=f"{base_url}/v1", **kw), sink=self._sink
            ),
            anthropic: instrument(
                anthropic.AsyncAnthropic(base_url=base_url, **kw), sink=self._sink
            ),
        }
        # One google-genai client for both: `.aio` is its async side.
        self._gemini, self._gemini_http = gemini_client_for(base_url, "replay", sink=self._sink)

    def _sink(self, record: WireRecord) -> None:
        self.records.append(record)

    def call(self, path: SdkPath) -> None:
        if path.__name__.startswith("gemini"):
            if inspect.iscoroutinefunction(path):
                self.loop.run_until_complete(path(self._gemini))
            else:
                path(self._gemini)
            return
        provider = anthropic if path.__name__.startswith("messages") else openai
        if inspect.iscoroutinefunction(path):
            self.loop.run_until_complete(path(self._async[provider]))
        else:
            path(self._sync[provider])

    def close(self) -> None:
        for client in self._sync.values():
            client.close()
        for aclient in self._async.values():
            self.loop.run_until_complete(aclient.close())
        self.loop.run_until_complete(self._gemini.aio.aclose())
        self._gemini.close()
        self._gemini_http.close()
        self.loop.close()


SDK_ERRORS = (openai.APIError, anthropic.APIError, genai_errors.APIError)


def replayed(
    server: HostileServer, clients: Clients, body: Body, path: SdkPath, *, timed: bool
) -> tuple[CallMetrics, list[int], WireRecord]:
    """Serve `body` once and call it through `path`: the call's metrics, the server's log (the
    headers' stamp, then each piece's) and the call's wire record."""
    log: list[int] = []
    content_type = "text/event-stream" if body.streamed else "application/json"
    behaviour = replay(
        body.pieces,
        body.schedule(timed),
        log,
        status=body.status,
        content_type=content_type,
        headers=body.headers,
    )
    clients.records.clear()
    route = route_for(body.api, path)
    server.route(route, [behaviour])
    if body.error is None:
        clients.call(path)
    else:
        with pytest.raises(SDK_ERRORS):
            clients.call(path)
    records = clients.records
    assert len(records) == 1 and server.served(route) == 1, records
    return call_metrics(records[0]), log, records[0]


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer({}) as s:
        yield s


@pytest.fixture(scope="module")
def clients(server: HostileServer) -> Iterator[Clients]:
    """The module's clients, each path run once first, unmeasured: the SDKs build their models
    and import their helpers on first use, between two reads (issue #14, item 2), and nobody
    else warmed these clients."""
    made = Clients(server.base_url)
    for (api, streamed), paths in PATHS.items():
        body = next(b for b in BODIES if (b.api, b.streamed, b.error) == (api, streamed, None))
        for path in paths:
            replayed(server, made, body, path, timed=False)
    yield made
    made.close()


# ---- the corpus through every path --------------------------------------------------------------


class Case(NamedTuple):
    body: Body
    path: SdkPath
    timed: bool


def _cases() -> list[Any]:
    cases = []
    for number, body in enumerate(BODIES):
        paths = paths_for(body)
        for i, path in enumerate(paths):
            timed = i == number % len(paths)
            name = f"{body.file}-{path.__name__}{'-timed' if timed else ''}"
            cases.append(pytest.param(Case(body, path, timed), id=name))
    return cases


@pytest.mark.parametrize("case", _cases())
def test_the_corpus_gives_its_facts_through_the_sdks(
    server: HostileServer, clients: Clients, case: Case
) -> None:
    body = case.body
    m, log, record = replayed(server, clients, body, case.path, timed=case.timed)
    got = {
        "api": m.api,
        "status": m.status,
        "error": m.error,
        "complete": not m.incomplete,
        "channels": m.channels,
        "content_events": m.content_events,
        "tokens": Tokens(*(getattr(m, key) for key in TOKENS)),
        "service_tier": m.service_tier,
        "cache_fields_reported": m.cache_fields_reported,
        "has_ttft": m.ttft is not None,
        "has_ttfo": m.ttfo is not None,
    }
    expected = {
        "api": body.api,
        "status": body.status,
        "error": body.error,
        "complete": body.complete,
        "channels": body.channels,
        "content_events": body.content_events,
        "tokens": body.tokens,
        "service_tier": body.service_tier,
        "cache_fields_reported": body.tokens.cache_read_tokens is not None,
        "has_ttft": body.first is not None,
        "has_ttfo": body.answer is not None,
    }
    assert got == expected, m.notes
    assert m.e2e is not None and m.ttfb is not None
    output = body.tokens.output_tokens
    if m.ttft is not None and output is not None and output > 1:
        # tpot is per generated token: every one the server counted, reasoning included.
        assert m.tpot == pytest.approx((m.e2e - m.ttft) / (output - 1))
    if case.timed:
        _assert_timing(body, m, log, record)


def _assert_timing(body: Body, m: CallMetrics, log: list[int], record: WireRecord) -> None:
    """Each pinned time is the arrival of the read that completed its event (the bytes of the
    replay say which read that was), and that read came after the server wrote the event. On
    an event loop, a content event's time is read back by the lateness the loop's passes show
    (docs/metrics.md, "Read back"): no later than that read, and still not before the server
    wrote the event. So is a sync one, where the kernel said at an ask when the data queued
    came."""
    ends = list(itertools.accumulate(len(piece) for piece in body.pieces))

    def arrival(offset: int) -> int:
        """When the read holding byte `offset` of the body (counting from 1) arrived."""
        received = 0
        for _, arrived, data in record.reads:
            received += len(data)
            if received >= offset:
                return arrived
        raise AssertionError(f"byte {offset} never arrived")

    def at(
        metric: str, value_us: float | None, arrived: int | None, written: int, *, back: bool
    ) -> None:
        assert value_us is not None and arrived is not None, metric
        stamp = m.t_start_ns + value_us * 1000
        assert arrived >= written, (metric, "arrived before the server wrote it")
        # A sync read of data found queued is read back too, by the kernel's arrival time at
        # the ask (docs/metrics.md, "A sync read's data, timed by the kernel").
        if back and (record.loop_lag is not None or record.asked_arrivals):
            # µs floats: 1 µs either way.
            assert written - 1000 <= stamp <= arrived + 1000, (
                metric,
                (stamp - written) / 1e6,
                (arrived - stamp) / 1e6,
                "ms",
            )
        else:
            assert abs(stamp - arrived) < 1000, (metric, (stamp - arrived) / 1e6, "ms")

    at("ttfb", m.ttfb, record.t_headers_ns, log[0], back=False)
    if not body.streamed:  # e2e: the body read to its end
        at("e2e", m.e2e, record.t_eof_ns, log[1], back=False)
        return
    for metric, value, event in (
        ("ttft", m.ttft, body.first),
        ("ttfo", m.ttfo, body.answer),
        ("e2e", m.e2e, body.last),
    ):
        if event is not None:
            at(metric, value, arrival(ends[event]), log[1 + event], back=True)


# ---- the corpus itself --------------------------------------------------------------------------


def test_every_corpus_file_has_its_manifest_entry_and_source() -> None:
    files = {p.relative_to(CORPUS).as_posix() for p in CORPUS.glob("*/*") if p.is_file()}
    listed = [entry["file"] for entry in MANIFEST]
    assert sorted(listed) == sorted(files)
    for entry in MANIFEST:
        assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]), entry["file"]
        assert entry["repo"].count("/") == 1 and entry["path"] and entry["shows"], entry["file"]
    # What the corpus is for: each source, each API, and the fields a recording can carry.
    assert {entry["repo"] for entry in MANIFEST} == {
        "openai/openai-python",
        "anthropics/anthropic-sdk-python",
        "pydantic/pydantic-ai",
        "vercel/ai",
    }
    assert {b.api for b in BODIES} == set(ROUTES)
    assert any(b.tokens.cache_read_tokens for b in BODIES if b.api == "openai.chat")
    assert any(b.tokens.cache_write_tokens for b in BODIES if b.api == "anthropic.messages")
    assert any(b.tokens.cache_write_tokens for b in BODIES if b.api == "openai.responses")
    assert any(b.tokens.cache_write_1h_tokens for b in BODIES if b.api == "anthropic.messages")
    # A tier on every API that names one, and a Responses call whose final tier differs from
    # response.created's echo of the request.
    assert {b.api for b in BODIES if b.service_tier} == {
        "openai.chat",
        "openai.responses",
        "anthropic.messages",
        "gemini.generate_content",
    }
    assert any(b.tokens.cache_read_tokens for b in BODIES if b.api == "gemini.generate_content")
    assert any(
        b'"service_tier":"auto"' in (CORPUS / b.file).read_bytes() and b.service_tier == "default"
        for b in BODIES
        if b.api == "openai.responses"
    )
    assert {b.error.split(":")[0] for b in BODIES if b.error} == {"http_429", "http_400"} | {
        "sse_error"
    }


def test_the_event_split_is_the_manifests() -> None:
    # The indices in the manifest count blocks at blank lines; the replay writes those blocks.
    body = next(b for b in BODIES if b.file.endswith("parse_nothing-e2aad469.sse"))
    assert len(body.pieces) == 34 and body.pieces[-1] == b"data: [DONE]\n\n"
    assert b"".join(body.pieces) == (CORPUS / body.file).read_bytes()


# ---- through the plugin's fixtures and result file ----------------------------------------------

INNER = """
MESSAGES = [{"role": "user", "content": "Replay, please."}]


def test_replay(anthropic_client, openai_client):
    with anthropic_client.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as s:
        for _ in s:
            pass
    for _ in openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass
"""


def _body(name: str) -> Body:
    return next(b for b in BODIES if b.file.endswith(name))


def test_retries_and_a_sync_openai_stream_through_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """anthropic-sdk-python's recorded exchange: two 429s (x-should-retry: true), then the
    stream. The SDK retries; the plugin counts one call with two retried errors. The replay adds
    `retry-after-ms: 1` so the SDK does not back off for seconds. openai's sync Stream stops at
    [DONE] without reading on to EOF: the call is complete all the same (issue #14, item 1)."""
    limited = [_body(f"parse-stream-after-429s-{i}.json") for i in (0, 1)]
    stream, chat = _body("parse-stream-after-429s-2.sse"), _body("parse_nothing-e2aad469.sse")
    log: list[int] = []
    messages = [
        replay(
            b.pieces,
            [0.0],
            log,
            status=b.status,
            content_type="application/json",
            headers={**b.headers, "retry-after-ms": "1"},
        )
        for b in limited
    ]
    messages.append(replay(stream.pieces, stream.schedule(False), log))
    routes = {
        ROUTES["anthropic.messages"]: messages,
        ROUTES["openai.chat"]: [replay(chat.pieces, chat.schedule(False), log)],
    }
    monkeypatch.setenv("ANTHROPIC_API_KEY", "replay")
    monkeypatch.setenv("OPENAI_API_KEY", "replay")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner=INNER)
    with HostileServer(routes) as server:
        result = pytester.runpytest(
            f"--latency-anthropic-base-url={server.base_url}",
            f"--latency-openai-base-url={server.base_url}/v1",
            "--latency-json=result.json",
            "-p",
            "no:randomly",
        )
        assert server.served(ROUTES["anthropic.messages"]) == 3
    result.assert_outcomes(passed=1)
    entry = json.loads((pytester.path / "result.json").read_text())["tests"][0]
    assert (entry["call_count"], entry["error_count"], entry["retries"]) == (2, 0, 2)
    assert entry["retried_errors"] == {"http_429": 2}
    # Untimed, the replay sends every piece at once: a consumer slower than loopback finds them
    # buffered and may rightly be flagged consumer_bound (or cpu_starved on a busy machine, as
    # in CI). What this test holds is that no call is incomplete, opaque or capped.
    flags = entry["flags"]
    assert (flags["incomplete"], flags["opaque"], flags["capped"]) == (0, 0, 0), flags
    metrics = entry["metrics"]
    # One anthropic call (135 input, 10 output) and one openai call (14, 30).
    assert (metrics["input_tokens"]["min"], metrics["input_tokens"]["max"]) == (14, 135)
    assert (metrics["output_tokens"]["min"], metrics["output_tokens"]["max"]) == (10, 30)
    assert metrics["ttft"]["count"] == 2
