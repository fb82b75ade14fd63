"""Capture overhead: the same streams through an instrumented and a plain SDK client, side by side.

Two parts, both interleaved (plain/instrumented in ABBA order, each pair run back to back) so the
noise of a shared machine hits both variants alike; every figure is a per-pair ratio or
difference, reported as the median and the 10th–90th percentile spread over the pairs:

1. **Through the simulator** (``pytest-latency sim`` in its own process, preset ``instant``: no
   modelled decode time, so the server sends as fast as it can and the client is the bottleneck,
   which is the worst case for a client-side overhead). Each stream is a real SDK call of
   ``--tokens`` (2,000) content events over loopback: anthropic sync/async
   ``messages.create(stream=True)``, openai sync/async chat, and a raw aiohttp session streaming
   the chat endpoint line by line (the async path of google-genai and litellm). Figures:
   wall-time ratio instrumented/plain (target <= 1.05) and the difference per content chunk.
2. **No network** (an in-memory transport replaying the simulator's exact bytes, one SSE event per
   chunk): the wrapper's own cost per chunk, first at the transport (iterating the response stream
   only, nothing else in the loop), then through each SDK's parser (target <= 5 µs per chunk).
   Timed in process CPU time: with no I/O the CPU time is the work, and a time slice lost to
   another process on the shared machine does not count against either variant.

Every row also gives the ratio of the client process's CPU time (instrumented/plain): in part 1
the wall-time ratio is the target, but on a loaded machine its spread is wide (a stream that loses
its core for a few ms shifts one pair), while the CPU ratio shows the client's own extra work.

The metrics computed from a record after the call (``call_metrics``) are outside the test's timed
path; their cost per chunk is printed for information.

    python benchmarks/bench_overhead.py            # ~1.5 min
    python benchmarks/bench_overhead.py --quick    # ~30 s
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai
from _common import load, spawn_sim, spread

from pytest_latency import instrument, wrap_transport
from pytest_latency.metrics import call_metrics
from pytest_latency.wire import WireRecord

Clock = Callable[[], float]
PROMPT = [{"role": "user", "content": "Count, one number per token."}]
COMMAND = "python benchmarks/bench_overhead.py"


# ---- the simulator ---------------------------------------------------------------------------


def start_sim(tokens: int) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable, "-m", "pytest_latency.cli", "sim", "--port", "0", "--preset", "instant",
        "--ttfb-ms", "0", "--decode-ms-per-token", "0", "--output-tokens", str(tokens),
    ]  # fmt: skip
    return spawn_sim(cmd)


# ---- statistics over pairs -------------------------------------------------------------------


Timing = tuple[float, float]  # (the chosen clock's seconds, process CPU seconds)


def pairs(
    reps: int, plain: Callable[[], Timing], timed: Callable[[], Timing]
) -> list[tuple[Timing, Timing]]:
    """`reps` (plain, instrumented) timings in ABBA order: each pair shares its moment's noise."""
    out = []
    for i in range(reps):
        if i % 2 == 0:
            a = plain()
            b = timed()
        else:
            b = timed()
            a = plain()
        out.append((a, b))
    return out


async def async_pairs(
    reps: int, plain: Callable[[], Awaitable[Timing]], timed: Callable[[], Awaitable[Timing]]
) -> list[tuple[Timing, Timing]]:
    """`pairs` for coroutines, on the running loop."""
    out = []
    for i in range(reps):
        if i % 2 == 0:
            a = await plain()
            b = await timed()
        else:
            b = await timed()
            a = await plain()
        out.append((a, b))
    return out


def keeping_first() -> tuple[list[WireRecord], list[WireRecord], Callable[[WireRecord], None]]:
    """A sink that collects records (cleared after each timed call) and keeps the first one
    after the warm-up (`kept`, cleared by the caller then) for the parse-cost figure."""
    records: list[WireRecord] = []
    kept: list[WireRecord] = []

    def sink(record: WireRecord) -> None:
        records.append(record)
        if not kept:
            kept.append(record)

    return records, kept, sink


