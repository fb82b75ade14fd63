"""The first call of a fresh process through each SDK path, sync and async, measures what the
server did (issue #14, item 2). The SDKs build their pydantic models and import their stream
helpers lazily, on the first event of the first stream: ~400 ms for openai's Responses events,
~60 ms for anthropic's, all of it between two reads whose events had already arrived, so that
call's ttft was the SDK's pace (416 ms against 16 ms). The first async call of a process also
imports the async half of the HTTP stack (httpcore2's anyio backend: 90-180 ms of ttfb once the
sync paths were warm, where anyio's own pytest plugin had not loaded it), and a test that asked
for no `latency` imported the recording inside its first call (17 ms). The fixtures warm all of
it first; here new pytest processes make each path's first call and compare its error against
the simulator's logged truth with the error of the same path's later calls, which pay no
first-use cost."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

INNER = """
import json, time, pytest
# Loaded with the plugin: a collection's pause is not first-use work (FIRST_CALL_CPU_MS).
from pytest_latency.gc_pauses import paused_ns

MESSAGES = [{"role": "user", "content": "Tell me a story."}]


def chat(c):
    for _ in c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass


def responses_create(c):
    for _ in c.responses.create(model="m", input="Tell me a story.", stream=True):
        pass


def responses_stream(c):
    with c.responses.stream(model="m", input="Tell me a story.") as s:
        for _ in s:
            pass


def messages_create(c):
    for _ in c.messages.create(model="m", max_tokens=16, messages=MESSAGES, stream=True):
        pass


def messages_stream(c):
    with c.messages.stream(model="m", max_tokens=16, messages=MESSAGES) as s:
        for _ in s:
            pass


def gemini_stream(c):
    for _ in c.models.generate_content_stream(model="gemini-2.5-flash", contents="A story."):
        pass


async def async_gemini_stream(c):
    stream = await c.models.generate_content_stream(model="gemini-2.5-flash", contents="A story.")
    async for _ in stream:
        pass


async def async_chat(c):
    async for _ in await c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass


async def async_responses_create(c):
    async for _ in await c.responses.create(model="m", input="Tell me a story.", stream=True):
        pass


async def async_responses_stream(c):
    async with c.responses.stream(model="m", input="Tell me a story.") as s:
        async for _ in s:
            pass


async def async_messages_create(c):
    stream = await c.messages.create(model="m", max_tokens=16, messages=MESSAGES, stream=True)
    async for _ in stream:
        pass


async def async_messages_stream(c):
    async with c.messages.stream(model="m", max_tokens=16, messages=MESSAGES) as s:
        async for _ in s:
            pass


SYNC = {"chat": chat, "responses.create": responses_create,
        "responses.stream": responses_stream, "messages.create": messages_create,
        "messages.stream": messages_stream, "gemini.stream": gemini_stream}
ASYNC = {"chat": async_chat, "responses.create": async_responses_create,
         "responses.stream": async_responses_stream, "messages.create": async_messages_create,
         "messages.stream": async_messages_stream, "gemini.stream": async_gemini_stream}


def client_for(path, openai, anthropic, gemini):
    return {"messages": anthropic, "gemini": gemini}.get(path.split(".")[0], openai)


def dump(kind, path, request, llm_sim, cpu):
    # `latency` only now: asked for before the calls, it would import what a test without it
    # imports inside its first call.
    calls = [c.final for c in request.getfixturevalue("latency").calls]
    truth = llm_sim.truth()
    assert len(calls) == len(truth) == 4
    out = {
        "error_ms": [(c.ttft - t.ttft_ns / 1000) / 1000 for c, t in zip(calls, truth)],
        "flagged": [c.flagged for c in calls],
        "cpu_ms": cpu,
    }
    with open(f"first-{kind}-{path}.json", "w") as f:
        json.dump(out, f)


# Async first: the first async call of the process is what pays for the async HTTP stack.
@pytest.mark.asyncio
@pytest.mark.parametrize("path", list(ASYNC))
async def test_async(path, async_openai_client, async_anthropic_client, async_gemini_client,
                     llm_sim, request):
    client = client_for(path, async_openai_client, async_anthropic_client, async_gemini_client)
    cpu = []
    for _ in range(4):
        started, paused = time.thread_time(), paused_ns()
        await ASYNC[path](client)
        cpu.append((time.thread_time() - started) * 1000 - (paused_ns() - paused) / 1e6)
    dump("async", path, request, llm_sim, cpu)


