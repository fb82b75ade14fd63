"""Fuzz through capture (issue #15): random SSE framing (LF, CRLF or CR line ends, comments,
`event:` / `id:` / `retry:` fields, a data field split over lines, missing blank lines, a BOM),
random garbage lines and JSON, random usage values, the body cut at random byte positions into
reads, gzip or not, truncated anywhere, and ended by EOF, a transport error or a consumer that
stops, served by an `httpx2.MockTransport` to an instrumented httpx2 client, sync, async and with
read-ahead. Whatever arrives:

- no exception escapes but the one the transport raised, unchanged, to the reader;
- exactly one call is recorded and it is finished, with the bytes the consumer got, in order;
- its timing is kept: stamps in order, `ttfb` the headers' stamp, `ttft`/`ttfo` the arrival of a
  kept read, `e2e` within the call;
- its metrics hold test_metrics_fuzz's checks (one printable line per string, finite numbers,
  the plain-data round trip, time and peak memory within `bounded_metrics`' bounds); its error
  kind is the HTTP status, else the first error the body showed, else the transport's;
- what the record holds stays within its keep limit (fuzzed down to a few reads, to cap calls):
  the reads kept are charged their bytes and `READ_COST`, the notes `NOTE_COST`, and the
  record's real size (`retained`) is that charge and the request body, give or take 16 KiB;
- one 4 MiB line in 512 B reads goes through at least once.

tests/test_metrics_fuzz.py and test_metrics_sse.py fuzz `call_metrics` on records built by hand;
this drives the same bytes through the capture's stream wrappers first."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, fields
from typing import Any
from unittest import mock

import httpx2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_metrics_fuzz import HUGE_LINE_READS, PAYLOAD, TEXT, USAGE, bounded_metrics, check_call

from pytest_latency.capture import _stream, instrument
from pytest_latency.wire import KEEP_LIMIT, NOTE_COST, READ_COST, WireRecord

CHAT = "http://h/v1/chat/completions"
RESPONSES = "http://h/v1/responses"
MESSAGES = "http://h/v1/messages"


def _content(url: str, text: str) -> Any:
    if url == CHAT:
        return {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}}],
        }
    if url == RESPONSES:
        return {"type": "response.output_text.delta", "delta": text}
    return {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }


def _usage(url: str, usage: Any) -> Any:
    if url == CHAT:
        return {"object": "chat.completion.chunk", "choices": [], "usage": usage}
    if url == RESPONSES:
        return {"type": "response.completed", "response": {"usage": usage}}
    return {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage}


def _end(url: str) -> list[str]:
    if url == CHAT:
        return ["data: [DONE]"]
    if url == RESPONSES:
        return ['data: {"type": "response.completed", "response": {}}']
    return ["event: message_stop", 'data: {"type": "message_stop"}']


def _data(payload: Any) -> str:
    try:
        return "data: " + json.dumps(payload)  # NaN and inf as JSON's non-standard literals
    except ValueError:  # a circular or otherwise unencodable payload: not this test's subject
        return "data: {}"


# One SSE event, as its lines (without line ends), for the stream's API.
EVENT = st.one_of(
    st.tuples(st.just("content"), TEXT),
    st.tuples(st.just("usage"), USAGE),
    st.tuples(st.just("error"), TEXT, TEXT),
    st.tuples(st.just("end")),
    st.tuples(st.just("comment"), TEXT),
    st.tuples(st.just("field"), st.sampled_from(["event", "id", "retry", "x-what"]), TEXT),
    st.tuples(st.just("split data")),
    st.tuples(st.just("garbage"), st.binary(max_size=40)),
    st.tuples(st.just("json"), PAYLOAD),
)


def _lines(url: str, event: tuple[Any, ...]) -> list[bytes]:
    kind = event[0]
    if kind == "content":
        lines = [_data(_content(url, event[1]))]
    elif kind == "usage":
        lines = [_data(_usage(url, event[1]))]
    elif kind == "error":
        lines = [
            "event: error",
            _data({"type": "error", "error": {"type": event[1], "message": event[2]}}),
        ]
    elif kind == "end":
        lines = _end(url)
    elif kind == "comment":
        lines = [": " + event[1]]
    elif kind == "field":
        lines = [f"{event[1]}: {event[2]}"]
    elif kind == "split data":  # one JSON value over two data lines, joined by a newline
        lines = ['data: {"type": "content_block_delta",', 'data: "delta": {"text": "x"}}']
    elif kind == "garbage":  # any bytes but line ends, which would make it more than one line
        return [bytes(b for b in event[1] if b not in b"\r\n")]
    else:
        lines = [_data(event[1])]
    # Text lines: what TEXT drew may hold line ends itself (an injected extra line).
    return [line.encode("utf-8", "surrogatepass") for line in lines]


@dataclass
class Plan:
    url: str
    status: int
    gzip: bool
    pieces: list[bytes]  # the body as the transport yields it
    ending: str  # "eof", "error" (the transport raises after the pieces) or "break"
    stop_after: int  # "break": the consumer stops after this many chunks
    keep_limit: int = KEEP_LIMIT  # what the call's record may keep (wire.KEEP_LIMIT)


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    url = draw(st.sampled_from([CHAT, RESPONSES, MESSAGES]))
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    body = b"\xef\xbb\xbf" if draw(st.booleans()) else b""  # a BOM, which SSE allows
    for event in draw(st.lists(EVENT, max_size=12)):
        body += eol.join(_lines(url, event)) + eol
        if draw(st.integers(0, 9)):  # now and then no blank line: two events run together
            body += eol
    packed = draw(st.booleans())
    if packed:
        body = gzip.compress(body)
    if draw(st.booleans()):  # truncated anywhere, mid-line or mid-gzip-member
        body = body[: draw(st.integers(0, len(body)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=10)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    return Plan(
        url=url,
        status=draw(st.sampled_from([200, 200, 200, 429, 500])),
        gzip=packed,
        pieces=pieces,
        ending=draw(st.sampled_from(["eof", "eof", "error", "break"])),
        stop_after=draw(st.integers(0, 4)),
        keep_limit=draw(st.sampled_from([KEEP_LIMIT, KEEP_LIMIT, 0, READ_COST + 20, 600])),
    )


# One 4 MiB content line in 512 B reads, through the capture.
HUGE_LINE_PLAN = Plan(CHAT, 200, False, HUGE_LINE_READS, "eof", 0)


TRANSPORT_ERRORS = (httpx2.RemoteProtocolError, httpx2.ReadTimeout, httpx2.ReadError)


class Served:
    """The plan the mock transport serves next, and the exception it raised, if any."""

    plan: Plan
    raised: Exception | None = None

    def response(self, request: httpx2.Request, body: Any) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        if self.plan.gzip:
            headers["content-encoding"] = "gzip"
        return httpx2.Response(self.plan.status, headers=headers, content=body)

    def failure(self) -> Exception:
        kind = TRANSPORT_ERRORS[len(self.plan.pieces) % len(TRANSPORT_ERRORS)]
        self.raised = kind("the peer went away mid-body")
        return self.raised

    def sync(self, request: httpx2.Request) -> httpx2.Response:
        def body() -> Iterator[bytes]:
            yield from self.plan.pieces
            if self.plan.ending == "error":
                raise self.failure()

        return self.response(request, body())

    async def asynchronous(self, request: httpx2.Request) -> httpx2.Response:
        async def body() -> AsyncIterator[bytes]:
            for piece in self.plan.pieces:
                yield piece
            if self.plan.ending == "error":
                raise self.failure()

        return self.response(request, body())


REQUEST = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "q"}]}


class Consumer:
    """What the test body got: the chunks it read, and what reading raised at it."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self.received: list[bytes] = []
        self.escaped: BaseException | None = None

    def take(self, chunk: bytes) -> bool:
        """Keep `chunk`; whether the consumer stops reading now."""
        self.received.append(chunk)
        return self._plan.ending == "break" and len(self.received) >= self._plan.stop_after


