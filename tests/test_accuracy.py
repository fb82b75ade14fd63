"""Accuracy: what capture + metrics measure through the real SDKs agrees with what the simulator
says it sent, and when.

The simulator stamps every event right after its write with `perf_counter_ns` (CLOCK_MONOTONIC,
shared by every process on Linux), so the client's and the server's clocks are the same clock.
For each call, the truth is re-based on the client's own request start: the client's `ttft` is
compared with (server sent first content − client handed the request to the transport), and the
client's ITL gaps with the server's gaps. The difference is the measurement error of the tool:
loopback delivery plus the SDK-independent read path.

The product's targets are |error| <= 1 ms at p50 and <= 5 ms at p99; on a quiet machine this test
measures about 0.25 / 2-4 ms (ttft) and 0.02 / 2-3 ms (itl). But this 2-core machine is shared:
with both cores busy elsewhere (a compiler, another test run) the client process is descheduled
for a scheduler slice now and then, and the p99 reflects the scheduler, not the tool. So this
test asserts bounds that hold under that load (p50 <= 2 ms, p99 <= 20 ms, and no bias in the
gaps), which still catch every real capture error (consumer-paced stamps, SDK-parse bias: tens
of ms); benchmarks/bench_accuracy.py measures the figures against the targets side by side with
a bare-socket control and docs/performance.md reports them.
"""

from __future__ import annotations

import asyncio
import math
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from pytest_latency import capture
from pytest_latency.metrics import CallMetrics, call_metrics
from pytest_latency.sim import LatencyModel, TruthRecord
from pytest_latency.wire import WireRecord

MODEL = LatencyModel(
    ttfb_ms=1.0,
    prefill_us_per_token=200.0,
    decode_ms_per_token=2.0,
    tokens_per_chunk=1,
    output_tokens=24,
    jitter=0.0,
    seed=7,
)
MODEL_FLAGS = [
    "--ttfb-ms=1",
    "--prefill-us-per-token=200",
    "--decode-ms-per-token=2",
    "--tokens-per-chunk=1",
    "--output-tokens=24",
    "--jitter=0",
    "--seed=7",
]
P50_BOUND_MS = 2.0
P99_BOUND_MS = 20.0
CALLS = 16  # per scenario; the first is a warmup (cold connection, cold SDK types)
PROMPT = [{"role": "user", "content": "Count to twenty-four, one number per token."}]


class RemoteSim:
    """The simulator in its own process, as the accuracy claim needs: in-process, the server
    thread and the client share one GIL and each delays the other's clock readings."""

    def __init__(self, port: int) -> None:
        self.base_url = f"http://127.0.0.1:{port}"
        self.anthropic_base_url = self.base_url
        self.openai_base_url = f"{self.base_url}/v1"
        self._http = httpx2.Client(base_url=self.base_url)

    def truth(self) -> list[TruthRecord]:
        data = self._http.get("/_sim/truth").json()
        records = data["records"] if isinstance(data, dict) else data
        return [TruthRecord.from_json(r) for r in records]

    def clear_truth(self) -> None:
        self._http.delete("/_sim/truth").raise_for_status()

    def close(self) -> None:
        self._http.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[RemoteSim]:
    port = _free_port()
    command = [sys.executable, "-m", "pytest_latency.cli", "sim", f"--port={port}", *MODEL_FLAGS]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sim = RemoteSim(port)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if sim._http.get("/health").status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the simulator did not start within 20 s"
            time.sleep(0.05)
        yield sim
    finally:
        sim.close()
        process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def test_the_remote_simulator_runs_the_model_under_test(server: RemoteSim) -> None:
    model = server._http.get("/_sim/model").json()
    fields = model.get("model", model)
    assert fields["decode_ms_per_token"] == MODEL.decode_ms_per_token
    assert fields["output_tokens"] == MODEL.output_tokens


def _anthropic_create(client: Any) -> None:
    for _ in client.messages.create(
        model="claude-test", max_tokens=64, messages=PROMPT, stream=True
    ):
        pass


def _anthropic_stream(client: Any) -> None:
    with client.messages.stream(model="claude-test", max_tokens=64, messages=PROMPT) as s:
        for _ in s.text_stream:
            pass


def _openai_chat(client: Any) -> None:
    for _ in client.chat.completions.create(
        model="gpt-test",
        messages=PROMPT,
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    ):
        pass


def _openai_responses(client: Any) -> None:
    for _ in client.responses.create(model="gpt-test", input="Count.", stream=True):
        pass


async def _async_anthropic_create(client: Any) -> None:
    stream = await client.messages.create(
        model="claude-test", max_tokens=64, messages=PROMPT, stream=True
    )
    async for _ in stream:
        pass


async def _async_openai_chat(client: Any) -> None:
    stream = await client.chat.completions.create(
        model="gpt-test",
        messages=PROMPT,
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    )
    async for _ in stream:
        pass


async def _async_openai_responses(client: Any) -> None:
    stream = await client.responses.create(model="gpt-test", input="Count.", stream=True)
    async for _ in stream:
        pass