@pytest.mark.parametrize("path", list(SYNC))
def test_sync(path, openai_client, anthropic_client, gemini_client, llm_sim, request):
    client = client_for(path, openai_client, anthropic_client, gemini_client)
    cpu = []
    for _ in range(4):
        started, paused = time.thread_time(), paused_ns()
        SYNC[path](client)
        cpu.append((time.thread_time() - started) * 1000 - (paused_ns() - paused) / 1e6)
    dump("sync", path, request, llm_sim, cpu)
"""

PATHS = (
    "chat",
    "responses.create",
    "responses.stream",
    "messages.create",
    "messages.stream",
    "gemini.stream",
)
# Three: a quiet CI run's two fresh processes both put the sync gemini.stream first call over
# 12 ms of CPU beyond its later calls, where alone it came out 4-7 ms in each (the box about a
# third slower that day than the figures below, and a second worker beside it; session 26).
RUNS = 3
# How much more a first call may cost than its path's later calls, in the better of RUNS fresh
# processes: its error against the simulator's truth, and the CPU time of the thread making it.
# Garbage collection's pauses inside a call are left out of its CPU time (`gc_pauses`): a
# young-generation collection of 10.6 ms fell inside the sync gemini.stream path's first call
# in every fresh process once anthropic 2.17 and httpx2 2.17 were installed (its excess came
# out 16-27 ms), an allocation pattern, not first-use work. The accuracy target (p99 5 ms) is a
# quiet machine's; on a busy one any single call's error is
# a few scheduler slices (at load 5-14 on 2 cores, warm: up to 13 ms in the better run). CPU
# time, which a wait for a CPU does not inflate, resolves smaller first-use work: warm, up to
# 4 ms (a new connection's setup, in every test's first call). Unwarmed async HTTP stack: error
# +270-280 ms, CPU +105-115 ms; the recording imported in the first call: +42 ms, CPU +15-17 ms.
FIRST_CALL_ERROR_MS = 25.0
# 12 ms, not 8: the sync messages.create/.stream first call's thread CPU came out 8-9 ms over
# its later calls in both fresh processes of 1 run in 3 (session 6). The cause was garbage
# collection: a young-generation collection of 7.7-14 ms fell inside that call, over the objects
# the SDKs' warm-up had just built. The plugin now freezes them (`gc_pauses`, `--latency-gc`):
# the collection time inside any one call is at most 2.7 ms, and the better of two runs at most
# 5.1 ms over the later calls (3 runs, session 7). Single runs still show 13-30 ms now and then
# (the VM: a pure CPU loop after a 0.5 ms sleep takes 10x its median 1 time in 100 here). The
# costs this bound exists to catch are the recording imported in the call (+15-17 ms) and the
# async HTTP stack (+105-115 ms).
FIRST_CALL_CPU_MS = 12.0


def _excess(values: list[float]) -> float:
    first, *rest = values
    return first - statistics.median(rest)


def test_the_first_call_of_a_process_is_as_accurate_as_the_next(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner=INNER)
    error: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    late: list[str] = []
    costly: list[str] = []
    for _ in range(RUNS):
        # A fresh interpreter each time: nothing this suite's process imported or built is warm
        # there. Without anyio's pytest plugin, which would import its asyncio backend at start.
        result = pytester.runpytest_subprocess(
            "--latency-sim=instant",
            "-p",
            "no:randomly",
            "-p",
            "no:anyio",
            "-p",
            "asyncio",
            "--asyncio-mode=strict",
        )
        result.assert_outcomes(passed=12)
        for kind in ("async", "sync"):
            for path in PATHS:
                data = json.loads(Path(pytester.path, f"first-{kind}-{path}.json").read_text())
                error.setdefault(f"{kind} {path}", []).append(_excess(data["error_ms"]))
                cpu.setdefault(f"{kind} {path}", []).append(_excess(data["cpu_ms"]))
        # A first-use cost shows in every run; a call held back by a busy machine, rarely twice.
        # The better of the runs so far decides, so once every path has had a run within both
        # bounds more runs cannot change the verdict: stop there (~9 s a run here).
        late = [path for path, runs in error.items() if min(runs) > FIRST_CALL_ERROR_MS]
        costly = [path for path, runs in cpu.items() if min(runs) > FIRST_CALL_CPU_MS]
        if not late and not costly:
            break
    assert len(error) == len(cpu) == 2 * len(PATHS)
    assert not late and not costly, (late, costly, error, cpu)
