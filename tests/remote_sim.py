"""The simulator in a process of its own, as a real server is: the plugin's in-process one
shares the consumer's GIL, so a server thread the machine preempts while it holds the GIL keeps
the consumer waiting without being runnable (docs/metrics.md, "A busy machine"), and a garbage
collection in the consumer stops the server too, so nothing is ever found buffered after it."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx2

from pytest_latency.metrics import CallMetrics
from pytest_latency.sim import LatencyModel, TruthEvent, TruthRecord
from pytest_latency.wire import WireRecord


def paced(*, decode_ms_per_token: float, output_tokens: int) -> tuple[str, ...]:
    """`sim` flags for a noise-free stream of one token a chunk, `decode_ms_per_token` apart,
    whose first token comes 1 ms after the request."""
    return (
        "--preset=instant",
        "--ttfb-ms=1",
        "--prefill-us-per-token=0",
        f"--decode-ms-per-token={decode_ms_per_token}",
        "--tokens-per-chunk=1",
        f"--output-tokens={output_tokens}",
        "--jitter=0",
    )


# A provider of 4 slots and a long line, each decode slowed by a quarter per other stream served;
# 8 tokens 4 to a chunk, 6 ms a token. Closed loop at 16 clients: 12 wait, three services each
# (ttft 26, 44 and 302 ms at 1, 4 and 16 clients). The model check of issue #17 runs on it,
# directly (test_sim_limit) and through the marker (test_plugin_load).
# 6 ms a token, not 3: a closed loop holds its 16 requests at the server only while the client
# keeps up, and the async openai SDK costs ~8 ms of CPU a streamed call here. At 3 ms the server
# answers 91 calls a second, 73 % of the client's core: the client sometimes fell behind for
# good, its calls waiting in its own event loop instead of the server's line (through the marker:
# the simulator's ttft p95 50-58 ms against 155, 43-48 of 48 calls flagged client_saturated, 3
# runs in 6, quiet, session 26; directly, beside a CI run's busy loops: p50 55 ms, every call
# flagged, session 27). At 6 ms, 46 calls a second.
FOUR_SLOTS = LatencyModel(
    ttfb_ms=2.0,
    prefill_us_per_token=0.0,
    decode_ms_per_token=6.0,
    tokens_per_chunk=4,
    concurrency_slowdown=0.25,
    output_tokens=8,
    max_concurrency=4,
    max_queue=64,
)


# The paced stream the accuracy checks of each client path share (test_capture_aiohttp,
# test_frameworks, test_sim_gemini): 12 tokens 4 ms apart, one a chunk.
PACED_DECODE_MS = 4.0
PACED_TOKENS = 12


@contextlib.contextmanager
def paced_simulator() -> Iterator[str]:
    """`remote_simulator` serving the shared paced stream; its base URL."""
    with remote_simulator(
        *paced(decode_ms_per_token=PACED_DECODE_MS, output_tokens=PACED_TOKENS)
    ) as base:
        yield base


def flags_of(model: LatencyModel) -> tuple[str, ...]:
    """`sim` flags that serve `model`: the instant preset and each field where it differs."""
    instant = LatencyModel.preset("instant")
    return (
        "--preset=instant",
        *(
            f"--{name.replace('_', '-')}={value}"
            for name, value in model.to_dict().items()
            if value != getattr(instant, name)
        ),
    )


@contextlib.contextmanager
def remote_simulator(*flags: str) -> Iterator[str]:
    """`pytest-latency sim` on a free port with `flags`; its base URL."""
    command = [sys.executable, "-m", "pytest_latency.cli", "sim", "--port=0", *flags]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "listening on" in line, line
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def truth_log(base_url: str) -> list[TruthRecord]:
    """What the simulator at `base_url` says it sent, every request so far."""
    data = httpx2.get(f"{base_url}/_sim/truth").json()
    records = data["records"] if isinstance(data, dict) else data
    return [TruthRecord.from_json(r) for r in records]


def truth_of(record: WireRecord, truths: list[TruthRecord]) -> TruthRecord:
    """The server's record of a captured attempt: the one it received while the client waited
    for the head."""
    assert record.t_headers_ns is not None
    (truth,) = [t for t in truths if record.t_start_ns <= t.t_received_ns <= record.t_headers_ns]
    return truth


@dataclass(frozen=True)
class Error:
    """How far one call's figures are from what the simulator sent, ms: measured - truth
    (`signed_error_of`), or its magnitude (`error_of`)."""

    ttft: float
    e2e: float
    tpot: float


def signed_error_of(record: WireRecord, measured: CallMetrics, truth: TruthRecord) -> Error:
    """The call's error against its truth, re-based on the client's own request start: ttft to
    the first content event sent, e2e to the last, tpot over the tokens between them."""
    content = truth.content_events
    first_us = (content[0].t_sent_ns - record.t_start_ns) / 1000
    last_us = (content[-1].t_sent_ns - record.t_start_ns) / 1000
    assert measured.ttft is not None and measured.e2e is not None and measured.tpot is not None
    assert truth.output_tokens is not None and truth.output_tokens > 1
    truth_tpot = (last_us - first_us) / (truth.output_tokens - 1)
    return Error(
        ttft=(measured.ttft - first_us) / 1000,
        e2e=(measured.e2e - last_us) / 1000,
        tpot=(measured.tpot - truth_tpot) / 1000,
    )


def error_of(record: WireRecord, measured: CallMetrics, truth: TruthRecord) -> Error:
    """|measured - truth| of the call's figures (`signed_error_of`), ms."""
    e = signed_error_of(record, measured, truth)
    return Error(abs(e.ttft), abs(e.e2e), abs(e.tpot))


