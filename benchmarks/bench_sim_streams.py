"""How many concurrent streams the simulator holds while keeping its own send schedule.

Runs the server in a subprocess (``python -m pytest_latency.cli sim``) so the client cannot steal
its CPU or GIL, drives N concurrent streamed chat completions from this process with raw asyncio
sockets (the cheapest client there is), and measures the server's lateness from its own truth log:
actual send time minus scheduled due time, over every content event. Arrivals are spread evenly
over ``--ramp-s`` seconds; "steady" statistics cover the events due while all N streams were
open (after the last arrival, before the first stream ended), "all" covers every event including
the ramp. ``--burst`` starts every stream at the same instant instead.

    python benchmarks/bench_sim_streams.py                      # sweep 50 100 200 400
    python benchmarks/bench_sim_streams.py --streams 200 400 800 --itl-ms 20 --tokens 100

Not collected by pytest (no test_ prefix, outside testpaths).
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
import urllib.request
from typing import Any

from _common import spawn_sim


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest_latency.cli",
        "sim",
        "--port",
        "0",
        "--preset",
        "instant",
        "--ttfb-ms",
        "1",
        "--decode-ms-per-token",
        str(args.itl_ms),
        "--output-tokens",
        str(args.tokens),
    ]
    return spawn_sim(cmd)


def http(method: str, url: str) -> Any:
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


async def one_stream(host: str, port: int, delay: float, i: int) -> int:
    await asyncio.sleep(delay)
    body = json.dumps(
        {"model": "bench", "stream": True, "messages": [{"role": "user", "content": f"hi {i}"}]}
    ).encode()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    await writer.drain()
    received = 0
    while chunk := await reader.read(65536):
        received += len(chunk)
    writer.close()
    await writer.wait_closed()
    return received


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def run_round(base: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    host, port = base.removeprefix("http://").split(":")
    spread = 0.0 if args.burst else args.ramp_s
    rng = random.Random(n)
    t0 = time.perf_counter()
    results = await asyncio.gather(
        *(one_stream(host, int(port), rng.uniform(0, spread), i) for i in range(n))
    )
    wall = time.perf_counter() - t0
    records = http("GET", base + "/_sim/truth")["records"]
    late = [(ev[0] - ev[3]) / 1e6 for r in records for ev in r["events"] if ev[1] == "content"]
    all_open = max(r["t_received_ns"] for r in records)
    first_end = min(r["t_done_ns"] or 0 for r in records)
    steady = [
        (ev[0] - ev[3]) / 1e6
        for r in records
        for ev in r["events"]
        if ev[1] == "content" and all_open <= ev[3] <= first_end
    ]
    ok = sum(1 for r in records if r["status"] == 200 and r["output_tokens"] == args.tokens)
    return {
        "steady_events": len(steady),
        "steady_p50": statistics.median(steady) if steady else float("nan"),
        "steady_p99": pct(steady, 99),
        "steady_max": max(steady) if steady else float("nan"),
        "streams": n,
        "complete": ok,
        "bytes_ok": all(results),
        "events": len(late),
        "p50": statistics.median(late) if late else float("nan"),
        "p99": pct(late, 99),
        "p999": pct(late, 99.9),
        "max": max(late) if late else float("nan"),
        "wall": wall,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[50, 100, 200, 400])
    ap.add_argument("--itl-ms", type=float, default=20.0, help="decode time per token (ms)")
    ap.add_argument("--tokens", type=int, default=250, help="output tokens per stream")
    ap.add_argument("--ramp-s", type=float, default=1.5, help="spread of stream start times")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--burst", action="store_true", help="start every stream at the same instant")
    ap.add_argument("--budget-ms", type=float, default=2.0, help="p99 lateness target")
    args = ap.parse_args()
    proc, base = start_server(args)
    rows = []
    try:
        for n in args.streams:
            for _ in range(args.repeats):
                http("DELETE", base + "/_sim/truth")
                rows.append(asyncio.run(run_round(base, n, args)))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    mode = "burst" if args.burst else "steady"
    print(
        f"\nsim send-schedule lateness (server truth: sent - due), ITL {args.itl_ms:g} ms, "
        f"{args.tokens} tokens/stream, {mode} arrivals, {os.cpu_count()} CPUs"
    )
    print(
        f"{'streams':>8} {'complete':>9} | {'steady events':>13} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'max ms':>7} | {'all events':>10} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} "
        f"{'max ms':>7} | steady p99<={args.budget_ms:g}ms"
    )
    best = 0
    for r in rows:
        good = r["steady_p99"] <= args.budget_ms and r["complete"] == r["streams"]
        if good:
            best = max(best, r["streams"])
        print(
            f"{r['streams']:>8} {r['complete']:>9} | {r['steady_events']:>13} "
            f"{r['steady_p50']:>7.3f} {r['steady_p99']:>7.3f} {r['steady_max']:>7.3f} | "
            f"{r['events']:>10} {r['p50']:>7.3f} {r['p99']:>7.3f} {r['p999']:>8.3f} "
            f"{r['max']:>7.3f} | {'yes' if good else 'NO'}"
        )
    print(f"\nmost concurrent streams within budget: {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
