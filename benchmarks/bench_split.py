"""Streams per worker count, through the plugin: one test split across pytest-xdist workers
(`split=True`) against the simulator in its own process, at rising concurrency, with `-n 1` (the
whole load in one worker process) and `-n 2` (half in each, joined on the controller).

Each round is a real `pytest -n W` run of one async test, `samples=2C, warmup=C, concurrency=C`
through
the instrumented `AsyncOpenAI` client (`async_openai_client`), every stream 50 tokens at 20 ms.
Its result file gives the joined test's ttft and itl percentiles; the simulator's truth log gives
the same percentiles of what it sent (ttft from each request's receipt to its first content, each
gap between content events). A round is honest when the measured percentiles are within the
accuracy targets of the truth's (p50 within 1 ms, p99 within 5 ms). That compares distributions,
not each call with its own truth as bench_ceiling.py does, so it is the coarser figure: what the
joined budgets would be judged on. It also gives the most samples in flight at once (across the
shards) and whether the shards ran together.

    python benchmarks/bench_split.py                       # concurrency 10 20 40 80, -n 1 and 2
    python benchmarks/bench_split.py --concurrency 20 40 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from _common import P50_TARGET_MS, P99_TARGET_MS, ROOT, load, quantile, spawn_sim
from remote_sim import paced, truth_log

TEST = """
import pytest

@pytest.mark.asyncio
@pytest.mark.latency(samples={samples}, warmup={concurrency}, concurrency={concurrency}, split=True)
async def test_streams(async_openai_client):
    stream = await async_openai_client.chat.completions.create(
        model="m", messages=[{{"role": "user", "content": "Count."}}], stream=True)
    async for _ in stream:
        pass
"""


INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


def run_round(base: str, concurrency: int, workers: int) -> dict[str, Any]:
    httpx2.delete(f"{base}/_sim/truth")
    with tempfile.TemporaryDirectory() as folder:
        here = Path(folder)
        (here / "pytest.ini").write_text(
            "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        )
        (here / "test_split_round.py").write_text(
            TEST.format(samples=2 * concurrency, concurrency=concurrency)
        )
        env = {**os.environ, "OPENAI_API_KEY": "k", "PYTHONPATH": str(ROOT / "src")}
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist",
            "-n", str(workers), "-p", "asyncio", "--asyncio-mode=strict",
            f"--latency-openai-base-url={base}/v1", "--latency-json=out.json",
        ]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        out = here / "out.json"
        if not out.exists():
            raise SystemExit(f"the round wrote no result file:\n{done.stdout}\n{done.stderr}")
        data = json.loads(out.read_text())
    (test,) = data["tests"]
    # The warmups (C in all, each shard's C/N) end before any shard meets the others: the first
    # C requests the simulator received; the kept samples' are the rest.
    truths = sorted(truth_log(base), key=lambda t: t.t_received_ns)[concurrency:]
    sent_ttft = [t.ttft_ns / 1e6 for t in truths if t.ttft_ns is not None]
    sent_itl = [gap / 1e6 for t in truths for gap in t.itl_ns]
    metrics = test["metrics"]
    row: dict[str, Any] = {
        "workers": workers,
        "concurrency": concurrency,
        "calls": test["call_count"],
        "in_flight_max": test["load"].get("in_flight_max"),
        "split": test["load"].get("split"),
        "seconds": elapsed,
        "load": os.getloadavg()[0],
    }
    honest = True
    for metric, sent in (("ttft", sent_ttft), ("itl", sent_itl)):
        for p, target in ((50, P50_TARGET_MS), (99, P99_TARGET_MS)):
            measured = metrics[metric][f"p{p}"] / 1000
            off = measured - quantile(sent, p / 100)
            row[f"{metric}_p{p}_off"] = off
            honest = honest and abs(off) <= target
    row["honest"] = honest
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[10, 20, 40, 80])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=50)
    args = parser.parse_args()
    sim = [sys.executable, "-m", "pytest_latency.cli", "sim", "--port=0", "--preset=instant"]
    proc, base = spawn_sim(
        [*sim, *paced(decode_ms_per_token=args.itl_ms, output_tokens=args.tokens)]
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; cores: {os.cpu_count()}; "
          f"load: {load()}")  # fmt: skip
    print(f"each round: samples 2C, concurrency C, split=True; {args.tokens} tokens at "
          f"{args.itl_ms:g} ms; off = measured percentile - the simulator's (ms)")  # fmt: skip
    print(f"{'-n':>3} {'C':>4} {'calls':>5} {'in flight':>9} {'together':>8} "
          f"{'ttft p50/p99 off':>17} {'itl p50/p99 off':>16} {'honest':>6} "
          f"{'s':>5} {'load':>5}")  # fmt: skip
    rows = []
    try:
        for concurrency in args.concurrency:
            for workers in args.workers:
                r = run_round(base, concurrency, workers)
                rows.append(r)
                split = r["split"]
                together = "-" if split is None else ("yes" if split["together"] else "NO")
                print(
                    f"{workers:>3} {concurrency:>4} {r['calls']:>5} {r['in_flight_max']!s:>9} "
                    f"{together:>8} {r['ttft_p50_off']:+8.2f}/{r['ttft_p99_off']:+8.2f} "
                    f"{r['itl_p50_off']:+7.2f}/{r['itl_p99_off']:+8.2f} "
                    f"{'yes' if r['honest'] else 'no':>6} {r['seconds']:5.1f} {r['load']:5.2f}",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait()
    print(f"\nload at the end: {load()}")
    for workers in args.workers:
        honest = [r["concurrency"] for r in rows if r["workers"] == workers and r["honest"]]
        print(f"-n {workers}: largest honest concurrency {max(honest) if honest else 'none'}")


if __name__ == "__main__":
    main()
