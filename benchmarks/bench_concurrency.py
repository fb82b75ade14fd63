"""Concurrency: how many concurrent streams one test process drives before its timings degrade.

The simulator runs in its own process (``pytest-latency sim``, preset ``instant``, 1 ms headers,
``--itl-ms`` per token, ``--tokens`` tokens: by default 50 content events per second per stream).
This process plays the test: one instrumented ``openai.AsyncOpenAI`` client on one event loop
opens N concurrent streamed chat completions (starts spread evenly over ``--ramp-s``), for N in
``--streams``. Each call is matched to the server's truth record by its ``x-sim-request-id``
header, and the capture's measurements are compared with what the server actually sent, as in
``bench_accuracy.py``: ttft error = measured ttft − (first content event sent − request handed
over), e2e the same for the last content event (so both are the client's lag behind the server),
itl error per gap, tpot error per call.

Signals shown per round: the plugin's ``consumer_bound`` flag (metrics: a read that returned
at once after the consumer was away: the client was late, the data sat in the socket buffer) as
calls flagged / calls and flagged chunks; its ``client_saturated`` flag where the installed
version has one (the event loop woke up late while the call was in flight; "n/a" otherwise); and
three of this benchmark's own: the client's CPU use (process CPU time / wall time of the round;
one event loop cannot use more than one core, so >= 0.9 means the client is saturated by its own
work), the time it was runnable but waiting for a core (``/proc/self/schedstat``: CPU taken by
other processes on a shared machine), and the event loop's wake-up delay (p99 of how late a 5 ms
sleep returns).

    python benchmarks/bench_concurrency.py                  # 10 25 50 75 100 150 200, ~1 min
    python benchmarks/bench_concurrency.py --quick          # 10 50 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import openai
from _common import P50_TARGET_MS, P99_TARGET_MS, error_pct, load, spawn_sim, within_targets

from pytest_latency import instrument
from pytest_latency.metrics import CallMetrics, call_metrics
from pytest_latency.sim import TruthRecord
from pytest_latency.wire import WireRecord

COMMAND = "python benchmarks/bench_concurrency.py"


def start_sim(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable, "-m", "pytest_latency.cli", "sim", "--port", "0", "--preset", "instant",
        "--ttfb-ms", "1", "--decode-ms-per-token", str(args.itl_ms), "--tokens-per-chunk", "1",
        "--output-tokens", str(args.tokens), "--prefill-us-per-token", "200",
    ]  # fmt: skip
    return spawn_sim(cmd)


def schedstat() -> tuple[float, float]:
    """(s on a CPU, s runnable but waiting for a CPU) of this process's main thread (Linux)."""
    try:
        on_cpu, waiting, _ = Path("/proc/self/schedstat").read_text().split()
    except (OSError, ValueError):
        return float("nan"), float("nan")
    return int(on_cpu) / 1e9, int(waiting) / 1e9


