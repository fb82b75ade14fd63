"""Capture's entry points: instrument a client, wrap a transport, install auto-capture.

Owns the public API of capture and the choice of binding for what it is given: an SDK client
(anthropic, openai, any Stainless-built SDK) is instrumented through the HTTP client it holds, an
httpx2/httpx client through its transport and mounts, a transport by its library's wrapper, an
aiohttp `ClientSession` by a middleware of its own (or, for a client that takes request
arguments instead of a session, the middleware itself), a google-genai client through the HTTP
clients and session arguments it keeps (`_genai`). Knows no HTTP library's classes itself: the
bindings do.

May import `attribution` and capture's `_stream` and bindings; never pytest, the SDKs, or an HTTP
library.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from pytest_latency.attribution import Sink, route
from pytest_latency.capture import _aiohttp, _genai, _httpx
from pytest_latency.capture._stream import Clock

_Client = TypeVar("_Client")


class _HTTPClientInternals(Protocol):
    """What an httpx2/httpx `Client` or `AsyncClient` keeps its transports in."""

    _transport: object
    _mounts: dict[object, object | None]


def wrap_transport(
    inner: object,
    *,
    sink: Sink = route,
    clock: Clock = time.perf_counter_ns,
    read_ahead: bool = False,
) -> Any:  # an instance of inner's library base classes (sync, async or both): no one type says it
    """Return `inner` wrapped so that every request through it is recorded.

    Works for sync and async transports of httpx2 and httpx (told apart by their base classes);
    an already wrapped transport is returned unchanged. `read_ahead` reads each body as it
    arrives (a thread, or a task on the request's loop) instead of when the consumer asks.
    """
    if is_wrapped(inner):
        return inner
    wrapped = _httpx.wrap(inner, sink, clock, read_ahead)
    if wrapped is None:
        raise TypeError(
            f"cannot capture {type(inner).__qualname__}: not an httpx2 or httpx transport"
        )
    return wrapped


def is_wrapped(transport: object) -> bool:
    return _httpx.is_wrapper(transport)


def instrument_http_client(
    http_client: _Client,
    *,
    sink: Sink = route,
    clock: Clock = time.perf_counter_ns,
    read_ahead: bool = False,
) -> _Client:
    """Wrap an httpx2/httpx `Client` or `AsyncClient` in place: its transport and every mount.

    Wrapping after construction keeps what the client built for itself (the SDKs' TCP keepalive
    socket options, proxies from the environment); passing `transport=` would drop them.
    """

    def wrap(transport: object) -> object:
        return wrap_transport(transport, sink=sink, clock=clock, read_ahead=read_ahead)

    internals = cast(_HTTPClientInternals, http_client)
    internals._transport = wrap(internals._transport)
    internals._mounts = {
        pattern: (None if t is None else wrap(t)) for pattern, t in internals._mounts.items()
    }
    return http_client


def instrument(
    client: _Client,
    *,
    sink: Sink = route,
    clock: Clock = time.perf_counter_ns,
    read_ahead: bool = False,
) -> _Client:
    """Instrument an SDK client (anthropic, openai, any Stainless-built SDK; a
    `google.genai.Client` or its `.aio`, both sides at once) or an HTTP client (httpx2/httpx
    `Client`/`AsyncClient`, aiohttp `ClientSession`).

    Returns the same object, typed as given, so `client = instrument(Anthropic())` reads
    naturally. `read_ahead=True` reads response bodies as they arrive rather than when the test
    asks for them: for test bodies that sleep or await other I/O while streaming (an aiohttp
    session's bodies are always stamped as they arrive).
    """
    if _aiohttp.is_session(client):
        _aiohttp.instrument_session(client, sink, clock)
        return client
    http_client = getattr(client, "_client", None)
    if http_client is not None and hasattr(http_client, "_transport"):
        instrument_http_client(http_client, sink=sink, clock=clock, read_ahead=read_ahead)
        return client
    if hasattr(client, "_transport") and hasattr(client, "_mounts"):
        return instrument_http_client(client, sink=sink, clock=clock, read_ahead=read_ahead)
    api_client = _genai.api_client_of(client)
    if api_client is not None:

        def http(c: object) -> object:
            return instrument_http_client(c, sink=sink, clock=clock, read_ahead=read_ahead)

        def session(s: object) -> None:
            _aiohttp.instrument_session(s, sink, clock)

        def middleware(decompressed: bool) -> object:
            return _aiohttp.LatencyMiddleware(sink, clock, decompressed=decompressed)

        _genai.instrument(
            api_client, _genai.Bindings(http, session, middleware, _aiohttp.is_middleware)
        )
        return client
    raise TypeError(
        f"cannot instrument {type(client).__qualname__}: expected an anthropic/openai client, "
        "a google.genai Client, an httpx2/httpx Client/AsyncClient or an aiohttp ClientSession"
    )


def aiohttp_middleware(
    *, sink: Sink = route, clock: Clock = time.perf_counter_ns, decompressed: bool = True
) -> Any:  # capture._aiohttp.LatencyMiddleware: aiohttp's middleware protocol, untyped here
    """An aiohttp client middleware that records every request it sees, for clients that take
    aiohttp request arguments rather than a session, such as google-genai
    (`HttpOptions(async_client_args={"middlewares": (aiohttp_middleware(),)})`, which it passes
    to each `ClientSession.request` of the sessions it makes per event loop). `decompressed`
    must say what the session does (aiohttp's `auto_decompress`, on by default)."""
    return _aiohttp.LatencyMiddleware(sink, clock, decompressed=decompressed)


def install_auto_capture(
    *, sink: Sink = route, clock: Clock = time.perf_counter_ns, read_ahead: bool = False
) -> Callable[[], None]:
    """Capture every request through the default transports of httpx2 and httpx and through
    aiohttp's `ClientSession` (those importable).

    Patches `HTTPTransport.handle_request` and `AsyncHTTPTransport.handle_async_request` at class
    level, and `ClientSession._request` (to add a middleware), so clients built anywhere (inside
    SDKs and frameworks, by the test) are covered; other custom transports (mocks) are not, and
    explicit wrappers keep working without double records. Returns the function that removes the
    patches.
    """
    undo: list[Callable[[], None]] = []
    for library in _httpx.LIBRARIES:
        try:
            importlib.import_module(library)
        except ImportError:
            continue
        undo.append(_httpx.patch_default_transports(library, sink, clock, read_ahead))
    try:
        importlib.import_module(_aiohttp.LIBRARY)
    except ImportError:
        pass
    else:
        undo.append(_aiohttp.patch_sessions(sink, clock))

    def uninstall() -> None:
        for step in reversed(undo):
            step()

    return uninstall