def row(name: str, chunks: int, timings: list[tuple[Timing, Timing]]) -> dict[str, Any]:
    measured = [(a[0], b[0]) for a, b in timings]
    ratios = [b / a for a, b in measured]
    cpu_ratios = [b[1] / a[1] for a, b in timings]
    per_chunk = [(b - a) / chunks * 1e6 for a, b in measured]  # µs
    plain_per_chunk = [a / chunks * 1e6 for a, _ in measured]
    print(
        f"{name:44} {len(measured):5} {chunks:6} {spread(plain_per_chunk, '.2f'):>22} "
        f"{spread(ratios, '.4f'):>26} {spread(per_chunk, '+.3f'):>26} "
        f"{spread(cpu_ratios, '.4f'):>26}"
    )
    return {
        "name": name,
        "ratio": statistics.median(ratios),
        "per_chunk_us": statistics.median(per_chunk),
    }


def header(title: str) -> None:
    print(f"\n{title}  (load average {load()})")
    print(
        f"{'scenario':44} {'pairs':>5} {'chunks':>6} {'plain µs/chunk':>22} "
        f"{'ratio instr/plain':>26} {'Δ µs/chunk':>26} {'CPU ratio instr/plain':>26}"
    )


# ---- SDK calls -------------------------------------------------------------------------------


def make_client(kind: str, base: str, *, is_async: bool, http_client: Any = None) -> Any:
    kwargs: dict[str, Any] = {"api_key": "k", "max_retries": 0}
    if http_client is not None:
        kwargs["http_client"] = http_client
    if kind == "anthropic":
        cls: Any = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
        return cls(base_url=base, **kwargs)
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return cls(base_url=f"{base}/v1", **kwargs)


def sync_call(kind: str, tokens: int) -> Callable[[Any], None]:
    if kind == "anthropic":

        def call(c: Any) -> None:
            for _ in c.messages.create(model="m", max_tokens=tokens, messages=PROMPT, stream=True):
                pass

        return call

    def chat(c: Any) -> None:
        for _ in c.chat.completions.create(
            model="m",
            messages=PROMPT,
            max_tokens=tokens,
            stream=True,
            stream_options={"include_usage": True},
        ):
            pass

    return chat


def async_call(kind: str, tokens: int) -> Callable[[Any], Awaitable[None]]:
    if kind == "anthropic":

        async def call(c: Any) -> None:
            async for _ in await c.messages.create(
                model="m", max_tokens=tokens, messages=PROMPT, stream=True
            ):
                pass

        return call

    async def chat(c: Any) -> None:
        async for _ in await c.chat.completions.create(
            model="m",
            messages=PROMPT,
            max_tokens=tokens,
            stream=True,
            stream_options={"include_usage": True},
        ):
            pass

    return chat


def timed_sync(
    call: Callable[[Any], None], client: Any, sink: list[WireRecord], clock: Clock
) -> Timing:
    start, cpu = clock(), time.process_time()
    call(client)
    elapsed, cpu = clock() - start, time.process_time() - cpu
    sink.clear()
    return elapsed, cpu


async def timed_async(
    call: Callable[[Any], Awaitable[None]], client: Any, sink: list[WireRecord], clock: Clock
) -> Timing:
    start, cpu = clock(), time.process_time()
    await call(client)
    elapsed, cpu = clock() - start, time.process_time() - cpu
    sink.clear()
    return elapsed, cpu


def run_sdk_pairs(
    kind: str,
    is_async: bool,
    tokens: int,
    reps: int,
    factory: Callable[[], Any],
    clock: Clock = time.perf_counter,
) -> tuple[list[tuple[Timing, Timing]], list[WireRecord]]:
    """Build a plain and an instrumented client with `factory`, warm both, time `reps` pairs."""
    records, kept, sink = keeping_first()
    plain, timed = factory(), instrument(factory(), sink=sink)
    if not is_async:
        call = sync_call(kind, tokens)
        with plain, timed:
            for c in (plain, timed):  # warm-up: first call of a client is cold
                timed_sync(call, c, records, clock)
            kept.clear()
            measured = pairs(
                reps,
                lambda: timed_sync(call, plain, records, clock),
                lambda: timed_sync(call, timed, records, clock),
            )
        return measured, kept
    acall = async_call(kind, tokens)

    async def go() -> list[tuple[Timing, Timing]]:
        async with plain, timed:
            for c in (plain, timed):
                await timed_async(acall, c, records, clock)
            kept.clear()
            return await async_pairs(
                reps,
                lambda: timed_async(acall, plain, records, clock),
                lambda: timed_async(acall, timed, records, clock),
            )

    return asyncio.run(go()), kept


