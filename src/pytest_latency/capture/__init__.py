"""Capture: the hot path. Transport wrappers that stamp each HTTP attempt into a `WireRecord`.

A wrapper stamps the request start, the response headers, and each body chunk as the consumer
receives it. Nothing is parsed here; `metrics` does that after the call. The package is split by
what depends on the HTTP library:

- `_stream`: everything that does not (starting and filling a record, the timed chunk loops, the
  read-ahead readers, the event-loop lag monitor);
- `_httpx`: the binding for httpx2 and legacy httpx (the SDKs run on httpx2: anthropic >= 1.0,
  openai >= 3.0), the only module that touches either library, and only once asked to;
- `_aiohttp`: the binding for aiohttp's `ClientSession` (a middleware, the reader stamped);
- `_genai`: where a google-genai client keeps its HTTP clients and session arguments, so that
  `instrument` reaches them (no HTTP library of its own: it is handed the bindings);
- `_instrument`: the public entry points, which pick the binding for what they are given.

What escaped capture (connections outside every captured attempt) is `pytest_latency.audit`.

Another HTTP library is one more binding module on top of `_stream`.

This module only re-exports the public names. May import `wire`, `attribution` and its own
modules; never pytest, never the SDKs.
"""

from __future__ import annotations

from pytest_latency.capture._httpx import LIBRARIES
from pytest_latency.capture._instrument import (
    aiohttp_middleware,
    install_auto_capture,
    instrument,
    instrument_http_client,
    is_wrapped,
    wrap_transport,
)
from pytest_latency.capture._stream import LAG_SCAN_TICKS, LAG_TICK_NS, Clock

__all__ = [
    "LAG_SCAN_TICKS",
    "LAG_TICK_NS",
    "LIBRARIES",
    "Clock",
    "aiohttp_middleware",
    "install_auto_capture",
    "instrument",
    "instrument_http_client",
    "is_wrapped",
    "wrap_transport",
]
