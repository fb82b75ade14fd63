"""Capture: transport wrappers for `httpx2` and legacy `httpx`, sync and async.

Owns the hot path. A wrapper stamps the request start, the response headers, and each body chunk
as the consumer receives it (two clock reads and one append per chunk: the clock read taken when
the consumer asks for the next chunk is what lets `metrics` tell a server-paced stream from a
consumer-paced one). Nothing is parsed here; `metrics` does that after the call.

The SDKs run on httpx2 (anthropic >= 1.0, openai >= 3.0) and their isinstance checks are strict,
so the wrapper classes are built once per HTTP library from that library's own base classes.
Neither library is imported until a wrapper for it is asked for.

Client saturation: when an async request starts, `_watch_loop` makes sure a lag monitor runs on
that request's event loop while captured calls are in flight there. The monitor is one task per
loop that sleeps `LAG_TICK_NS` at a time and logs how late each wake-up is into a `LoopLag` the
in-flight records share; `metrics` reads the worst lateness within each call's window. It costs
the hot path nothing per chunk (one dict lookup and one append per request), stops by itself
once every call it watches has ended, and is cancelled like any other task when its loop shuts
down (asyncio.run, pytest-asyncio), so it never keeps a loop alive. The monitors live in
`_MONITORS`, a `WeakKeyDictionary` keyed by the loop: the one piece of module-level state here,
because a loop is shared by every client and transport on it (auto-capture builds a wrapper per
request) and nothing else they all own outlives a request. An entry dies with its loop, holds no
reference to the loop or a test, and holds records only while they are in flight.

May import `wire` and `attribution`; never pytest, never the SDKs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import queue
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pytest_latency.attribution import Sink, route
from pytest_latency.wire import LoopLag, WireRecord

Clock = Callable[[], int]

# The loop monitor's sleep. Saturation is flagged at 50 ms of lag, which a 10 ms tick resolves;
# a faster tick (2 ms was tried) wakes the loop so often that it shows in the very timings it
# guards: async ITL error p50 rose from 0.02 to 0.2 ms against the simulator's truth.
LAG_TICK_NS = 10_000_000
# Every this many ticks (50 ms) the monitor drops the calls that have ended; with none left, it
# stops.
LAG_SCAN_TICKS = 5

LIBRARIES = ("httpx2", "httpx")

# Marks the end of a read-ahead body in its queue.
_END = object()

# Request extension set by a wrapper, so auto-capture underneath it does not record twice.
_CAPTURED = "pytest_latency.captured"


@dataclass(frozen=True, slots=True)
class _Classes:
    transport: type[Any]
    async_transport: type[Any]
    dual_transport: type[Any]  # for transports that are both (MockTransport, user test doubles)


def _url_without_query(request: Any) -> str:
    url = request.url
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}{url.path}"


def _request_body(request: Any) -> bytes:
    try:
        content = request.content
    except Exception:  # a streaming request body that was not read: nothing to parse later
        return b""
    return bytes(content)


def _attempt(request: Any) -> int:
    try:
        return int(request.headers.get("x-stainless-retry-count", "0"))
    except ValueError:
        return 0


def _start_record(request: Any, clock: Clock) -> WireRecord:
    return WireRecord(
        method=request.method,
        url=_url_without_query(request),
        request_body=_request_body(request),
        t_start_ns=clock(),
        attempt=_attempt(request),
    )


def _note_headers(record: WireRecord, response: Any, clock: Clock) -> bool:
    """Stamp the headers; return True when the body is already in memory (nothing to time)."""
    record.t_headers_ns = clock()
    record.status = response.status_code
    record.content_type = response.headers.get("content-type", "")
    record.content_encoding = response.headers.get("content-encoding", "")
    # A Response built with content=/json= (mocks, caching layers) has read its body already:
    # its stream is never iterated, so the wrapper would see nothing.
    if hasattr(response, "_content"):
        now = clock()
        record.prefetched = True
        record.reads.append((now, now, response.content))
        record.t_eof_ns = now
        return True
    return False


def _note_error(record: WireRecord, exc: BaseException, clock: Clock) -> None:
    if record.error is None:
        record.error = type(exc).__name__
        record.error_message = str(exc)[:500]
    if record.t_closed_ns is None:
        record.t_closed_ns = clock()


def _finished(record: WireRecord) -> bool:
    return record.t_eof_ns is not None or record.t_closed_ns is not None or record.error is not None


class _LagMonitor:
    """The lag monitor of one event loop (see the module docstring). It must not reference its
    loop: it is the value of a WeakKeyDictionary keyed by that loop."""

    __slots__ = ("inflight", "log")

    def __init__(self) -> None:
        self.inflight: list[WireRecord] = []
        self.log: LoopLag | None = None  # the current run's log; None while stopped

    def watch(self, record: WireRecord, loop: asyncio.AbstractEventLoop) -> None:
        if self.log is None:
            self.log = LoopLag(LAG_TICK_NS)
            # An empty context: the monitor outlives the test that started it and must not keep
            # that test's context variables (and what they reference) alive.
            contextvars.Context().run(loop.create_task, self._run(self.log))
        record.loop_lag = self.log
        self.inflight.append(record)

    async def _run(self, log: LoopLag) -> None:
        clock = time.perf_counter_ns
        tick_s = LAG_TICK_NS / 1e9
        ticks = 0
        try:
            while True:
                before = clock()
                await asyncio.sleep(tick_s)
                woke = clock()
                log.add(woke, woke - before - LAG_TICK_NS)
                ticks += 1
                if ticks % LAG_SCAN_TICKS == 0:
                    self.inflight = [r for r in self.inflight if not _finished(r)]
                    if not self.inflight:
                        return
        finally:
            # Cancelled at loop shutdown or stopped: the next call on this loop starts a new run.
            if self.log is log:
                self.log = None
                self.inflight = []


_MONITORS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LagMonitor] = (
    weakref.WeakKeyDictionary()
)


def _watch_loop(record: WireRecord, clock: Clock) -> None:
    """Have the running loop's lag monitor cover `record` while it is in flight."""
    # The lag log is stamped with perf_counter_ns: a record on another clock cannot be compared.
    if clock is not time.perf_counter_ns:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not on an asyncio loop (trio, or a sync caller of an async transport)
        return
    if loop.is_closed():
        return
    try:
        monitor = _MONITORS.get(loop)
        if monitor is None:
            monitor = _MONITORS[loop] = _LagMonitor()
    except TypeError:  # a loop implementation that cannot be weakly referenced
        return
    monitor.watch(record, loop)


