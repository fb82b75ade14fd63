"""Timing accuracy: pytest-latency's measurements through each real SDK path vs the simulator's
ground truth, at p50 and p99 (targets: <= 1 ms p50, <= 5 ms p99).

The simulator runs in its own process (`pytest-latency sim`) and stamps every event right after
its write with `perf_counter_ns` (CLOCK_MONOTONIC: the client's clock). For each call the client's
ttft is compared with "server sent the first content event − client handed over the request", its
e2e with the last content event, its tpot with the server's (last − first) / (tokens − 1), and
each ITL gap with the server's gap. The load average is printed with the results: on this shared
2-core machine, p99 follows whatever else runs.

    python benchmarks/bench_accuracy.py [--calls 41] [--tokens 48] [--decode-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
from _common import spawn_sim

from pytest_latency import capture
from pytest_latency.metrics import call_metrics
from pytest_latency.sim import TruthRecord
from pytest_latency.wire import WireRecord

PROMPT = [{"role": "user", "content": "Count, one number per token."}]


def _start_sim(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable, "-m", "pytest_latency.cli", "sim", "--port=0", "--preset=instant",
        "--ttfb-ms=1", f"--decode-ms-per-token={args.decode_ms}", "--tokens-per-chunk=1",
        f"--output-tokens={args.tokens}", "--jitter=0", "--prefill-us-per-token=200",
    ]  # fmt: skip
    return spawn_sim(command)


def _sync_calls() -> dict[str, tuple[str, Callable[[Any], None]]]:
    def a_create(c: Any) -> None:
        for _ in c.messages.create(model="m", max_tokens=512, messages=PROMPT, stream=True):
            pass

    def a_stream(c: Any) -> None:
        with c.messages.stream(model="m", max_tokens=512, messages=PROMPT) as s:
            for _ in s.text_stream:
                pass

    def o_chat(c: Any) -> None:
        for _ in c.chat.completions.create(
            model="m", messages=PROMPT, stream=True, stream_options={"include_usage": True}
        ):
            pass

    def o_responses(c: Any) -> None:
        for _ in c.responses.create(model="m", input="Count.", stream=True):
            pass

    return {
        "anthropic sync create(stream=True)": ("anthropic", a_create),
        "anthropic sync messages.stream()": ("anthropic", a_stream),
        "openai sync chat": ("openai", o_chat),
        "openai sync responses": ("openai", o_responses),
    }


def _async_calls() -> dict[str, tuple[str, Callable[[Any], Any]]]:
    async def a_create(c: Any) -> None:
        async for _ in await c.messages.create(
            model="m", max_tokens=512, messages=PROMPT, stream=True
        ):
            pass

    async def o_chat(c: Any) -> None:
        async for _ in await c.chat.completions.create(
            model="m", messages=PROMPT, stream=True, stream_options={"include_usage": True}
        ):
            pass

    async def o_responses(c: Any) -> None:
        async for _ in await c.responses.create(model="m", input="Count.", stream=True):
            pass

    return {
        "anthropic async create(stream=True)": ("anthropic", a_create),
        "openai async chat": ("openai", o_chat),
        "openai async responses": ("openai", o_responses),
    }


def _client(base: str, provider: str, is_async: bool, sink: Any) -> Any:
    if provider == "anthropic":
        cls: Any = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
        return capture.instrument(cls(base_url=base, api_key="k", max_retries=0), sink=sink)
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return capture.instrument(cls(base_url=f"{base}/v1", api_key="k", max_retries=0), sink=sink)


def _truth(http: httpx2.Client) -> list[TruthRecord]:
    data = http.get("/_sim/truth").json()
    return [TruthRecord.from_json(r) for r in data["records"]]


def _errors(records: list[WireRecord], truths: list[TruthRecord]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ttft": [], "e2e": [], "tpot": [], "itl": []}
    for record in records[1:]:  # the first call of a client is cold: excluded
        m = call_metrics(record)
        assert record.t_headers_ns is not None
        (truth,) = [
            t for t in truths if record.t_start_ns <= t.t_received_ns <= record.t_headers_ns
        ]
        content = truth.content_events
        first = (content[0].t_sent_ns - record.t_start_ns) / 1000
        last = (content[-1].t_sent_ns - record.t_start_ns) / 1000
        assert m.ttft is not None and m.e2e is not None and m.tpot is not None
        assert truth.output_tokens is not None
        out["ttft"].append((m.ttft - first) / 1000)
        out["e2e"].append((m.e2e - last) / 1000)
        out["tpot"].append((m.tpot - (last - first) / (truth.output_tokens - 1)) / 1000)
        out["itl"] += [(a - b / 1000) / 1000 for a, b in zip(m.itl, truth.itl_ns, strict=True)]
    return out


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(abs(v) for v in values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=41, help="calls per scenario (first cold)")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--decode-ms", type=float, default=2.0)
    args = parser.parse_args()
    process, base = _start_sim(args)
    http = httpx2.Client(base_url=base)
    pooled: dict[str, list[float]] = {"ttft": [], "e2e": [], "tpot": [], "itl": []}
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'scenario':38} {'metric':5} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    try:
        scenarios: list[tuple[str, str, bool, Callable[[Any], Any]]] = [
            (name, p, False, f) for name, (p, f) in _sync_calls().items()
        ] + [(name, p, True, f) for name, (p, f) in _async_calls().items()]
        for name, provider, is_async, call in scenarios:
            http.delete("/_sim/truth")
            records: list[WireRecord] = []
            client = _client(base, provider, is_async, records.append)
            if is_async:

                async def run(client: Any = client, call: Any = call) -> None:
                    async with client:
                        for _ in range(args.calls):
                            await call(client)

                asyncio.run(run())
            else:
                with client:
                    for _ in range(args.calls):
                        call(client)
            for metric, values in _errors(records, _truth(http)).items():
                pooled[metric] += values
                print(
                    f"{name:38} {metric:5} {len(values):5} {_pct(values, 50):8.3f} "
                    f"{_pct(values, 99):8.3f} {max(abs(v) for v in values):8.3f}"
                )
    finally:
        http.close()
        process.terminate()
        process.wait()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\npooled over every scenario (|measured − truth|):")
    for metric, values in pooled.items():
        signed = statistics.median(values)
        print(
            f"  {metric:5} n={len(values):5}  p50 {_pct(values, 50):.3f} ms  "
            f"p99 {_pct(values, 99):.3f} ms  (signed median {signed:+.3f} ms)"
        )


if __name__ == "__main__":
    main()