def _read_sync(client: httpx2.Client, plan: Plan) -> Consumer:
    consumer = Consumer(plan)
    try:
        with client.stream("POST", plan.url, json=REQUEST) as response:
            for chunk in response.iter_raw():
                if consumer.take(chunk):
                    break
    except Exception as exc:
        consumer.escaped = exc
    return consumer


async def _read_async(client: httpx2.AsyncClient, plan: Plan) -> Consumer:
    consumer = Consumer(plan)
    try:
        async with client.stream("POST", plan.url, json=REQUEST) as response:
            async for chunk in response.aiter_raw():
                if consumer.take(chunk):
                    break
    except Exception as exc:
        consumer.escaped = exc
    return consumer


@contextlib.contextmanager
def _keeping(limit: int) -> Iterator[None]:
    """Records started meanwhile keep at most `limit` (wire.KEEP_LIMIT's stand-in)."""
    start = _stream.start_record

    def small(*args: Any, **kwargs: Any) -> WireRecord:
        record = start(*args, **kwargs)
        record.keep_limit = limit
        return record

    with mock.patch.object(_stream, "start_record", small):
        yield


def retained(record: WireRecord) -> int:
    """What the record holds, in CPython object sizes: it, its fields, and their lists' and
    tuples' items (a shared object counted once)."""
    seen: set[int] = set()
    total = 0
    stack: list[object] = [record, *(getattr(record, f.name) for f in fields(record))]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, list | tuple):
            stack.extend(obj)
    return total


