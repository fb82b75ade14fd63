"""capture's aiohttp binding: a middleware per attempt, the body stamped as aiohttp delivers it.

Against the simulator in its own process (its truth log is the oracle) and against small aiohttp
servers on loopback for what the simulator does not do (gzip, bodies without content, a server
that hangs up, a key in an exception).
"""

from __future__ import annotations

import asyncio
import gzip
import statistics
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx2
import pytest
from aiohttp import web
from remote_sim import (
    PACED_DECODE_MS,
    PACED_TOKENS,
    error_of,
    paced_simulator,
    truth_log,
    truth_of,
)

from pytest_latency import capture
from pytest_latency.capture import _aiohttp
from pytest_latency.metrics import call_metrics
from pytest_latency.wire import WireRecord

CHAT = {
    "model": "gpt-4o-mini",
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "Count to twelve."}],
}
# As tests/test_accuracy.py: bounds that hold on a busy 2-core machine and still catch a
# consumer-paced stamp or a parse bias (tens of ms); benchmarks/ holds the strict targets.
# 5 ms, not 2: beside two CPU hogs and a second pytest-xdist worker the chunked case's median
# came to 2.03 ms (half its calls 2-4 ms late: the loop thread waiting for a core; session 11),
# as test_sim_gemini's did.
P50_BOUND_MS = 5.0
MAX_BOUND_MS = 20.0


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with paced_simulator() as base:
        yield base


async def _stream_lines(session: aiohttp.ClientSession, base: str) -> None:
    async with session.post(f"{base}/v1/chat/completions", json=CHAT) as response:
        async for _ in response.content:  # line by line, as google-genai reads
            pass


async def _stream_chunks(session: aiohttp.ClientSession, base: str) -> None:
    async with session.post(f"{base}/v1/chat/completions", json=CHAT) as response:
        async for _ in response.content.iter_chunked(7):  # odd cuts: the stamps are not the reads'
            pass


@pytest.mark.parametrize("read", [_stream_lines, _stream_chunks], ids=["lines", "chunked"])
def test_an_instrumented_session_measures_what_the_simulator_sent(sim: str, read: Any) -> None:
    records: list[WireRecord] = []

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            assert capture.instrument(session, sink=records.append) is session
            for _ in range(12):
                await read(session, sim)

    asyncio.run(run())
    truths = truth_log(sim)
    assert len(records) == 12
    ttft_errors, tpot_errors = [], []
    for record in records[1:]:  # the first is a cold connection
        measured = call_metrics(record)
        truth = truth_of(record, truths)
        assert measured.error is None and record.complete, record.error_message
        assert record.read_ahead and record.content_encoding == ""
        assert measured.output_tokens == truth.output_tokens == PACED_TOKENS
        error = error_of(record, measured, truth)
        ttft_errors.append(error.ttft)
        tpot_errors.append(error.tpot)
    assert statistics.median(ttft_errors) <= P50_BOUND_MS, ttft_errors
    # One call in eleven may lose its core for longer (48 ms once beside two CPU hogs at load 6:
    # the loop thread itself was not running); two may not.
    assert sorted(ttft_errors)[-2] <= MAX_BOUND_MS, ttft_errors
    assert statistics.median(tpot_errors) <= P50_BOUND_MS, tpot_errors


def test_stamps_are_arrivals_even_when_the_consumer_dawdles(sim: str) -> None:
    """A consumer that awaits something else between lines does not shift the stamps: aiohttp
    feeds the reader from the loop whatever the consumer does."""
    records: list[WireRecord] = []

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            capture.instrument(session, sink=records.append)
            await _stream_lines(session, sim)  # warm
            async with session.post(f"{sim}/v1/chat/completions", json=CHAT) as response:
                await asyncio.sleep(0.2)  # the whole stream arrives meanwhile
                async for _ in response.content:
                    await asyncio.sleep(0.01)

    asyncio.run(run())
    record = records[-1]
    measured = call_metrics(record)
    truth = truth_of(record, truth_log(sim))
    assert error_of(record, measured, truth).ttft <= MAX_BOUND_MS
    assert measured.tpot is not None and measured.tpot / 1000 < PACED_DECODE_MS * 2
    assert not measured.consumer_bound


def test_auto_capture_records_sessions_built_anywhere_once_and_uninstalls(sim: str) -> None:
    records: list[WireRecord] = []
    original = aiohttp.ClientSession._request
    uninstall = capture.install_auto_capture(sink=records.append)
    try:
        assert aiohttp.ClientSession._request is not original

        async def run() -> None:
            async with aiohttp.ClientSession() as session:
                await _stream_lines(session, sim)
            async with aiohttp.ClientSession() as session:  # instrumented as well: still once
                capture.instrument(session, sink=records.append)
                await _stream_lines(session, sim)
            async with aiohttp.ClientSession() as session:  # a request's own middlewares
                async with session.get(f"{sim}/health", middlewares=()) as response:
                    await response.read()

        asyncio.run(run())
    finally:
        uninstall()
    assert aiohttp.ClientSession._request is original
    assert [r.url.rsplit("/", 1)[-1] for r in records] == ["completions", "completions", "health"]
    assert all(r.complete for r in records)


