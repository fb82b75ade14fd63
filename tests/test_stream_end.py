"""A stream whose protocol says it ended is complete, however far the client read past its end
marker (issue #14, item 1): the openai SDK's sync `Stream` stops at `[DONE]` and closes without
reading to EOF, which flagged every fully read sync Chat stream `incomplete`. Through the real
SDKs against the simulator; an early break is still incomplete."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

from pytest_latency import instrument
from pytest_latency.recording import Recording
from pytest_latency.sim import LatencyModel, SimServer

OAI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me a story."}]
ANT: list[MessageParam] = [{"role": "user", "content": "Tell me a story."}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(LatencyModel.preset("instant").replace(output_tokens=12), port=0) as server:
        yield server


def _incomplete(recording: Recording) -> list[bool]:
    return [c.final.incomplete for c in recording.calls()]


def test_fully_read_streams_are_complete_on_every_sync_path(sim: SimServer) -> None:
    recording = Recording("t")
    oai = instrument(openai.OpenAI(base_url=sim.openai_base_url, api_key="k"), sink=recording.sink)
    ant = instrument(
        anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k"), sink=recording.sink
    )
    with oai, ant:
        for _ in oai.chat.completions.create(model="m", messages=OAI, stream=True):
            pass
        for _ in oai.chat.completions.create(
            model="m",
            messages=OAI,
            stream=True,
            stream_options={"include_usage": True},
        ):
            pass
        for _ in oai.responses.create(model="m", input="Tell me a story.", stream=True):
            pass
        with ant.messages.stream(model="m", max_tokens=12, messages=ANT) as s:
            for _ in s.text_stream:
                pass
    finals = [c.final for c in recording.calls()]
    assert [f.api for f in finals] == [
        "openai.chat",
        "openai.chat",
        "openai.responses",
        "anthropic.messages",
    ]
    assert _incomplete(recording) == [False, False, False, False]
    assert all(f.error is None and f.output_tokens for f in finals[1:])


def test_fully_read_async_streams_are_complete(sim: SimServer) -> None:
    recording = Recording("t")

    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="k")
        async with instrument(client, sink=recording.sink) as oai:
            stream = await oai.chat.completions.create(
                model="m",
                messages=OAI,
                stream=True,
            )
            async for _ in stream:
                pass

    asyncio.run(run())
    assert _incomplete(recording) == [False]


def test_an_early_break_is_still_incomplete(sim: SimServer) -> None:
    recording = Recording("t")
    oai = instrument(openai.OpenAI(base_url=sim.openai_base_url, api_key="k"), sink=recording.sink)
    with oai:
        stream = oai.chat.completions.create(model="m", messages=OAI, stream=True)
        for _ in stream:
            break  # after the first chunk: neither the end marker nor EOF was read
        stream.close()
    (call,) = recording.calls()
    assert call.final.incomplete is True and call.final.error is None


def test_a_stream_still_reading_when_the_test_ends_is_cut_off_visibly() -> None:
    """A thread nobody joined still streams after the test's body returned (issue #14, item
    10): its call is measured up to the end of the test and recorded as `outlived_test` (an
    error, so budgets see it), not frozen mid-flight as if it were a short success; and what
    the thread reads later changes nothing."""
    import threading
    import time

    model = LatencyModel.preset("instant").replace(output_tokens=20, decode_ms_per_token=40.0)
    with SimServer(model, port=0) as server:
        recording = Recording("t")
        client = instrument(
            openai.OpenAI(base_url=server.openai_base_url, api_key="k"), sink=recording.sink
        )

        def stream() -> None:
            for _ in client.chat.completions.create(model="m", messages=OAI, stream=True):
                pass

        thread = threading.Thread(target=stream)
        thread.start()
        time.sleep(0.3)  # the test's body ends with the stream ~7 of 20 tokens in
        (call,) = recording.report().calls
        thread.join()
        client.close()
    final = call.final
    assert final.error == "outlived_test" and final.failed
    assert final.e2e is not None and final.e2e < 600_000  # up to the cut, not the whole 800 ms
    assert 2 <= final.content_events < 20
    (later,) = recording.calls()
    assert later.final == final  # the reads after the cut are not counted


def test_a_stream_left_open_after_a_break_is_incomplete_not_cut_off(sim: SimServer) -> None:
    recording = Recording("t")
    client = instrument(
        openai.OpenAI(base_url=sim.openai_base_url, api_key="k"), sink=recording.sink
    )
    stream = client.chat.completions.create(model="m", messages=OAI, stream=True)
    for _ in stream:
        break  # left open: no one is reading
    (call,) = recording.report().calls
    assert call.final.error is None and call.final.incomplete
    stream.close()
    client.close()


def test_a_stream_with_no_content_ends_at_its_end_marker_when_eof_was_not_read() -> None:
    """openai's SDK raises on a Responses `error` event and closes the response: a failed call
    with no content event, never read to EOF (vercel/ai's recorded insufficient_quota stream,
    tests/corpus/sdk/). Its e2e is the error event's arrival, not absent."""
    from test_metrics import make_record

    from pytest_latency.metrics import call_metrics

    error = (
        b'event: error\ndata: {"type":"error","sequence_number":2,"error":'
        b'{"type":"insufficient_quota","code":"insufficient_quota","message":"quota"}}\n\n'
    )
    created = b'event: response.created\ndata: {"type":"response.created","response":{}}\n\n'
    record = make_record("http://h/v1/responses", [(10.0, created), (30.0, error)], eof=False)
    m = call_metrics(record)
    assert m.error == "sse_error:insufficient_quota" and not m.incomplete
    assert m.ttft is None and m.e2e == pytest.approx(30_000)
    left_open = make_record("http://h/v1/responses", [(10.0, created)], eof=False)
    assert call_metrics(left_open).e2e is None  # no end marker, no EOF: no end to measure