def itl_errors(measured: CallMetrics, truth: TruthRecord) -> list[float]:
    """Each inter-token gap measured minus the server's, ms (as many gaps on both sides)."""
    return [
        (gap - sent / 1000) / 1000 for gap, sent in zip(measured.itl, truth.itl_ns, strict=True)
    ]


def content_times(record: WireRecord, measured: CallMetrics) -> list[int]:
    """Each content event's time as the call's metrics read it (ns, the record's clock): the
    ttft from the hand-off, then each gap; none without a ttft."""
    if measured.ttft is None:
        return []
    times = [record.t_start_ns + round(measured.ttft * 1000)]
    for gap in measured.itl:
        times.append(times[-1] + round(gap * 1000))
    return times


def _signed_span(stamp_ns: int, event: TruthEvent) -> tuple[int, int]:
    """A content stamp's signed error against the span in which its event's bytes left, least
    and most, ns."""
    first, last = event.sent_span_ns
    return stamp_ns - last, stamp_ns - first


def ttft_least_ms(stamp_ns: int, truth: TruthRecord) -> float:
    """The least |error| the first content stamp can have against what the simulator sent, ms
    (`error_span_ms`'s ttft figure, alone)."""
    lo, hi = _signed_span(stamp_ns, truth.content_events[0])
    return max(lo, -hi, 0) / 1e6


def error_span_ms(stamps_ns: list[int], truth: TruthRecord) -> tuple[float, float]:
    """The least and the most the call's worst |error| (its ttft, from the first content stamp,
    and each gap) can be against what the simulator sent, ms, from each content event's stamp
    and the span in which its bytes left (`TruthEvent.sent_span_ns`: a busy machine may preempt
    the simulator between the write and its note of it, ms apart). Each figure's least and most
    are taken alone: the least is a floor of what the kindest send times allow, the most a
    ceiling."""
    events = zip(stamps_ns, truth.content_events, strict=True)
    spans = [_signed_span(t, event) for t, event in events]
    figures = spans[:1] + [  # the ttft, then each gap
        (lo - before_hi, hi - before_lo)
        for (before_lo, before_hi), (lo, hi) in itertools.pairwise(spans)
    ]
    least = max((max(lo, -hi, 0) for lo, hi in figures), default=0)
    most = max((max(-lo, hi) for lo, hi in figures), default=0)
    return least / 1e6, most / 1e6


def without_arrivals(record: WireRecord) -> WireRecord:
    """The record as the loop's passes alone bound it: the kernel's arrival times (and what
    the peeked queues held) and the mid-pass probes' drained times left out."""
    return replace(
        record,
        arrival_passes=array("q"),
        arrivals_ns=array("q"),
        arrival_events=array("i"),
        arrival_ends=array("b"),
        arrival_fresh=array("b"),
        drained_passes=array("q"),
        drained_ns=array("q"),
    )


def away_after_the_role(
    client: Any, away_s: float, records: list[WireRecord], then: Callable[[], None] | None = None
) -> WireRecord:
    """One chat stream through `client` (an openai client instrumented to append to `records`):
    its role event read, the consumer away `away_s`, `then` called, the rest read; its record."""
    records.clear()
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "q"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = iter(stream)
    next(chunks)  # the role event
    time.sleep(away_s)  # the content events arrive meanwhile
    if then is not None:
        then()
    for _ in chunks:
        pass
    (record,) = records
    return record