@functools.cache
def _classes_for(library: str) -> _Classes:
    mod = importlib.import_module(library)

    class TimedStream(mod.SyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, inner: Any, record: WireRecord, clock: Clock) -> None:
            self._inner = inner
            self._record = record
            self._clock = clock

        def __iter__(self) -> Iterator[bytes]:
            record, clock = self._record, self._clock
            reads = record.reads
            chunks = iter(self._inner)
            try:
                while True:
                    asked = clock()
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        break
                    reads.append((asked, clock(), chunk))
                    yield chunk
            except GeneratorExit:  # the consumer stopped early: not a failure of the call
                raise
            except Exception as exc:
                _note_error(record, exc, clock)
                raise
            record.t_eof_ns = clock()

        def close(self) -> None:
            if self._record.t_closed_ns is None:
                self._record.t_closed_ns = self._clock()
            self._inner.close()

    class TimedAsyncStream(mod.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, inner: Any, record: WireRecord, clock: Clock) -> None:
            self._inner = inner
            self._record = record
            self._clock = clock

        async def __aiter__(self) -> AsyncIterator[bytes]:
            record, clock = self._record, self._clock
            reads = record.reads
            chunks = self._inner.__aiter__()
            try:
                while True:
                    asked = clock()
                    try:
                        chunk = await chunks.__anext__()
                    except StopAsyncIteration:
                        break
                    reads.append((asked, clock(), chunk))
                    yield chunk
            except GeneratorExit:
                raise
            except BaseException as exc:  # CancelledError included: the call did not finish
                _note_error(record, exc, clock)
                raise
            record.t_eof_ns = clock()

        async def aclose(self) -> None:
            if self._record.t_closed_ns is None:
                self._record.t_closed_ns = self._clock()
            await self._inner.aclose()

    class ReadAheadStream(mod.SyncByteStream):  # type: ignore[misc,name-defined]
        """Reads the body in a thread as it arrives, whatever the consumer does, so a test body
        that sleeps or awaits I/O between chunks does not shift the stamps. It cannot help a
        consumer that holds the GIL (CPU-bound work): that is what the consumer-bound flag is
        for."""

        def __init__(self, inner: Any, record: WireRecord, clock: Clock) -> None:
            self._inner = inner
            self._record = record
            self._clock = clock
            self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
            self._closing = False
            record.read_ahead = True
            threading.Thread(
                target=self._pump, name="pytest-latency-read-ahead", daemon=True
            ).start()

        def _pump(self) -> None:
            record, clock = self._record, self._clock
            try:
                for chunk in self._inner:
                    now = clock()
                    record.reads.append((now, now, chunk))
                    self._queue.put(chunk)
                record.t_eof_ns = clock()
                self._queue.put(_END)
            except BaseException as exc:
                if not self._closing:  # closing early makes the blocked read fail: not an error
                    _note_error(record, exc, clock)
                self._queue.put(exc)

        def __iter__(self) -> Iterator[bytes]:
            while True:
                item = self._queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item

        def close(self) -> None:
            self._closing = True
            if self._record.t_closed_ns is None:
                self._record.t_closed_ns = self._clock()
            self._inner.close()

    class ReadAheadAsyncStream(mod.AsyncByteStream):  # type: ignore[misc,name-defined]
        """The async read-ahead: a task on the request's event loop fills a queue. It cannot help
        a consumer that blocks the loop."""

        def __init__(self, inner: Any, record: WireRecord, clock: Clock) -> None:
            self._inner = inner
            self._record = record
            self._clock = clock
            self._queue: asyncio.Queue[Any] = asyncio.Queue()
            self._closing = False
            record.read_ahead = True
            self._task = asyncio.get_running_loop().create_task(self._pump())

        async def _pump(self) -> None:
            record, clock = self._record, self._clock
            try:
                async for chunk in self._inner:
                    now = clock()
                    record.reads.append((now, now, chunk))
                    self._queue.put_nowait(chunk)
                record.t_eof_ns = clock()
                self._queue.put_nowait(_END)
            except BaseException as exc:
                if not self._closing:
                    _note_error(record, exc, clock)
                self._queue.put_nowait(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise

        async def __aiter__(self) -> AsyncIterator[bytes]:
            while True:
                item = await self._queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item

        async def aclose(self) -> None:
            self._closing = True
            if self._record.t_closed_ns is None:
                self._record.t_closed_ns = self._clock()
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task
            await self._inner.aclose()

    class LatencyTransport(mod.BaseTransport):  # type: ignore[misc,name-defined]
        """Wraps any transport of this library; records every attempt through `sink`."""

        def __init__(
            self,
            inner: Any,
            sink: Sink = route,
            clock: Clock = time.perf_counter_ns,
            read_ahead: bool = False,
        ) -> None:
            self.inner = inner
            self._sink = sink
            self._clock = clock
            self._stream_class = ReadAheadStream if read_ahead else TimedStream

        def handle_request(self, request: Any) -> Any:
            request.extensions[_CAPTURED] = True
            record = _start_record(request, self._clock)
            self._sink(record)
            try:
                response = self.inner.handle_request(request)
            except Exception as exc:
                _note_error(record, exc, self._clock)
                raise
            if not _note_headers(record, response, self._clock):
                response.stream = self._stream_class(response.stream, record, self._clock)
            return response

        def close(self) -> None:
            self.inner.close()

    class AsyncLatencyTransport(mod.AsyncBaseTransport):  # type: ignore[misc,name-defined]
        """Wraps any async transport of this library; records every attempt through `sink`."""

        def __init__(
            self,
            inner: Any,
            sink: Sink = route,
            clock: Clock = time.perf_counter_ns,
            read_ahead: bool = False,
        ) -> None:
            self.inner = inner
            self._sink = sink
            self._clock = clock
            self._async_stream_class = ReadAheadAsyncStream if read_ahead else TimedAsyncStream

        async def handle_async_request(self, request: Any) -> Any:
            request.extensions[_CAPTURED] = True
            record = _start_record(request, self._clock)
            self._sink(record)
            _watch_loop(record, self._clock)
            try:
                response = await self.inner.handle_async_request(request)
            except BaseException as exc:
                _note_error(record, exc, self._clock)
                raise
            if not _note_headers(record, response, self._clock):
                response.stream = self._async_stream_class(response.stream, record, self._clock)
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()

    class DualLatencyTransport(LatencyTransport, AsyncLatencyTransport):
        def __init__(
            self,
            inner: Any,
            sink: Sink = route,
            clock: Clock = time.perf_counter_ns,
            read_ahead: bool = False,
        ) -> None:
            LatencyTransport.__init__(self, inner, sink, clock, read_ahead)
            AsyncLatencyTransport.__init__(self, inner, sink, clock, read_ahead)

    classes = (
        TimedStream,
        TimedAsyncStream,
        ReadAheadStream,
        ReadAheadAsyncStream,
        LatencyTransport,
        AsyncLatencyTransport,
    )
    for cls in (*classes, DualLatencyTransport):
        cls.__module__ = __name__
        cls.__qualname__ = f"{cls.__name__}[{library}]"
    return _Classes(LatencyTransport, AsyncLatencyTransport, DualLatencyTransport)


def wrap_transport(
    inner: Any,
    *,
    sink: Sink = route,
    clock: Clock = time.perf_counter_ns,
    read_ahead: bool = False,
) -> Any:
    """Return `inner` wrapped so that every request through it is recorded.

    Works for sync and async transports of httpx2 and httpx (told apart by their base classes);
    an already wrapped transport is returned unchanged. `read_ahead` reads each body as it
    arrives (a thread, or a task on the request's loop) instead of when the consumer asks.
    """
    if is_wrapped(inner):
        return inner
    for library in _loaded_libraries(inner):
        mod = importlib.import_module(library)
        classes = _classes_for(library)
        is_async = isinstance(inner, mod.AsyncBaseTransport)
        if is_async and isinstance(inner, mod.BaseTransport):
            return classes.dual_transport(inner, sink, clock, read_ahead)
        if is_async:
            return classes.async_transport(inner, sink, clock, read_ahead)
        if isinstance(inner, mod.BaseTransport):
            return classes.transport(inner, sink, clock, read_ahead)
    raise TypeError(f"cannot capture {type(inner).__qualname__}: not an httpx2 or httpx transport")


def is_wrapped(transport: Any) -> bool:
    return any(
        isinstance(transport, (c.transport, c.async_transport))
        for c in (_classes_for(lib) for lib in _loaded_libraries(transport))
    )


def _loaded_libraries(obj: Any) -> list[str]:
    """The HTTP libraries `obj` is a transport of, among those already imported by someone.

    Told by isinstance against each library's base classes: class names and `__module__` are not
    reliable (openai re-exports httpx2's transport classes under its own module name).
    """
    import sys

    found = []
    for library in LIBRARIES:
        mod = sys.modules.get(library)
        if mod is not None and isinstance(obj, (mod.BaseTransport, mod.AsyncBaseTransport)):
            found.append(library)
    return found


def instrument_http_client(
    http_client: Any,
    *,
    sink: Sink = route,
    clock: Clock = time.perf_counter_ns,
    read_ahead: bool = False,
) -> Any:
    """Wrap an httpx2/httpx `Client` or `AsyncClient` in place: its transport and every mount.

    Wrapping after construction keeps what the client built for itself (the SDKs' TCP keepalive
    socket options, proxies from the environment); passing `transport=` would drop them.
    """

    def wrap(transport: Any) -> Any:
        return wrap_transport(transport, sink=sink, clock=clock, read_ahead=read_ahead)

    http_client._transport = wrap(http_client._transport)
    http_client._mounts = {
        pattern: (None if t is None else wrap(t)) for pattern, t in http_client._mounts.items()
    }
    return http_client


def instrument(
    client: Any,
    *,
    sink: Sink = route,
    clock: Clock = time.perf_counter_ns,
    read_ahead: bool = False,
) -> Any:
    """Instrument an SDK client (anthropic, openai, any Stainless-built SDK) or an HTTP client.

    Returns the same object, so `client = instrument(Anthropic())` reads naturally.
    `read_ahead=True` reads response bodies as they arrive rather than when the test asks for
    them: for test bodies that sleep or await other I/O while streaming.
    """
    http_client = getattr(client, "_client", None)
    if http_client is not None and hasattr(http_client, "_transport"):
        instrument_http_client(http_client, sink=sink, clock=clock, read_ahead=read_ahead)
        return client
    if hasattr(client, "_transport") and hasattr(client, "_mounts"):
        return instrument_http_client(client, sink=sink, clock=clock, read_ahead=read_ahead)
    raise TypeError(
        f"cannot instrument {type(client).__qualname__}: expected an anthropic/openai client "
        "or an httpx2/httpx Client/AsyncClient"
    )


def install_auto_capture(
    *, sink: Sink = route, clock: Clock = time.perf_counter_ns, read_ahead: bool = False
) -> Callable[[], None]:
    """Capture every request through the default transports of httpx2 and httpx (those importable).

    Patches `HTTPTransport.handle_request` and `AsyncHTTPTransport.handle_async_request` at class
    level, so clients built anywhere (inside SDKs, by the test) are covered; custom transports
    (aiohttp, mocks) are not, and explicit wrappers keep working without double records.
    Returns the function that removes the patches.
    """
    undo: list[Callable[[], None]] = []
    for library in LIBRARIES:
        try:
            mod = importlib.import_module(library)
        except ImportError:
            continue
        classes = _classes_for(library)
        undo.append(
            _patch(mod.HTTPTransport, "handle_request", classes.transport, sink, clock, read_ahead)
        )
        undo.append(
            _patch(
                mod.AsyncHTTPTransport,
                "handle_async_request",
                classes.async_transport,
                sink,
                clock,
                read_ahead,
            )
        )

    def uninstall() -> None:
        for step in reversed(undo):
            step()

    return uninstall


class _Unpatched:
    """Presents one transport's original method as a transport, for a wrapper to delegate to."""

    def __init__(self, transport: Any, original: Callable[..., Any], name: str) -> None:
        self._transport = transport
        setattr(self, name, lambda request: original(transport, request))


def _patch(
    cls: type[Any],
    name: str,
    wrapper_cls: type[Any],
    sink: Sink,
    clock: Clock,
    read_ahead: bool,
) -> Callable[[], None]:
    original = cls.__dict__[name]

    if name == "handle_request":

        def patched(self: Any, request: Any) -> Any:
            if request.extensions.get(_CAPTURED):
                return original(self, request)
            return wrapper_cls(
                _Unpatched(self, original, name), sink, clock, read_ahead
            ).handle_request(request)

    else:

        async def patched(self: Any, request: Any) -> Any:  # type: ignore[misc]
            if request.extensions.get(_CAPTURED):
                return await original(self, request)
            wrapper = wrapper_cls(_Unpatched(self, original, name), sink, clock, read_ahead)
            return await wrapper.handle_async_request(request)

    setattr(cls, name, patched)

    def restore() -> None:
        setattr(cls, name, original)

    return restore
