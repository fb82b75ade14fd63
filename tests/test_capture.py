"""capture: the transport wrappers stamp what arrives, for httpx2 and httpx, sync and async."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import pytest

from pytest_latency import capture
from pytest_latency.wire import WireRecord

LIBS = [httpx2, httpx]


class FakeClock:
    """Each reading advances 1 µs, so every stamp is distinct and predictable."""

    def __init__(self) -> None:
        self._ticks = itertools.count(start=1_000, step=1_000)

    def __call__(self) -> int:
        return next(self._ticks)


def _sse_handler(lib: Any, chunks: list[bytes], status: int = 200) -> Any:
    class Body(lib.SyncByteStream, lib.AsyncByteStream):  # type: ignore[misc]
        def __iter__(self) -> Iterator[bytes]:
            yield from chunks

        async def __aiter__(self) -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

    def handler(request: Any) -> Any:
        return lib.Response(status, headers={"content-type": "text/event-stream"}, stream=Body())

    return handler


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_sync_wrapper_records_every_chunk_with_stamps(lib: Any) -> None:
    records: list[WireRecord] = []
    chunks = [b"data: a\n\n", b"data: b\n\n", b"data: [DONE]\n\n"]
    transport = capture.wrap_transport(
        lib.MockTransport(_sse_handler(lib, chunks)), sink=records.append, clock=FakeClock()
    )
    with lib.Client(transport=transport) as client:
        with client.stream(
            "POST", "http://llm.test/v1/chat/completions?key=secret", json={"model": "m"}
        ) as response:
            received = list(response.iter_raw())
    assert received == chunks
    (record,) = records
    assert record.url == "http://llm.test/v1/chat/completions"  # the query string is dropped
    assert record.request_body == b'{"model":"m"}' or b'"model"' in record.request_body
    assert record.status == 200 and record.content_type == "text/event-stream"
    assert [data for _, _, data in record.reads] == chunks
    assert record.t_headers_ns is not None and record.t_eof_ns is not None
    stamps = [record.t_start_ns, record.t_headers_ns]
    for asked, arrived, _ in record.reads:
        stamps += [asked, arrived]
    stamps.append(record.t_eof_ns)
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert record.t_closed_ns is not None and record.complete


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_async_wrapper_records_every_chunk(lib: Any) -> None:
    records: list[WireRecord] = []
    chunks = [b"event: x\ndata: 1\n\n", b"event: y\ndata: 2\n\n"]

    async def run() -> list[bytes]:
        transport = capture.wrap_transport(
            lib.MockTransport(_sse_handler(lib, chunks)), sink=records.append
        )
        async with lib.AsyncClient(transport=transport) as client:
            async with client.stream("POST", "http://llm.test/v1/messages", json={}) as response:
                return [c async for c in response.aiter_raw()]

    assert asyncio.run(run()) == chunks
    (record,) = records
    assert [data for _, _, data in record.reads] == chunks
    assert record.complete


def test_wrapping_is_idempotent_and_rejects_foreign_objects() -> None:
    inner = httpx2.HTTPTransport()
    wrapped = capture.wrap_transport(inner)
    assert capture.wrap_transport(wrapped) is wrapped
    assert isinstance(wrapped, httpx2.BaseTransport)
    with pytest.raises(TypeError, match="not an httpx2 or httpx transport"):
        capture.wrap_transport(object())
    inner.close()


def test_an_httpx_wrapper_is_an_httpx_transport_not_an_httpx2_one() -> None:
    wrapped = capture.wrap_transport(httpx.HTTPTransport())
    assert httpx.BaseTransport in type(wrapped).__mro__
    assert httpx2.BaseTransport not in type(wrapped).__mro__


def test_early_close_is_not_an_error_but_leaves_the_record_incomplete() -> None:
    records: list[WireRecord] = []
    chunks = [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
    transport = capture.wrap_transport(
        httpx2.MockTransport(_sse_handler(httpx2, chunks)), sink=records.append
    )
    with httpx2.Client(transport=transport) as client:
        with client.stream("POST", "http://llm.test/x") as response:
            for _ in response.iter_raw():
                break
    (record,) = records
    assert record.error is None and record.t_eof_ns is None and not record.complete
    assert record.t_closed_ns is not None


def test_transport_errors_are_recorded_with_their_type_and_reraised() -> None:
    records: list[WireRecord] = []

    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    transport = capture.wrap_transport(httpx2.MockTransport(refuse), sink=records.append)
    with httpx2.Client(transport=transport) as client, pytest.raises(httpx2.ConnectError):
        client.post("http://llm.test/v1/messages", json={})
    (record,) = records
    assert record.error == "ConnectError" and record.t_headers_ns is None


def test_a_prefetched_body_is_recorded_as_one_read() -> None:
    records: list[WireRecord] = []
    transport = capture.wrap_transport(
        httpx2.MockTransport(lambda r: httpx2.Response(200, json={"ok": True})),
        sink=records.append,
    )
    with httpx2.Client(transport=transport) as client:
        assert client.get("http://llm.test/").json() == {"ok": True}
    (record,) = records
    assert record.prefetched and record.body == b'{"ok":true}' and record.complete


def test_retry_count_header_becomes_the_attempt_number() -> None:
    records: list[WireRecord] = []
    transport = capture.wrap_transport(
        httpx2.MockTransport(lambda r: httpx2.Response(200, json={})), sink=records.append
    )
    with httpx2.Client(transport=transport) as client:
        client.post("http://llm.test/", headers={"x-stainless-retry-count": "2"})
        client.post("http://llm.test/", headers={"x-stainless-retry-count": "junk"})
    assert [r.attempt for r in records] == [2, 0]


def test_instrument_keeps_the_sdk_clients_socket_options_and_mounts() -> None:
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9")
    inner = client._client._transport
    options = inner._pool._socket_options
    assert capture.instrument(client) is client
    wrapped = client._client._transport
    assert capture.is_wrapped(wrapped) and wrapped.inner is inner
    assert wrapped.inner._pool._socket_options == options
    assert all(t is None or capture.is_wrapped(t) for t in client._client._mounts.values())
    client.close()


def test_instrument_rejects_what_it_cannot_wrap() -> None:
    with pytest.raises(TypeError, match="cannot instrument"):
        capture.instrument(object())


def test_auto_capture_records_default_transports_once_and_uninstalls() -> None:
    records: list[WireRecord] = []
    uninstall = capture.install_auto_capture(sink=records.append)
    try:
        plain = httpx2.Client()
        wrapped = capture.instrument(httpx2.Client(), sink=records.append)
        for client in (plain, wrapped):
            with pytest.raises(httpx2.ConnectError):
                client.get("http://127.0.0.1:9/")  # nothing listens on the discard port
            client.close()
    finally:
        uninstall()
    assert [r.error for r in records] == ["ConnectError", "ConnectError"]
    after = httpx2.Client()
    with pytest.raises(httpx2.ConnectError):
        after.get("http://127.0.0.1:9/")
    after.close()
    assert len(records) == 2


class _PacedBody(httpx2.SyncByteStream):
    """A body whose chunks become available every `gap_s`, like a server's decode loop."""

    def __init__(self, chunks: int, gap_s: float) -> None:
        self._chunks = chunks
        self._gap_s = gap_s

    def __iter__(self) -> Iterator[bytes]:
        import time

        for i in range(self._chunks):
            time.sleep(self._gap_s)
            yield f"data: {i}\n\n".encode()