async def loop_lag(out: list[float], stop: asyncio.Event) -> None:
    """How late a 5 ms sleep wakes up: the event loop's own delay, whatever its cause."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.005)
        out.append((time.perf_counter() - start - 0.005) * 1000)


async def one_stream(client: Any, delay: float, marker: str, ids: dict[str, str]) -> None:
    await asyncio.sleep(delay)
    raw = await client.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": f"Count, one number per token. [{marker}]"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    ids[marker] = raw.headers["x-sim-request-id"]
    async for _ in raw.parse():
        pass


async def run_round(base: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    records: list[WireRecord] = []
    client = instrument(
        openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0, timeout=120),
        sink=records.append,
    )
    ids: dict[str, str] = {}
    rng = random.Random(n)
    async with client:
        await one_stream(client, 0, "warm", {})  # the first async request of a client is cold
        records.clear()
        lags: list[float] = []
        stop = asyncio.Event()
        monitor = asyncio.create_task(loop_lag(lags, stop))
        cpu0, wall0, (_, rq0) = time.process_time(), time.perf_counter(), schedstat()
        await asyncio.gather(
            *(one_stream(client, rng.uniform(0, args.ramp_s), f"s{i}", ids) for i in range(n))
        )
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        rq = schedstat()[1] - rq0
        stop.set()
        await monitor
    with httpx2.Client(base_url=base, timeout=60) as http:
        truth = {
            r.request_id: r
            for r in (TruthRecord.from_json(x) for x in http.get("/_sim/truth").json()["records"])
        }
        http.delete("/_sim/truth")
    errors: dict[str, list[float]] = {"ttft": [], "e2e": [], "tpot": [], "itl": []}
    bound_calls = bound_chunks = chunks = failed = saturated = 0
    lag_max: list[float] = []
    for record in records:
        marker = json.loads(record.request_body)["messages"][0]["content"].rsplit("[", 1)[1][:-1]
        m = call_metrics(record)
        t = truth.get(ids.get(marker, ""))
        if m.error is not None or t is None or m.ttft is None or m.e2e is None:
            failed += 1
            continue
        bound_calls += m.consumer_bound
        # The plugin's own saturation signal, where this version of it has one.
        saturated += bool(getattr(m, "client_saturated", False))
        lag: float | None = getattr(m, "loop_lag_max_ms", None)
        if lag is not None:
            lag_max.append(lag)
        bound_chunks += m.consumer_bound_chunks
        chunks += m.content_chunks
        content = t.content_events
        first = (content[0].t_sent_ns - record.t_start_ns) / 1000
        last = (content[-1].t_sent_ns - record.t_start_ns) / 1000
        errors["ttft"].append((m.ttft - first) / 1000)
        errors["e2e"].append((m.e2e - last) / 1000)
        if m.tpot is not None and t.output_tokens:
            errors["tpot"].append((m.tpot - (last - first) / (t.output_tokens - 1)) / 1000)
        if len(m.itl) == len(t.itl_ns):
            errors["itl"] += [(a - b / 1000) / 1000 for a, b in zip(m.itl, t.itl_ns, strict=True)]
    return {
        "n": n,
        "ok": len(records) - failed,
        "cpu": cpu / wall,
        "runqueue": rq / wall,
        "loop_lag_p99": error_pct(lags, 99),
        "wall": wall,
        "bound_calls": bound_calls,
        "saturated": saturated if hasattr(CallMetrics, "client_saturated") else None,
        "plugin_lag": max(lag_max) if lag_max else float("nan"),
        "bound_chunks": bound_chunks,
        "chunks": chunks,
        "errors": errors,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[10, 25, 50, 75, 100, 150, 200])
    ap.add_argument("--itl-ms", type=float, default=20.0, help="decode time per token")
    ap.add_argument("--tokens", type=int, default=50, help="output tokens per stream")
    ap.add_argument("--ramp-s", type=float, default=0.5, help="spread of the stream starts")
    ap.add_argument("--repeats", type=int, default=2, help="rounds per stream count")
    ap.add_argument("--quick", action="store_true", help="10 50 200, one round each")
    args = ap.parse_args()
    if args.quick:
        args.streams, args.repeats = [10, 50, 200], 1
    argv = " ".join(sys.argv[1:])
    print(f"command: {COMMAND}{' ' + argv if argv else ''}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  cores: {os.cpu_count()}  "
          f"openai {openai.__version__}")  # fmt: skip
    print(f"each stream: {args.tokens} tokens at {args.itl_ms} ms (one event per token), "
          f"starts spread over {args.ramp_s} s; errors: measured − server truth, ms")  # fmt: skip
    print(
        "cpu/wall: client CPU time / wall; rq/wall: time the client was runnable but waiting "
        "for a core (other processes); lag p99: event-loop wake-up delay, ms"
    )
    proc, base = start_sim(args)
    head = (
        f"{'streams':>7} {'ok':>4} {'cpu/wall':>8} {'rq/wall':>7} {'lag p99':>7} "
        f"{'bound calls':>11} {'bound chunks':>12} {'sat calls':>9} "
        f"{'ttft p50/p99':>15} {'e2e p50/p99':>15} {'itl p50/p99':>15} {'tpot p50/p99':>15} "
        f"{'load 1m':>7}"
    )
    print(head)
    summary: list[dict[str, Any]] = []
    try:
        for n in args.streams:
            for _ in range(args.repeats):
                r = asyncio.run(run_round(base, n, args))
                e = r["errors"]
                sat = "n/a" if r["saturated"] is None else f"{r['saturated']}/{r['ok']}"
                cells = " ".join(
                    f"{error_pct(e[k], 50):6.2f}/{error_pct(e[k], 99):7.2f}"
                    for k in ("ttft", "e2e", "itl", "tpot")
                )
                print(
                    f"{n:7} {r['ok']:4} {r['cpu']:8.2f} {r['runqueue']:7.2f} "
                    f"{r['loop_lag_p99']:7.1f} {r['bound_calls']:5}/{r['ok']:<5} "
                    f"{r['bound_chunks']:5}/{r['chunks']:<6} {sat:>9} {cells} "
                    f"{os.getloadavg()[0]:7.2f}"
                )
                summary.append(r)
    finally:
        proc.terminate()
        proc.wait()
    print(f"\nload average at the end: {load()}")

    def within(r: dict[str, Any]) -> bool:
        return within_targets(r["errors"]["ttft"], r["errors"]["itl"])

    def first(rounds: list[dict[str, Any]]) -> str:
        return str(min(r["n"] for r in rounds)) if rounds else "never"

    ok = [r for r in summary if within(r)]
    print("largest round within the accuracy targets (ttft and itl error "
          f"p50 <= {P50_TARGET_MS:g} ms, p99 <= {P99_TARGET_MS:g} ms):"
          f" {str(max(r['n'] for r in ok)) + ' streams' if ok else 'no round'}; first outside: "
          f"{first([r for r in summary if not within(r)])}")  # fmt: skip
    print(f"plugin signal consumer_bound (a call flagged) first at: "
          f"{first([r for r in summary if r['bound_calls'] > 0])}; any chunk flagged first at: "
          f"{first([r for r in summary if r['bound_chunks'] > 0])}")  # fmt: skip
    if any(r["saturated"] is not None for r in summary):
        print("plugin signal client_saturated (a call flagged) first at: "
              f"{first([r for r in summary if r['saturated']])}")  # fmt: skip
    else:
        print("plugin signal client_saturated: not in this version of pytest-latency")
    print(f"client CPU >= 0.9 of a core first at: {first([r for r in summary if r['cpu'] >= 0.9])};"
          f" event-loop lag p99 > 20 ms first at: "
          f"{first([r for r in summary if r['loop_lag_p99'] > 20])}")  # fmt: skip
    medians = {r["n"]: statistics.median(r["errors"]["itl"]) for r in summary if r["errors"]["itl"]}
    print("signed median itl error by streams (ms): "
          + ", ".join(f"{n}: {v:+.3f}" for n, v in medians.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