def run_aiohttp_pairs(
    base: str, tokens: int, reps: int
) -> tuple[list[tuple[Timing, Timing]], list[WireRecord]]:
    """A raw aiohttp session streaming chat (google-genai's and litellm's async path), plain and
    instrumented (`instrument(session)`: the middleware and the stamped reader), in ABBA pairs."""
    import aiohttp

    records, kept, sink = keeping_first()

    body = {
        "model": "m",
        "messages": PROMPT,
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    async def call(session: Any) -> None:
        async with session.post(f"{base}/v1/chat/completions", json=body) as response:
            async for _ in response.content:  # line by line, as google-genai reads
                pass

    async def go() -> list[tuple[Timing, Timing]]:
        clock = time.perf_counter
        async with aiohttp.ClientSession() as plain, aiohttp.ClientSession() as timed:
            instrument(timed, sink=sink)
            for session in (plain, timed):
                await timed_async(call, session, records, clock)
            kept.clear()
            return await async_pairs(
                reps,
                lambda: timed_async(call, plain, records, clock),
                lambda: timed_async(call, timed, records, clock),
            )

    return asyncio.run(go()), kept


# ---- the in-memory transport -----------------------------------------------------------------


class ReplayStream(httpx2.SyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks


class AsyncReplayStream(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


class ReplayTransport(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """Answers every request with the same recorded SSE body, one event per chunk, no network."""

    def __init__(self, bodies: dict[str, list[bytes]]) -> None:
        self._bodies = bodies

    def _chunks(self, request: httpx2.Request) -> list[bytes]:
        return self._bodies["anthropic" if request.url.path.endswith("/messages") else "openai"]

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, stream=ReplayStream(self._chunks(request)))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        stream = AsyncReplayStream(self._chunks(request))
        return httpx2.Response(200, headers=headers, stream=stream)


def record_bodies(base: str, tokens: int) -> dict[str, list[bytes]]:
    """The simulator's exact SSE bytes for each API, split into one chunk per event."""
    out: dict[str, list[bytes]] = {}
    requests = {
        "anthropic": (
            "/v1/messages",
            {"model": "m", "max_tokens": tokens, "messages": PROMPT, "stream": True},
        ),
        "openai": (
            "/v1/chat/completions",
            {
                "model": "m",
                "max_tokens": tokens,
                "messages": PROMPT,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
    }
    with httpx2.Client(base_url=base, timeout=60) as http:
        for kind, (path, body) in requests.items():
            raw = http.post(path, content=json.dumps(body)).content
            events = [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]
            out[kind] = events
    return out


def transport_pairs(chunks: list[bytes], reps: int) -> list[tuple[Timing, Timing]]:
    """The wrapper alone: iterate the response stream of a bare vs a wrapped transport."""
    bare = ReplayTransport({"anthropic": chunks, "openai": chunks})
    records: list[WireRecord] = []
    wrapped = wrap_transport(bare, sink=records.append)
    request = httpx2.Request("POST", "http://sim/v1/chat/completions", content=b"{}")

    def consume(transport: Any) -> Timing:
        start = time.process_time()
        response = transport.handle_request(request)
        for _ in response.stream:
            pass
        response.stream.close()
        elapsed = time.process_time() - start
        records.clear()
        return elapsed, elapsed

    for _ in range(20):
        consume(bare)
        consume(wrapped)
    return pairs(reps, lambda: consume(bare), lambda: consume(wrapped))


def parse_cost(record: WireRecord, chunks: int, repeat: int = 3) -> float:
    """µs per chunk of computing the metrics of one record, after the call (best of `repeat`)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call_metrics(record)
        best = min(best, time.perf_counter() - start)
    return best / chunks * 1e6


# ---- main --------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2000, help="content events per stream")
    ap.add_argument("--pairs", type=int, default=30, help="pairs per scenario through the sim")
    ap.add_argument("--mock-pairs", type=int, default=30, help="pairs per SDK scenario, no network")
    ap.add_argument("--transport-pairs", type=int, default=300, help="pairs at the transport")
    ap.add_argument("--quick", action="store_true", help="a short run (fewer pairs)")
    args = ap.parse_args()
    if args.quick:
        args.pairs, args.mock_pairs, args.transport_pairs = 4, 6, 100
    argv = " ".join(sys.argv[1:])
    print(f"command: {COMMAND}{' ' + argv if argv else ''}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  cores: {os.cpu_count()}")
    print(f"python {sys.version.split()[0]}, anthropic {anthropic.__version__}, "
          f"openai {openai.__version__}")  # fmt: skip
    proc, base = start_sim(args.tokens)
    results: list[dict[str, Any]] = []
    parse: dict[str, float] = {}
    try:
        bodies = record_bodies(base, args.tokens)
        header(f"1. through the simulator (loopback, decode 0, {args.tokens} tokens per stream)")
        for kind, is_async in (
            ("anthropic", False),
            ("openai", False),
            ("anthropic", True),
            ("openai", True),
        ):
            name = f"sim   {kind} {'async' if is_async else 'sync'} stream"
            measured, kept = run_sdk_pairs(
                kind,
                is_async,
                args.tokens,
                args.pairs,
                functools.partial(make_client, kind, base, is_async=is_async),
            )
            results.append(row(name, args.tokens, measured))
            if kept:
                parse[f"{kind} ({len(kept[0].reads)} reads)"] = parse_cost(kept[0], args.tokens)
        measured, kept = run_aiohttp_pairs(base, args.tokens, args.pairs)
        results.append(row("sim   aiohttp async stream (raw session)", args.tokens, measured))
        if kept:
            parse[f"aiohttp ({len(kept[0].reads)} reads)"] = parse_cost(kept[0], args.tokens)
        print(f"(load average after part 1: {load()})")
    finally:
        proc.terminate()
        proc.wait()

    chunks = len(bodies["openai"])
    header(
        "2. no network: in-memory transport replaying the simulator's bytes, one event a chunk;"
        " CPU time (time.process_time) so time lost to other processes does not count"
    )
    gc.collect()
    results.append(row("wrapper alone: iterate the response stream", chunks,
                       transport_pairs(bodies["openai"], args.transport_pairs)))  # fmt: skip
    replay = ReplayTransport(bodies)
    for kind, is_async in (("anthropic", False), ("openai", False), ("openai", True)):
        name = f"mock  {kind} {'async' if is_async else 'sync'} stream"

        def factory(kind: str = kind, is_async: bool = is_async) -> Any:
            http: Any = httpx2.AsyncClient if is_async else httpx2.Client
            return make_client(kind, "http://sim", is_async=is_async,
                               http_client=http(transport=replay))  # fmt: skip

        measured, _ = run_sdk_pairs(
            kind, is_async, args.tokens, args.mock_pairs, factory, time.process_time
        )
        results.append(row(name, len(bodies[kind]), measured))

    print("\nmetrics computed after the call (not in the timed path), best of 3:")
    for name, cost in parse.items():
        print(f"  call_metrics {name:30} {cost:6.2f} µs per content chunk")
    print(f"\nload average at the end: {load()}")
    # The ratio target is about real streams (part 1); the per-chunk target about the wrapper's
    # own cost, which only the no-network CPU-time rows resolve (part 1's per-pair noise is tens
    # of µs per chunk on this machine).
    worst_ratio = max(r["ratio"] for r in results if r["name"].startswith("sim"))
    worst_chunk = max(r["per_chunk_us"] for r in results if not r["name"].startswith("sim"))
    print(f"targets: wall ratio <= 1.05 for 2,000-chunk streams: worst median {worst_ratio:.4f} "
          f"({'met' if worst_ratio <= 1.05 else 'NOT met'}); cost per chunk <= 5 µs (no network): "
          f"worst median "
          f"{worst_chunk:+.3f} µs ({'met' if worst_chunk <= 5 else 'NOT met'})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