@pytest.mark.parametrize("read_ahead", [False, True])
def test_read_ahead_stamps_arrivals_at_the_producers_pace(read_ahead: bool) -> None:
    import time

    records: list[WireRecord] = []
    transport = capture.wrap_transport(
        httpx2.MockTransport(
            lambda r: httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, stream=_PacedBody(4, 0.005)
            )
        ),
        sink=records.append,
        read_ahead=read_ahead,
    )
    with httpx2.Client(transport=transport) as client:
        with client.stream("POST", "http://llm.test/v1/chat/completions") as response:
            for _ in response.iter_raw():
                time.sleep(0.03)  # a consumer far slower than the producer
    (record,) = records
    arrivals = [arrived for _, arrived, _ in record.reads]
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(arrivals)]
    assert record.read_ahead is read_ahead and record.complete
    if read_ahead:
        assert max(gaps_ms) < 25, gaps_ms  # the producer's 5 ms, with room for a busy machine
    else:
        assert min(gaps_ms) >= 29, gaps_ms  # the consumer's 30 ms shows through


def test_closing_a_read_ahead_stream_early_is_not_an_error() -> None:
    records: list[WireRecord] = []
    transport = capture.wrap_transport(
        httpx2.MockTransport(
            lambda r: httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, stream=_PacedBody(50, 0.002)
            )
        ),
        sink=records.append,
        read_ahead=True,
    )
    with httpx2.Client(transport=transport) as client:
        with client.stream("POST", "http://llm.test/x") as response:
            for _ in response.iter_raw():
                break
    (record,) = records
    assert record.error is None and record.t_closed_ns is not None


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_auto_capture_covers_async_default_transports_and_restores_them(lib: Any) -> None:
    originals = (lib.HTTPTransport.handle_request, lib.AsyncHTTPTransport.handle_async_request)
    records: list[WireRecord] = []

    async def run() -> None:
        plain = lib.AsyncClient()
        wrapped = capture.instrument(lib.AsyncClient(), sink=records.append)
        for client in (plain, wrapped):
            with pytest.raises(lib.ConnectError):
                await client.get("http://127.0.0.1:9/")
            await client.aclose()

    uninstall = capture.install_auto_capture(sink=records.append)
    try:
        assert lib.AsyncHTTPTransport.handle_async_request is not originals[1]
        asyncio.run(run())
    finally:
        uninstall()
    assert [r.error for r in records] == ["ConnectError", "ConnectError"]  # once each
    assert all(r.loop_lag is not None for r in records)  # async: the loop monitor covered them
    assert (lib.HTTPTransport.handle_request, lib.AsyncHTTPTransport.handle_async_request) == (
        originals
    )


def test_only_the_binding_imports_an_http_library() -> None:
    """`_stream` and `_instrument` stay library-independent: a new binding reuses them as is."""
    import ast
    from pathlib import Path

    package = Path(capture.__file__).parent
    for name in ("_stream.py", "_instrument.py", "__init__.py"):
        tree = ast.parse((package / name).read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        tops = {m.split(".")[0] for m in imported}
        assert not tops & {"httpx", "httpx2", "aiohttp"}, (name, tops)
    stream = (package / "_stream.py").read_text(encoding="utf-8")
    assert "importlib" not in stream and "_httpx" not in stream
