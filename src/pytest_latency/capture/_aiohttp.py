"""Capture's binding for aiohttp: a client middleware per attempt, a timed body per response.

Owns how an aiohttp `ClientSession` request becomes a `WireRecord`. aiohttp (>= 3.12) runs its
client middlewares once per attempt (each redirect hop), inside the caller's task, so the
attribution of `attribution.route` holds. `LatencyMiddleware`, placed last in the chain so that it
times what the connection did rather than what other middlewares (auth refresh, retries) added,
stamps the start before the connection is acquired and the head when the response starts, and
times the body.

The body is timed where aiohttp delivers it, not where the consumer reads it: the protocol calls
`StreamReader.feed_data` from the event loop as each piece of the body is parsed (decompressed,
when the session decompresses). Consumers read through a dozen methods (`iter_chunked`,
`readline`, `readany`, `async for line in content`, ...), the parser feeds through one. So each
response's reader gets its class swapped for a subclass whose `feed_data`, `feed_eof` and
`set_exception` stamp the record before doing what aiohttp does. The stamps are arrivals whatever
the consumer does, as with read-ahead (`WireRecord.read_ahead`); a consumer that blocks the loop
delays them, and the loop lag monitor (`_stream.watch_loop`) sees that. `StreamReader` has
`__slots__`, so the per-response state cannot live on the instance: each response gets its own
subclass, with no slots of its own (the layout `__class__` assignment requires), holding the
state as a class attribute (~10 us and 1.5 kB per response, freed with it by the cyclic
collector).

Auto-capture patches `ClientSession._request` at class level to append the middleware to the
request's effective middlewares; `instrument(session)` appends it to the session's own. Inside an
httpx transport that is itself captured (openai's `DefaultAioHttpClient`, litellm's aiohttp
transport) the middleware stands aside (`CAPTURING`): the call is recorded once.

May import `wire`, `untrusted`, `attribution`, `capture._stream` and `capture._queued`; never
pytest, the SDKs, or another binding. aiohttp only through `importlib`, when a wrapper for it is
asked for.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, cast

from pytest_latency.attribution import CAPTURING, Sink, route
from pytest_latency.capture import _stream
from pytest_latency.capture._queued import framing_of
from pytest_latency.capture._stream import Clock, Headers
from pytest_latency.untrusted import header_secrets
from pytest_latency.wire import READ_COST, WireRecord

LIBRARY = "aiohttp"


# ---- the API shape of aiohttp's objects (only what the binding touches) --------------------------


class _URL(Protocol):  # yarl.URL
    @property
    def scheme(self) -> str: ...
    @property
    def host(self) -> str | None: ...
    @property
    def explicit_port(self) -> int | None: ...
    @property
    def path(self) -> str: ...


class Request(Protocol):  # aiohttp.ClientRequest
    @property
    def method(self) -> str: ...
    @property
    def url(self) -> _URL: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def body(self) -> object: ...


class Response(Protocol):  # aiohttp.ClientResponse
    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> Headers: ...

    content: object  # aiohttp.StreamReader


Handler = Callable[[Request], Awaitable[Response]]


# ---- the body --------------------------------------------------------------------------------


class _Body:
    """What one response's timed reader keeps: its record, its reads, its clock and the keep
    limit's room."""

    __slots__ = ("clock", "probe", "reads", "record", "room")

    def __init__(self, record: WireRecord, clock: Clock) -> None:
        self.record = record
        self.reads = record.reads
        self.clock = clock
        self.room = record.keep_limit
        # The loop monitor's mid-pass probe, called with each read's stamp (`_stream.prober`).
        self.probe = _stream.prober(record)

    def arrived(self, data: bytes) -> None:
        """One piece of the body that arrived before the reader was timed (with the head)."""
        now = self.clock()
        self.room -= len(data) + READ_COST
        if self.room >= 0:
            self.reads.append((now, now, data))
        else:
            self.room = _stream.keep_read(self.record, self.room, now, now, data)