def _check_kept(record: WireRecord) -> None:
    """The record holds what its keep limit allows: the reads' bytes and `READ_COST` each, the
    absence notes' `NOTE_COST` each (the read that crossed the limit was noted before it was
    found not to fit), and its real size is that charge with the request body, within 16 KiB."""
    notes = len(record.read_cpu) + len(record.queued) + len(record.paused) + len(record.ready)
    charged = sum(len(data) + READ_COST for _, _, data in record.reads) + NOTE_COST * notes
    assert charged <= record.keep_limit + 4 * NOTE_COST, (charged, record.keep_limit)
    size = retained(record)
    assert size <= charged + len(record.request_body) + 16 * 1024, (size, charged)


def _check(
    plan: Plan, served: Served, records: list[WireRecord], consumer: Consumer, *, read_ahead: bool
) -> None:
    # Nothing escapes but what the transport raised, as itself.
    assert consumer.escaped is served.raised, (consumer.escaped, served.raised)
    assert len(records) == 1, records
    record = records[0]
    assert record.t_eof_ns is not None or record.t_closed_ns is not None or record.error
    assert record.status == plan.status and record.t_headers_ns is not None
    _check_kept(record)
    kept = b"".join(data for _, _, data in record.reads)
    got = b"".join(consumer.received)
    # What the consumer got is what was kept, in order (read-ahead may have read on), and past
    # the keep limit what was not kept is counted.
    if record.capped:
        assert read_ahead or len(kept) + record.dropped_bytes == len(got), (kept, got)
    else:
        assert kept.startswith(got) if read_ahead else kept == got, (kept, got)
    assert kept == b"".join(plan.pieces)[: len(kept)]
    stamps = [record.t_start_ns, record.t_headers_ns]
    for asked, arrived, _ in record.reads:
        assert asked <= arrived
        stamps.append(arrived)
    assert stamps == sorted(stamps), stamps
    metrics = bounded_metrics(record)
    check_call(metrics)
    assert metrics.ttfb == (record.t_headers_ns - record.t_start_ns) / 1000
    arrivals = {(arrived - record.t_start_ns) / 1000 for _, arrived, _ in record.reads}
    for name in ("ttft", "ttfo"):
        value = getattr(metrics, name)
        assert value is None or value in arrivals, (name, value, sorted(arrivals))
    if metrics.e2e is not None:
        assert metrics.e2e >= metrics.ttfb
        assert metrics.ttft is None or metrics.e2e >= metrics.ttft
    if plan.status >= 400:  # the status says it first, whatever the body did
        assert metrics.error == f"http_{plan.status}"
    elif served.raised is not None:  # unless the body showed an error first
        assert metrics.error is not None
        shown = metrics.error.startswith(("sse_error:", "body_error:"))
        assert shown or metrics.error == type(served.raised).__name__, metrics.error


FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(plan=plans(), read_ahead=st.booleans())
@example(plan=HUGE_LINE_PLAN, read_ahead=False)
def test_random_streams_through_the_sync_capture(plan: Plan, read_ahead: bool) -> None:
    served = Served()
    served.plan = plan
    records: list[WireRecord] = []
    with (
        _keeping(plan.keep_limit),
        instrument(
            httpx2.Client(transport=httpx2.MockTransport(served.sync)),
            sink=records.append,
            read_ahead=read_ahead,
        ) as client,
    ):
        consumer = _read_sync(client, plan)
    _check(plan, served, records, consumer, read_ahead=read_ahead)


@FUZZ
@given(plan=plans(), read_ahead=st.booleans())
@example(plan=HUGE_LINE_PLAN, read_ahead=True)
def test_random_streams_through_the_async_capture(plan: Plan, read_ahead: bool) -> None:
    served = Served()
    served.plan = plan
    records: list[WireRecord] = []

    async def run() -> Consumer:
        async with instrument(
            httpx2.AsyncClient(transport=httpx2.MockTransport(served.asynchronous)),
            sink=records.append,
            read_ahead=read_ahead,
        ) as client:
            return await _read_async(client, plan)

    with _keeping(plan.keep_limit):
        consumer = asyncio.run(run())
    _check(plan, served, records, consumer, read_ahead=read_ahead)