class _AiohttpTransport(httpx2.AsyncBaseTransport):
    """An httpx transport on aiohttp, as openai's DefaultAioHttpClient and litellm's are."""

    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        response = await self.session.request(
            request.method, str(request.url), data=request.content, headers=dict(request.headers)
        )

        async def body() -> AsyncIterator[bytes]:
            async for chunk in response.content.iter_any():
                yield chunk
            response.release()

        return httpx2.Response(response.status, headers=dict(response.headers), content=body())

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()


def test_an_httpx_transport_on_aiohttp_is_recorded_once(sim: str) -> None:
    records: list[WireRecord] = []
    uninstall = capture.install_auto_capture(sink=records.append)
    try:

        async def run() -> None:
            transport = capture.wrap_transport(_AiohttpTransport(), sink=records.append)
            async with httpx2.AsyncClient(transport=transport) as client:
                async with client.stream("POST", f"{sim}/v1/chat/completions", json=CHAT) as r:
                    async for _ in r.aiter_raw():
                        pass

        asyncio.run(run())
    finally:
        uninstall()
    (record,) = records
    assert not record.read_ahead  # the httpx wrapper's record, not the middleware's
    assert call_metrics(record).output_tokens == PACED_TOKENS


# ---- what the simulator does not do -------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[str]:
    async def gzipped(request: web.Request) -> web.Response:
        body = gzip.compress(
            b'{"object": "chat.completion", "model": "m", "choices": [], '
            b'"usage": {"prompt_tokens": 3, "completion_tokens": 2}}'
        )
        return web.Response(
            body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
        )

    async def empty(request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def hang_up(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: {}\n\n")
        assert request.transport is not None
        request.transport.close()
        return response

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        while True:
            await response.write(b"data: {}\n\n")
            await asyncio.sleep(0.005)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", gzipped)
    app.router.add_route("*", "/empty", empty)
    app.router.add_post("/hang-up", hang_up)
    app.router.add_post("/endless", endless)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _run(coro_fn: Any) -> list[WireRecord]:
    records: list[WireRecord] = []

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            capture.instrument(session, sink=records.append)
            await coro_fn(session)

    asyncio.run(run())
    return records


def test_a_decompressed_body_is_recorded_decoded(server: str) -> None:
    async def call(session: aiohttp.ClientSession) -> None:
        async with session.post(f"{server}/v1/chat/completions", json={"model": "m"}) as response:
            assert (await response.json())["usage"]["completion_tokens"] == 2

    (record,) = _run(call)
    assert record.content_encoding == "" and record.body.startswith(b'{"object"')
    assert record.request_body == b'{"model": "m"}'
    assert call_metrics(record).output_tokens == 2


def test_bodies_without_content_end_at_the_head(server: str) -> None:
    async def call(session: aiohttp.ClientSession) -> None:
        async with session.head(f"{server}/empty") as response:
            await response.read()
        async with session.get(f"{server}/empty") as response:
            await response.read()

    records = _run(call)
    assert [r.status for r in records] == [204, 204]
    assert all(r.complete and r.t_eof_ns == r.t_headers_ns for r in records)


def test_a_server_that_hangs_up_is_an_error_of_the_call(server: str) -> None:
    async def call(session: aiohttp.ClientSession) -> None:
        async with session.post(f"{server}/hang-up", json={}) as response:
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()

    (record,) = _run(call)
    assert record.error == "ClientPayloadError" and not record.complete
    assert record.body == b"data: {}\n\n"


def test_closing_early_is_a_close_not_an_error(server: str) -> None:
    async def call(session: aiohttp.ClientSession) -> None:
        async with session.post(f"{server}/endless", json={}) as response:
            await response.content.readline()

    (record,) = _run(call)
    assert record.error is None and record.t_closed_ns is not None and record.t_eof_ns is None
    assert record.reads


def test_a_connection_error_keeps_no_header_value() -> None:
    records: list[WireRecord] = []
    key = "sk-ant-api03-" + "k" * 40

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            capture.instrument(session, sink=records.append)
            with pytest.raises(aiohttp.ClientError):
                await session.post("http://127.0.0.1:9/v1/messages", headers={"x-api-key": key})

    asyncio.run(run())
    (record,) = records
    assert record.error is not None and key not in (record.error_message or "")


def test_the_retry_header_and_query_string_are_read_as_for_httpx(sim: str) -> None:
    records: list[WireRecord] = []

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            capture.instrument(session, sink=records.append)
            async with session.get(
                f"{sim}/health?key=secret", headers={"x-stainless-retry-count": "2"}
            ) as response:
                await response.read()

    asyncio.run(run())
    (record,) = records
    assert record.attempt == 2 and record.url == f"{sim}/health"


def test_instrument_is_idempotent_on_a_session() -> None:
    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            capture.instrument(session)
            capture.instrument(session)
            assert sum(_aiohttp.is_middleware(m) for m in session._middlewares) == 1

    asyncio.run(run())