class _TimedReader:
    """The methods a response's reader class gets, ahead of aiohttp's `StreamReader` (see the
    module docstring). `_latency` is the class attribute of each response's own subclass,
    `_feed` aiohttp's own `feed_data` (called directly: `super()` with its arguments cost
    ~0.2 us a chunk, a third of the binding's cost against a plain aiohttp loop)."""

    __slots__ = ()
    _latency: _Body
    _feed: Callable[..., Any]

    def feed_data(self, data: bytes, size: int = 0) -> Any:
        # The hot path, inlined: one clock read, the keep limit's test, one append.
        body = self._latency
        now = body.clock()
        if body.probe is not None:
            body.probe(now)
        kept = data if type(data) is bytes else bytes(data)  # a view must not pin its buffer
        room = body.room = body.room - len(kept) - READ_COST
        if room >= 0:
            body.reads.append((now, now, kept))
        else:
            body.room = _stream.keep_read(body.record, room, now, now, kept)
        return self._feed(self, data, size)

    def feed_eof(self) -> None:
        body = self._latency
        if body.record.t_eof_ns is None:
            body.record.t_eof_ns = body.clock()
        super().feed_eof()  # type: ignore[misc]

    def set_exception(self, exc: BaseException, *args: Any) -> None:
        body = self._latency
        record = body.record
        # The response closed or released (by the consumer, or after its end) fails the reader
        # with one shared "Connection closed" error: that is the close, not a failure.
        if exc is _closed_error() or record.t_eof_ns is not None:
            _stream.note_closed(record, body.clock)
        else:
            _stream.note_error(record, exc, body.clock)
        super().set_exception(exc, *args)  # type: ignore[misc]


def _closed_error() -> object:
    reqrep = sys.modules.get("aiohttp.client_reqrep")
    return getattr(reqrep, "_CONNECTION_CLOSED_EXCEPTION", None)


@dataclass(frozen=True, slots=True)
class Bindings:
    """aiohttp's classes the binding is told apart by, and the base of the timed readers."""

    session: type[object]
    stream_reader: type[object]
    empty_reader: type[object]
    bytes_payload: type[object]
    timed_reader: type[object]


@functools.cache
def bindings() -> Bindings:
    aiohttp = importlib.import_module(LIBRARY)
    streams = importlib.import_module("aiohttp.streams")
    payload = importlib.import_module("aiohttp.payload")
    reader: type[object] = streams.StreamReader
    timed = type(
        "TimedStreamReader",
        (_TimedReader, reader),
        {"__slots__": (), "_feed": staticmethod(streams.StreamReader.feed_data)},
    )
    timed.__module__ = __name__
    return Bindings(
        session=aiohttp.ClientSession,
        stream_reader=reader,
        empty_reader=streams.EmptyStreamReader,
        bytes_payload=payload.BytesPayload,
        timed_reader=timed,
    )


def _time_body(content: object, record: WireRecord, clock: Clock) -> None:
    """Stamp `content` (the response's reader) from now on; what it holds already arrived with
    the head."""
    b = bindings()
    if isinstance(content, b.empty_reader) or not isinstance(content, b.stream_reader):
        record.t_eof_ns = record.t_headers_ns  # a body-less response (HEAD, 204)
        return
    body = _Body(record, clock)
    reader = cast(Any, content)
    buffered = list(reader._buffer)
    if buffered:  # parsed in the same loop pass as the head
        offset = reader._buffer_offset
        buffered[0] = buffered[0][offset:]
        body.arrived(b"".join(buffered))
    if reader._eof:
        record.t_eof_ns = record.t_headers_ns
    exc = reader.exception()
    if exc is not None:
        _stream.note_error(record, exc, clock)
    own = type(b.timed_reader.__name__, (b.timed_reader,), {"__slots__": (), "_latency": body})
    own.__module__ = __name__
    reader.__class__ = own


# ---- the middleware ------------------------------------------------------------------------------


async def _request_body(request: Request) -> bytes:
    body = request.body
    if isinstance(body, bindings().bytes_payload):  # json=, data=bytes/str: already in memory
        as_bytes = getattr(body, "as_bytes", None)
        if as_bytes is not None:
            return bytes(await as_bytes())
        return bytes(getattr(body, "_value", b""))
    return b""  # a streamed upload: nothing to parse later


