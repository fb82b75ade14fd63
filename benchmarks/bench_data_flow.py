"""Data flows once: what reading calls again costs, and what pytest-xdist adds.

1. After 500 streamed calls through the anthropic SDK and the simulator, the first read of
   `latency.calls` (which parses every call once) against 20 more reads (which parse nothing),
   and the payload of the diagnosed test record per call. Target (issue #13): 20 reads cost at
   most 1.2x one read.
2. A suite of 30 tests x 20 samples x 3 streamed calls with 20k-character prompts, run with
   `-n 0` and `-n 2` (pytest-xdist), interleaved, median wall time: what crossing the process
   boundary on the test report costs. Target: -n 2 adds at most 10 % wall over -n 0 (on this
   2-core box -n 2 also runs two tests at once, so it may well be faster).

    python benchmarks/bench_data_flow.py            # ~2 min
    python benchmarks/bench_data_flow.py --reps 1   # one pair
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anthropic
from _common import load, spread

from pytest_latency import diagnose, instrument
from pytest_latency.recording import LatencyRecorder, Recording
from pytest_latency.results import test_blocks
from pytest_latency.sim import LatencyModel, SimServer
from pytest_latency.testdata import TestData

PROMPT = " ".join(f"item {i} costs {i * 7919 % 10007} units;" for i in range(760))

SUITE = f"""
import pytest

PROMPT = {PROMPT!r}


@pytest.mark.parametrize("case", range(30))
@pytest.mark.latency("ttft.p95 < 10s", samples=20)
def test_case(case, anthropic_client):
    for step in range(3):
        with anthropic_client.messages.stream(
            model="claude-sim", max_tokens=30,
            messages=[{{"role": "user", "content": f"{{PROMPT}} {{case}} {{step}}"}}],
        ) as s:
            for _ in s.text_stream:
                pass
"""


def reads(calls: int) -> None:
    recording = Recording("t")
    recording.begin_sample(warmup=False)
    latency = LatencyRecorder(recording)
    model = LatencyModel.preset("instant").replace(output_tokens=30)
    with SimServer(model, port=0) as sim:
        client = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k")
        with instrument(client, sink=recording.sink) as claude:
            for i in range(calls):
                with claude.messages.stream(
                    model="claude-sim",
                    max_tokens=30,
                    messages=[{"role": "user", "content": f"{PROMPT} {i}"}],
                ) as s:
                    for _ in s.text_stream:
                        pass
    start = time.perf_counter()
    assert len(latency.calls) == calls
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(20):
        assert len(latency.calls) == calls
    again = time.perf_counter() - start
    ratio = (first + again) / first
    verdict = "met" if ratio <= 1.2 else "NOT met"
    print(f"latency.calls after {calls} calls: first read {first * 1000:.1f} ms, 20 more reads "
          f"{again * 1000:.2f} ms; 21 reads / 1 read = {ratio:.3f} (target <= 1.2: {verdict})")  # fmt: skip  # noqa: E501
    test = TestData.of(recording.measured(), ("t.py", 1))
    raw = len(json.dumps(test.to_wire()))
    test = test.diagnosed(diagnose.diagnose_test(test.pool), diagnose.test_figures(test.pool))
    lean = len(json.dumps(test.to_wire()))
    start = time.perf_counter()
    test.blocks = test_blocks(test)  # what a worker adds when a result file will be written
    block_ms = (time.perf_counter() - start) * 1000
    full = len(json.dumps(test.to_wire()))
    print(f"report payload per call ({len(PROMPT):,}-character prompts): {raw / calls:,.0f} B "
          f"undiagnosed, {lean / calls:,.0f} B diagnosed, {full / calls:,.0f} B with the "
          f"result-file blocks (built in {block_ms:.1f} ms) (target <= 1,500 B)")  # fmt: skip


def xdist(reps: int) -> None:
    with tempfile.TemporaryDirectory(prefix="latency-xdist-") as tmp:
        root = Path(tmp)
        (root / "test_suite.py").write_text(SUITE, encoding="utf-8")
        (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        times: dict[str, list[float]] = {"0": [], "2": []}
        for rep in range(reps):
            for workers in ("0", "2") if rep % 2 == 0 else ("2", "0"):
                command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--latency-sim=instant", "-n", workers,
                           f"--latency-json={root / f'out{workers}.json'}"]  # fmt: skip
                start = time.perf_counter()
                done = subprocess.run(
                    command, cwd=root, capture_output=True, text=True, check=False,
                    env={**os.environ, "PYTHONHASHSEED": "0"},
                )  # fmt: skip
                times[workers].append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(f"-n {workers} failed:\n{done.stdout[-2000:]}")
        ratio = statistics.median(times["2"]) / statistics.median(times["0"])
        verdict = "met" if ratio <= 1.10 else "NOT met"
        print(f"30 tests x 20 samples x 3 calls: -n 0 {spread(times['0'], '.2f')} s, "
              f"-n 2 {spread(times['2'], '.2f')} s; -n 2 / -n 0 = {ratio:.3f} "
              f"(target <= 1.10: {verdict}); load {load()}")  # fmt: skip
        same = [json.loads((root / f"out{w}.json").read_text())["summary"] for w in ("0", "2")]
        print(f"same budget outcomes with and without xdist: {same[0] == same[1]} ({same[0]})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print(f"command: python benchmarks/bench_data_flow.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  load average {load()}")
    reads(args.calls)
    xdist(args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
