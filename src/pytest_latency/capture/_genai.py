"""Capture's knowledge of where a google-genai client keeps its HTTP clients, so that
`instrument(genai.Client(...))` (or its `.aio`) measures every call it makes, sync and async.

A `google.genai.Client` and its `.aio` side share one API client (`_api_client`), which holds:

- `_httpx_client`: the httpx2/httpx client its sync calls go through (its own, or
  `HttpOptions.httpx_client`): instrumented in place.
- `_async_httpx_client`: the one its async calls go through when they run on httpx
  (`HttpOptions.httpx_async_client` given, or aiohttp not installed). google-genai's own keeps one
  inner client per event loop, built when a loop first sends (`_inner_client_cls`,
  `_loop_clients`): those already built are instrumented, and the instance's factory is replaced
  by one that instruments each client it builds.
- `_async_client_session_request_args`: what it passes to every `request` of the aiohttp sessions
  it makes per event loop (its async default when aiohttp is installed), built from
  `HttpOptions.async_client_args` and rebuilt from them after a connection error. Capture's
  middleware goes into their `middlewares` (and into the client's copy of `async_client_args`, so
  the rebuilt ones keep it), so it is on every request whichever session carries it. A request's
  `middlewares` replace its session's in aiohttp: a session of the user's own
  (`HttpOptions.aiohttp_client`) with no per-request middlewares is instrumented itself instead,
  keeping the middlewares it has.

These are google-genai's private attributes (3.x), read by duck typing: a client without them is
not taken for a google-genai client. Not covered: Vertex AI with a client certificate, whose calls
go through google-auth's sessions (requests, and its own aiohttp session that takes no middleware
per request): auto-capture sees the aiohttp side, the audit names the rest.

Imports nothing of the package's: the HTTP bindings are handed in by `_instrument` (`Bindings`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Bindings:
    """What instrumenting a google-genai client needs of capture's HTTP bindings, each bound to
    the caller's sink and clock."""

    http_client: Callable[[Any], Any]  # instrument an httpx2/httpx client in place
    session: Callable[[Any], None]  # instrument an aiohttp session in place
    middleware: Callable[[bool], object]  # a new aiohttp middleware (decompressed bodies?)
    is_middleware: Callable[[object], bool]


def api_client_of(client: object) -> Any | None:
    """The API client of a `google.genai.Client` (or of its `.aio`), None for anything else."""
    api_client = getattr(client, "_api_client", None)
    if api_client is None or not hasattr(api_client, "_httpx_client"):
        return None
    return api_client


class _Instrumenting:
    """An inner-client factory that instruments each client google-genai builds with it."""

    __slots__ = ("build", "instrument")

    def __init__(self, build: Callable[..., Any], instrument: Callable[[Any], Any]) -> None:
        self.build = build
        self.instrument = instrument

    def __call__(self, **kwargs: Any) -> Any:
        return self.instrument(self.build(**kwargs))


def instrument(api_client: Any, bindings: Bindings) -> None:
    """Instrument every HTTP client and session `api_client` sends through, in place; again is a
    no-op."""
    sync = getattr(api_client, "_httpx_client", None)
    if sync is not None:
        bindings.http_client(sync)
    _instrument_async_httpx(getattr(api_client, "_async_httpx_client", None), bindings)
    args = getattr(api_client, "_async_client_session_request_args", None)
    if isinstance(args, dict) and not _uses_google_auth(api_client):
        _instrument_aiohttp(api_client, args, bindings)


def _instrument_async_httpx(client: Any, bindings: Bindings) -> None:
    if client is None:
        return
    bindings.http_client(client)  # a client of the user's, or one that owns its transport
    loop_clients = getattr(client, "_loop_clients", None)
    build = getattr(client, "_inner_client_cls", None)
    if not isinstance(loop_clients, Mapping) or build is None:
        return
    for inner in list(loop_clients.values()):
        bindings.http_client(inner)
    if not isinstance(build, _Instrumenting):
        client._inner_client_cls = _Instrumenting(build, bindings.http_client)


def _instrument_aiohttp(api_client: Any, args: dict[str, Any], bindings: Bindings) -> None:
    options = getattr(api_client, "_http_options", None)
    own_session = getattr(options, "aiohttp_client", None)
    chain = args.get("middlewares")
    if chain is None and own_session is not None:
        bindings.session(own_session)
        return
    chain = tuple(chain or ())
    if any(bindings.is_middleware(m) for m in chain):
        return
    decompress = args.get("auto_decompress")
    if decompress is None:  # as the session does: aiohttp decompresses by default
        decompress = getattr(own_session, "_auto_decompress", True)
    chain = (*chain, bindings.middleware(bool(decompress)))
    args["middlewares"] = chain
    if options is not None:  # a new dict: the user's own `async_client_args` stays as given
        options.async_client_args = {**(options.async_client_args or {}), "middlewares": chain}


def _uses_google_auth(api_client: Any) -> bool:
    uses = getattr(api_client, "_use_google_auth_async", None)
    return bool(uses()) if callable(uses) else False