class LatencyMiddleware:
    """An aiohttp client middleware that records every attempt through `sink`.

    `decompressed` says whether the session inflates bodies before its reader sees them
    (aiohttp's `auto_decompress`, on by default): then the reads are the decoded body.
    """

    def __init__(
        self,
        sink: Sink = route,
        clock: Clock = time.perf_counter_ns,
        *,
        decompressed: bool = True,
    ) -> None:
        self._sink = sink
        self._clock = clock
        self._decompressed = decompressed

    async def __call__(self, request: Request, handler: Handler) -> Response:
        if CAPTURING.get():  # an httpx transport on aiohttp, captured already
            return await handler(request)
        clock = self._clock
        url = request.url
        record = _stream.start_record(
            request.method,
            _stream.url_without_query(url.scheme, url.host or "", url.explicit_port, url.path),
            await _request_body(request),
            _stream.attempt_number(request.headers.get(_stream.RETRY_COUNT_HEADER, "0")),
            clock,
        )
        record.read_ahead = True  # stamped as it arrives (the module docstring)
        record.stamp_passes = 0  # in the protocol's callback, the pass that read the socket
        self._sink(record)
        _stream.watch_loop(record, clock)
        token = CAPTURING.set(True)  # its connection is captured (`audit`)
        try:
            response = await handler(request)
        except BaseException as exc:
            _stream.note_error(record, exc, clock, header_secrets(request.headers.values()))
            raise
        finally:
            CAPTURING.reset(token)
        headers = response.headers
        _stream.note_headers(
            record,
            clock(),
            response.status,
            headers.get("Content-Type", ""),
            "" if self._decompressed else headers.get("Content-Encoding", ""),
        )
        _time_body(response.content, record, clock)
        transport = getattr(getattr(response, "connection", None), "transport", None)
        get_extra_info = getattr(transport, "get_extra_info", None)
        # None once the connection is gone (a body read whole with the head).
        if get_extra_info is not None:
            framing = framing_of(
                record.url,
                tls=get_extra_info("ssl_object") is not None,
                http1=True,  # aiohttp's client speaks HTTP/1 only
                content_encoding=headers.get("Content-Encoding", ""),
                transfer_encoding=headers.get("Transfer-Encoding", ""),
            )
            _stream.watch_socket(record, get_extra_info("socket"), framing)
        return response


def is_middleware(obj: object) -> bool:
    return isinstance(obj, LatencyMiddleware)


# ---- sessions ------------------------------------------------------------------------------------


class _SessionInternals(Protocol):
    _middlewares: Sequence[object]
    _auto_decompress: bool


def loaded() -> ModuleType | None:
    return sys.modules.get(LIBRARY)


def is_session(obj: object) -> bool:
    """`obj` is an aiohttp `ClientSession` (only if someone imported aiohttp already)."""
    return loaded() is not None and isinstance(obj, bindings().session)


def _supports_middlewares(session_cls: type[object]) -> bool:
    return "_middlewares" in getattr(session_cls, "ATTRS", ()) or hasattr(
        session_cls, "_middlewares"
    )


def instrument_session(session: Any, sink: Sink, clock: Clock) -> None:
    """Record every request `session` makes: the middleware appended to its own, in place."""
    internals = cast(_SessionInternals, session)
    if not _supports_middlewares(type(session)):
        raise TypeError("capturing an aiohttp ClientSession needs aiohttp >= 3.12 (middlewares)")
    if any(is_middleware(m) for m in internals._middlewares):
        return
    middleware = LatencyMiddleware(sink, clock, decompressed=internals._auto_decompress)
    internals._middlewares = (*internals._middlewares, middleware)


def patch_sessions(sink: Sink, clock: Clock) -> Callable[[], None]:
    """Record every request any `ClientSession` makes: `_request` patched at class level to
    append the middleware to the request's effective middlewares (a request's own `middlewares=`
    replaces the session's in aiohttp, so both are looked at). Returns the undo."""
    session_cls = bindings().session
    if not _supports_middlewares(session_cls):
        return lambda: None  # aiohttp < 3.12: nothing to hook into; the audit names what escapes
    original: Callable[..., Awaitable[object]] = session_cls.__dict__["_request"]

    async def _request(self: Any, method: str, str_or_url: object, **kwargs: Any) -> object:
        own = kwargs.get("middlewares")
        chain: Sequence[object] = self._middlewares if own is None else own
        if not any(is_middleware(m) for m in chain):
            decompress = kwargs.get("auto_decompress")
            middleware = LatencyMiddleware(
                sink,
                clock,
                decompressed=self._auto_decompress if decompress is None else bool(decompress),
            )
            kwargs["middlewares"] = (*chain, middleware)
        return await original(self, method, str_or_url, **kwargs)

    functools.update_wrapper(_request, original)
    setattr(session_cls, "_request", _request)  # noqa: B010 (a patch, on purpose)

    def restore() -> None:
        setattr(session_cls, "_request", original)  # noqa: B010

    return restore
