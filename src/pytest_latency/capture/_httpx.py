"""Capture's binding for httpx2 and legacy httpx: their transports and byte streams, wrapped.

Owns the wrapper classes and the auto-capture patch of the libraries' default transports. The
two libraries share one API shape, so one set of typed mixins (module-level classes below, typed
against the Protocols of that shape) serves both. But a wrapper must also be an instance of its
library's own base classes: the SDKs' isinstance checks are strict, and a Response refuses a
stream of the other kind. So `bindings(library)` binds each mixin to that library's base class
(mixin first, so its methods win), once per library, on first use. Neither library is imported
until then, and then by name (`importlib`), so a missing legacy httpx costs nothing.

What is not about httpx's objects (stamping, read-ahead, the loop monitor) is in `_stream`.

May import `wire`, `untrusted`, `attribution`, `capture._stream` and `capture._queued`; never
pytest, the SDKs, or another binding. httpx2 and httpx only through `importlib`, when a wrapper for
them is asked for.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    MutableMapping,
)
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar, cast

from pytest_latency.attribution import CAPTURING, Sink, route
from pytest_latency.capture import _stream
from pytest_latency.capture._queued import Framing, framing_of
from pytest_latency.capture._stream import Clock, Headers
from pytest_latency.untrusted import header_secrets
from pytest_latency.wire import WireRecord

LIBRARIES = ("httpx2", "httpx")

# Request extension set by a wrapper, so auto-capture underneath it does not record twice.
CAPTURED = "pytest_latency.captured"


# ---- the API shape httpx2 and httpx share (only what the wrappers touch) -------------------------


class _URL(Protocol):
    @property
    def scheme(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int | None: ...
    @property
    def path(self) -> str: ...


class Request(Protocol):
    @property
    def method(self) -> str: ...
    @property
    def url(self) -> _URL: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def content(self) -> bytes: ...  # raises for a streaming body that was not read
    @property
    def extensions(self) -> MutableMapping[str, object]: ...


class SyncStream(Protocol):
    def __iter__(self) -> Iterator[bytes]: ...
    def close(self) -> None: ...


class AsyncStream(Protocol):
    def __aiter__(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...


class _Response(Protocol):
    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def content(self) -> bytes: ...  # only once read: see _note_response
    @property
    def extensions(self) -> MutableMapping[str, object]: ...


class SyncResponse(_Response, Protocol):
    stream: SyncStream


class AsyncResponse(_Response, Protocol):
    stream: AsyncStream


class SyncTransport(Protocol):
    def handle_request(self, request: Request) -> SyncResponse: ...
    def close(self) -> None: ...


class AsyncTransport(Protocol):
    async def handle_async_request(self, request: Request) -> AsyncResponse: ...
    async def aclose(self) -> None: ...


# ---- from httpx's objects to the record ----------------------------------------------------------


def _start_record(request: Request, clock: Clock) -> WireRecord:
    url = request.url
    try:
        body = bytes(request.content)
    except Exception:  # a streaming request body that was not read: nothing to parse later
        body = b""
    return _stream.start_record(
        request.method,
        _stream.url_without_query(url.scheme, url.host, url.port, url.path),
        body,
        _stream.attempt_number(request.headers.get(_stream.RETRY_COUNT_HEADER, "0")),
        clock,
    )


def _note_response(record: WireRecord, response: _Response, clock: Clock) -> bool:
    """Note the head; return True when the body is already in memory (nothing left to time)."""
    headers = response.headers
    _stream.note_headers(
        record,
        clock(),
        response.status_code,
        headers.get("content-type", ""),
        headers.get("content-encoding", ""),
    )
    # A Response built with content=/json= (mocks, caching layers) has read its body already.
    if hasattr(response, "_content"):
        _stream.note_prefetched(record, response.content, clock)
        return True
    return False


def _socket_of(
    response: SyncResponse | AsyncResponse, record: WireRecord
) -> tuple[object, Framing]:
    """The socket the response is read from, where the transport says (httpcore's
    `network_stream` extension; None otherwise: a mock, another transport), and how it carries
    the body."""
    version = response.extensions.get("http_version")  # httpcore's, b"HTTP/1.1"
    stream = response.extensions.get("network_stream")
    get_extra_info = getattr(stream, "get_extra_info", None)
    if get_extra_info is None:
        return None, Framing.OPAQUE
    try:
        sock, tls = get_extra_info("socket"), get_extra_info("ssl_object") is not None
    except Exception:  # a stream of another make: the passes alone bound its stamps
        return None, Framing.OPAQUE
    headers = response.headers
    return sock, framing_of(
        record.url,
        tls=tls,
        http1=isinstance(version, bytes) and version.startswith(b"HTTP/1"),
        content_encoding=headers.get("content-encoding", ""),
        transfer_encoding=headers.get("transfer-encoding", ""),
    )


def _held_of(response: SyncResponse) -> Callable[[], bytes] | None:
    """What reads the bytes httpcore's HTTP/1.1 connection has taken off the socket and not yet
    handed on (its h11 connection's `trailing_data`), where the response came through httpcore's
    pool (the stream's private chain, the same in httpcore and httpcore2; None for any other
    make: then the socket's bytes alone are counted)."""
    stream: object = response.stream
    try:  # another make's attributes may raise anything
        for name in ("_httpcore_stream", "_stream", "_connection", "_h11_state"):
            stream = getattr(stream, name, None)
            if stream is None:
                return None
    except Exception:
        return None
    if not isinstance(getattr(type(stream), "trailing_data", None), property):
        return None
    h11_connection = stream  # bound for the closure: the loop above rebinds `stream`

    def held() -> bytes:
        data, _ = h11_connection.trailing_data  # type: ignore[attr-defined]  # h11's property
        return bytes(data)

    return held


# ---- the stream mixins: `_stream`'s bodies, closing the library's stream -------------------------


class TimedStream(_stream.TimedBody):
    """A sync body stamped as the consumer reads it."""

    def __init__(self, inner: SyncStream, record: WireRecord, clock: Clock) -> None:
        super().__init__(inner, record, clock)
        self._inner = inner

    def close(self) -> None:
        super().close()
        self._inner.close()


class TimedAsyncStream(_stream.AsyncTimedBody):
    """An async body stamped as the consumer reads it."""

    def __init__(self, inner: AsyncStream, record: WireRecord, clock: Clock) -> None:
        super().__init__(inner, record, clock)
        self._inner = inner

    async def aclose(self) -> None:
        await super().aclose()
        await self._inner.aclose()


class ReadAheadStream(_stream.ReadAhead):
    """A sync body read in a thread as it arrives."""

    def __init__(self, inner: SyncStream, record: WireRecord, clock: Clock) -> None:
        super().__init__(inner, record, clock)
        self._inner = inner

    def close(self) -> None:
        super().close()
        self._inner.close()


class ReadAheadAsyncStream(_stream.AsyncReadAhead):
    """An async body read by a task on the request's loop as it arrives."""

    def __init__(self, inner: AsyncStream, record: WireRecord, clock: Clock) -> None:
        super().__init__(inner, record, clock)
        self._inner = inner

    async def aclose(self) -> None:
        await super().aclose()
        await self._inner.aclose()


# ---- the transport mixins ------------------------------------------------------------------------

_Inner = TypeVar("_Inner", SyncTransport, AsyncTransport)


class _Wrapper(Generic[_Inner]):
    """What a sync and an async wrapper share: the transport wrapped and where records go."""

    def __init__(
        self,
        inner: _Inner,
        sink: Sink = route,
        clock: Clock = time.perf_counter_ns,
        read_ahead: bool = False,
    ) -> None:
        self.inner: _Inner = inner
        self._sink = sink
        self._clock = clock
        self._read_ahead = read_ahead


class LatencyTransport(_Wrapper[SyncTransport]):
    """Wraps any sync transport of its library; records every attempt through `sink`."""

    # This library's stream classes, set by `bindings`.
    timed_stream: ClassVar[type[TimedStream]]
    read_ahead_stream: ClassVar[type[ReadAheadStream]]

    def handle_request(self, request: Request) -> SyncResponse:
        request.extensions[CAPTURED] = True
        clock = self._clock
        record = _start_record(request, clock)
        self._sink(record)
        token = CAPTURING.set(True)
        try:
            response = self.inner.handle_request(request)
        except Exception as exc:
            _stream.note_error(record, exc, clock, header_secrets(request.headers.values()))
            raise
        finally:
            CAPTURING.reset(token)
        if not _note_response(record, response, clock):
            if self._read_ahead:
                response.stream = self.read_ahead_stream(response.stream, record, clock)
            else:
                timed = self.timed_stream(response.stream, record, clock)
                sock, framing = _socket_of(response, record)
                # Its queued bytes are this body's alone and as the server wrote them: not
                # HTTP/2's (its frames interleave streams and control), nor TLS's (no byte of a
                # record can be read until all of it is there), nor, to keep to one rule, a
                # coded body's.
                if framing.in_the_clear:
                    timed.watch_socket(sock, framing, _held_of(response))
                response.stream = timed
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncLatencyTransport(_Wrapper[AsyncTransport]):
    """Wraps any async transport of its library; records every attempt through `sink`."""

    timed_async_stream: ClassVar[type[TimedAsyncStream]]
    read_ahead_async_stream: ClassVar[type[ReadAheadAsyncStream]]

    async def handle_async_request(self, request: Request) -> AsyncResponse:
        request.extensions[CAPTURED] = True
        clock = self._clock
        record = _start_record(request, clock)
        self._sink(record)
        _stream.watch_loop(record, clock)
        token = CAPTURING.set(True)
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException as exc:
            _stream.note_error(record, exc, clock, header_secrets(request.headers.values()))
            raise
        finally:
            CAPTURING.reset(token)
        if not _note_response(record, response, clock):
            # anyio's socket streams stop reading after each receive until the next: what
            # arrives meanwhile waits in the kernel, unseen by the loop's passes.
            sock, framing = _socket_of(response, record)
            if not _stream.fed_by_protocol(sock):
                # Read in the consumer's own task (anyio's Unix socket stream, a test double's
                # body): stamped in the pass that read it, not a pass after a callback's read.
                record.stamp_passes = 0
            _stream.watch_socket(record, sock, framing, every_pass=True)
            stream = self.read_ahead_async_stream if self._read_ahead else self.timed_async_stream
            response.stream = stream(response.stream, record, clock)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


# ---- one library's classes -----------------------------------------------------------------------

_Mixin = TypeVar("_Mixin")


@dataclass(frozen=True, slots=True)
class Bindings:
    """One library's wrapper classes and the library classes they are told apart by."""

    base_transport: type[object]
    async_base_transport: type[object]
    transport: type[LatencyTransport]
    async_transport: type[AsyncLatencyTransport]
    # For transports that are both (MockTransport, user test doubles): a subclass of both above.
    dual_transport: type[LatencyTransport]
    # The default transports auto-capture patches.
    http_transport: type[object]
    async_http_transport: type[object]


def _bind(
    library: str,
    mixin: type[_Mixin],
    *bases: type[object],
    name: str = "",
    **attrs: object,
) -> type[_Mixin]:
    """A subclass of `mixin` and `bases` (the mixin first, so its methods win)."""
    name = name or mixin.__name__
    cls = type(name, (mixin, *bases), dict(attrs))
    cls.__module__ = __name__
    cls.__qualname__ = f"{name}[{library}]"
    return cast("type[_Mixin]", cls)  # type() is typed as returning `type`


@functools.cache
def bindings(library: str) -> Bindings:
    mod = importlib.import_module(library)
    sync_stream: type[object] = mod.SyncByteStream
    async_stream: type[object] = mod.AsyncByteStream
    transport = _bind(
        library,
        LatencyTransport,
        mod.BaseTransport,
        timed_stream=_bind(library, TimedStream, sync_stream),
        read_ahead_stream=_bind(library, ReadAheadStream, sync_stream),
    )
    async_transport = _bind(
        library,
        AsyncLatencyTransport,
        mod.AsyncBaseTransport,
        timed_async_stream=_bind(library, TimedAsyncStream, async_stream),
        read_ahead_async_stream=_bind(library, ReadAheadAsyncStream, async_stream),
    )
    return Bindings(
        base_transport=mod.BaseTransport,
        async_base_transport=mod.AsyncBaseTransport,
        transport=transport,
        async_transport=async_transport,
        dual_transport=_bind(library, transport, async_transport, name="DualLatencyTransport"),
        http_transport=mod.HTTPTransport,
        async_http_transport=mod.AsyncHTTPTransport,
    )


def loaded_libraries(obj: object) -> list[str]:
    """The HTTP libraries `obj` is a transport of, among those already imported by someone.

    Told by isinstance against each library's base classes: class names and `__module__` are not
    reliable (openai re-exports httpx2's transport classes under its own module name).
    """
    found = []
    for library in LIBRARIES:
        mod = sys.modules.get(library)
        if mod is not None and isinstance(obj, (mod.BaseTransport, mod.AsyncBaseTransport)):
            found.append(library)
    return found


def wrap(
    inner: object, sink: Sink, clock: Clock, read_ahead: bool
) -> LatencyTransport | AsyncLatencyTransport | None:
    """`inner` wrapped by its library's wrapper class; None when it is no httpx2/httpx transport."""
    for library in loaded_libraries(inner):
        b = bindings(library)
        is_sync = isinstance(inner, b.base_transport)
        is_async = isinstance(inner, b.async_base_transport)
        if is_sync and is_async:
            return b.dual_transport(cast(SyncTransport, inner), sink, clock, read_ahead)
        if is_async:
            return b.async_transport(cast(AsyncTransport, inner), sink, clock, read_ahead)
        if is_sync:
            return b.transport(cast(SyncTransport, inner), sink, clock, read_ahead)
    return None


def is_wrapper(obj: object) -> bool:
    return isinstance(obj, (LatencyTransport, AsyncLatencyTransport))


# ---- auto-capture ------------------------------------------------------------------------------


class _UnpatchedSync:
    """Presents one default transport's original method as a transport, for a wrapper to
    delegate to."""

    def __init__(
        self, transport: object, original: Callable[[object, Request], SyncResponse]
    ) -> None:
        self._transport = transport
        self._original = original

    def handle_request(self, request: Request) -> SyncResponse:
        return self._original(self._transport, request)

    def close(self) -> None:  # never called: the client closes its transport itself
        pass


class _UnpatchedAsync:
    """The async `_UnpatchedSync`."""

    def __init__(
        self, transport: object, original: Callable[[object, Request], Awaitable[AsyncResponse]]
    ) -> None:
        self._transport = transport
        self._original = original

    async def handle_async_request(self, request: Request) -> AsyncResponse:
        return await self._original(self._transport, request)

    async def aclose(self) -> None:  # never called: the client closes its transport itself
        pass


def patch_default_transports(
    library: str, sink: Sink, clock: Clock, read_ahead: bool
) -> Callable[[], None]:
    """Record every request through `library`'s `HTTPTransport` and `AsyncHTTPTransport`.

    Patched at class level, so clients built anywhere (inside SDKs, by the test) are covered; a
    request that passed a wrapper already (marked `CAPTURED`) is not recorded twice. Returns the
    function that removes the patches.
    """
    b = bindings(library)
    sync_cls, async_cls = b.http_transport, b.async_http_transport
    original: Callable[[object, Request], SyncResponse] = sync_cls.__dict__["handle_request"]
    async_original: Callable[[object, Request], Awaitable[AsyncResponse]] = async_cls.__dict__[
        "handle_async_request"
    ]
    wrapper, async_wrapper = b.transport, b.async_transport

    def handle_request(self: object, request: Request) -> SyncResponse:
        if request.extensions.get(CAPTURED):
            return original(self, request)
        inner = _UnpatchedSync(self, original)
        return wrapper(inner, sink, clock, read_ahead).handle_request(request)

    async def handle_async_request(self: object, request: Request) -> AsyncResponse:
        if request.extensions.get(CAPTURED):
            return await async_original(self, request)
        inner = _UnpatchedAsync(self, async_original)
        return await async_wrapper(inner, sink, clock, read_ahead).handle_async_request(request)

    setattr(sync_cls, "handle_request", handle_request)  # noqa: B010 (a patch, on purpose)
    setattr(async_cls, "handle_async_request", handle_async_request)  # noqa: B010

    def restore() -> None:
        setattr(async_cls, "handle_async_request", async_original)  # noqa: B010
        setattr(sync_cls, "handle_request", original)  # noqa: B010

    return restore