SYNC_SCENARIOS: dict[str, tuple[str, Callable[[Any], None]]] = {
    "anthropic.create(stream=True)": ("anthropic", _anthropic_create),
    "anthropic.messages.stream()": ("anthropic", _anthropic_stream),
    "openai.chat": ("openai", _openai_chat),
    "openai.responses": ("openai", _openai_responses),
}
ASYNC_SCENARIOS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "async anthropic.create(stream=True)": ("anthropic", _async_anthropic_create),
    "async openai.chat": ("openai", _async_openai_chat),
    "async openai.responses": ("openai", _async_openai_responses),
}


def _client(server: RemoteSim, provider: str, *, is_async: bool, sink: Any) -> Any:
    client: Any
    if provider == "anthropic":
        anthropic_cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
        client = anthropic_cls(base_url=server.anthropic_base_url, api_key="k", max_retries=0)
    else:
        openai_cls = openai.AsyncOpenAI if is_async else openai.OpenAI
        client = openai_cls(base_url=server.openai_base_url, api_key="k", max_retries=0)
    return capture.instrument(client, sink=sink)


def _pair(record: WireRecord, truths: list[TruthRecord]) -> TruthRecord:
    """The server's record of this attempt: the one it received while the client waited."""
    assert record.t_headers_ns is not None
    matches = [t for t in truths if record.t_start_ns <= t.t_received_ns <= record.t_headers_ns]
    assert len(matches) == 1, f"{len(matches)} server records overlap one client call"
    return matches[0]


def _errors(records: list[WireRecord], truths: list[TruthRecord]) -> dict[str, list[float]]:
    """Signed client − truth differences in ms, per metric, warmup call excluded."""
    out: dict[str, list[float]] = {"ttft": [], "e2e": [], "tpot": [], "itl": []}
    for record in records[1:]:
        measured: CallMetrics = call_metrics(record)
        truth = _pair(record, truths)
        content = truth.content_events
        assert measured.error is None and measured.ttft is not None and measured.e2e is not None
        assert measured.output_tokens == truth.output_tokens
        first_us = (content[0].t_sent_ns - record.t_start_ns) / 1000
        last_us = (content[-1].t_sent_ns - record.t_start_ns) / 1000
        out["ttft"].append((measured.ttft - first_us) / 1000)
        out["e2e"].append((measured.e2e - last_us) / 1000)
        assert truth.output_tokens is not None and measured.tpot is not None
        truth_tpot = (last_us - first_us) / (truth.output_tokens - 1)
        out["tpot"].append((measured.tpot - truth_tpot) / 1000)
        assert len(measured.itl) == len(truth.itl_ns)
        out["itl"].extend(
            (m - t / 1000) / 1000 for m, t in zip(measured.itl, truth.itl_ns, strict=True)
        )
    return out


def _run_sync(server: RemoteSim, provider: str, call: Callable[[Any], None]) -> list[WireRecord]:
    records: list[WireRecord] = []
    with _client(server, provider, is_async=False, sink=records.append) as client:
        for _ in range(CALLS):
            call(client)
    return records


def _run_async(server: RemoteSim, provider: str, call: Callable[[Any], Any]) -> list[WireRecord]:
    records: list[WireRecord] = []

    async def run() -> None:
        async with _client(server, provider, is_async=True, sink=records.append) as client:
            for _ in range(CALLS):
                await call(client)

    asyncio.run(run())
    return records


@pytest.fixture(scope="module")
def pooled_errors(server: RemoteSim) -> dict[str, list[float]]:
    """Every scenario's errors, pooled: a p99 needs a hundred values, not one scenario's five."""
    pooled: dict[str, list[float]] = {"ttft": [], "e2e": [], "tpot": [], "itl": []}
    runs: list[tuple[bool, str, Callable[[Any], Any]]] = [
        (False, p, c) for p, c in SYNC_SCENARIOS.values()
    ] + [(True, p, c) for p, c in ASYNC_SCENARIOS.values()]
    for is_async, provider, call in runs:
        server.clear_truth()
        records = (_run_async if is_async else _run_sync)(server, provider, call)
        assert len(records) == CALLS
        for metric, values in _errors(records, server.truth()).items():
            pooled[metric].extend(values)
    return pooled


def _nearest_rank(sorted_values: list[float], p: float) -> float:
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


@pytest.mark.parametrize("metric", ["ttft", "e2e", "tpot", "itl"])
def test_measured_metrics_agree_with_ground_truth(
    pooled_errors: dict[str, list[float]], metric: str
) -> None:
    values = pooled_errors[metric]
    absolute = sorted(abs(v) for v in values)
    p50, p99 = statistics.median(absolute), _nearest_rank(absolute, 99)
    print(f"{metric}: n={len(values)} |error| p50={p50:.3f} ms p99={p99:.3f} ms")
    assert len(values) >= 100 if metric != "itl" else len(values) >= 1000
    assert p50 <= P50_BOUND_MS, f"{metric}: |error| p50 = {p50:.3f} ms (n={len(values)})"
    assert p99 <= P99_BOUND_MS, f"{metric}: |error| p99 = {p99:.3f} ms (n={len(values)})"
    # The error is a delivery delay, not a bias: its signed median sits near zero for gaps. A
    # biased stamp (two events stamped at one read, a gap measured short and the next long)
    # moves it by a whole gap, 2 ms here; a busy machine by a fifth of one (-0.21 ms beside two
    # CPU hogs and a second xdist worker, whose gaps were off ±1.8 ms either way).
    if metric in ("itl", "tpot"):
        assert abs(statistics.median(values)) <= 0.5
