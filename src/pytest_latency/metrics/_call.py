"""Per-call metrics: one `WireRecord` in, one `CallMetrics` out.

Owns the definitions of the per-call metrics (ttfb, ttft, ttfo, e2e, tpot, itl), the error kinds
a call can end with, the incomplete/opaque/capped/consumer-bound/client-saturated/cpu-starved
flags (their names, wording and policy are `catalogue.FLAG_SPECS`) and the plain-data form that
travels on test reports. Pure and deterministic; may import only the stdlib, `pytest_latency.wire`,
`pytest_latency.untrusted`, `pytest_latency.catalogue` and its sibling private modules (never
pytest, never httpx).
See docs/metrics.md.
"""

from __future__ import annotations

import bisect
import enum
import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Final
from urllib.parse import urlsplit

from pytest_latency.catalogue import DISTORTING_FLAGS
from pytest_latency.metrics import apis
from pytest_latency.metrics._asked import asked_shown
from pytest_latency.metrics._body import decode_reads
from pytest_latency.metrics._ends import counted_ends
from pytest_latency.metrics._fingerprint import (
    PREFIX_HASH_CHARS,
    estimated_tokens,
    output_print,
    prompt_text,
    request_print,
)
from pytest_latency.metrics._pace import Pace, Reads, behind, consumer_pace, wake_delay
from pytest_latency.metrics._scan import json_object as _json_object
from pytest_latency.metrics._scan import scan_body, scan_error
from pytest_latency.metrics.apis import REASONING, UNKNOWN
from pytest_latency.untrusted import safe_token
from pytest_latency.wire import (
    DECODED_LIMIT,
    ONE_RECORD,
    READ_COST,
    LoopLag,
    WireRecord,
)

# Client saturation (docs/metrics.md, "Client saturation"): an async call is flagged when its event
# loop woke up more than this late from a 10 ms sleep while the call was in flight. A chunk that
# arrives while the loop is busy is stamped when the loop gets to it, so this bounds how far the
# call's stamps can be off. Measured on a loaded 2-core box: healthy loops show up to ~7 ms (the
# GIL's 5 ms switch interval against an in-process server) and up to ~22 ms in a pytest run (SDK
# first-use work, a GC pass, preemption); 50 streams give 150 ms, 200 streams 750 ms and more.
SATURATED_LAG_MS = 50.0
# A busy machine (docs/metrics.md, "A busy machine"): an async call is flagged `cpu_starved` also
# when its loop woke up more than this late for want of a CPU (the lateness less the loop's own
# work and garbage collection's pauses: its thread's run-queue wait), the p99 accuracy target.
# Beside two CPU hogs, 16 streams in one process were stamped 9-22 ms late with their loop late by
# 21-26 ms, 15-19 ms of it in the run queue: under SATURATED_LAG_MS, and unflagged before this
# (session 12). On a quiet machine the same 16 streams' loop woke up 2.6-3.2 ms late, nearly all
# of it its own work.
STARVED_LAG_MS = 5.0
# A call is flagged when its stamps may be off by more than this (`_stamp_bounds`): the
# p99 accuracy target. Measured against the simulator's send times (benchmarks/bench_ceiling.py),
# the loop-lag ticks missed most late calls below SATURATED_LAG_MS: at 150-200 streams a chunk's
# way from the socket to its stamp takes two or three long passes while a 10 ms timer is late by
# about one (issue #17; docs/performance.md, "Honest ceilings").
STAMP_TARGET_MS = STARVED_LAG_MS


@dataclass(frozen=True, slots=True)
class CallMetrics:
    """The metrics of one HTTP attempt. Times are microseconds from this attempt's request being
    handed to the transport (its own figures: the public `ttft` of a retried call adds
    `waited_us`, see `calls.metric_value`); `None` means absent (not measurable), never zero."""

    api: str  # metrics.APIS: anthropic.messages, openai.chat, …, gemini.generate_content, unknown
    model: str | None
    endpoint: str  # URL path
    host: str  # host[:port], never user info
    stream: bool  # the request asked for a stream, or the response was one
    status: int | None
    attempt: int  # x-stainless-retry-count: 0 first try, n for the n-th retry
    ttfb: float | None
    ttft: float | None
    ttfo: float | None
    e2e: float | None
    tpot: float | None
    itl: tuple[float, ...]
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    reasoning_tokens: int | None
    cache_fields_reported: bool
    content_events: int
    content_chunks: int  # reads that completed at least one content event
    channels: tuple[str, ...]  # in first-seen order
    # http_<status> | sse_error:<type> | body_error:<type> | <exception name> | truncated
    error: str | None
    error_detail: str | None
    incomplete: bool  # neither EOF nor the end marker was read (an early break, or a failure)
    opaque: bool  # content encoding we cannot decode: content metrics absent
    consumer_bound: bool
    consumer_bound_chunks: int
    t_start_ns: int
    t_end_ns: int
    notes: tuple[str, ...] = field(default=())
    # What prices need beyond the counts above (docs/metrics.md, "Usage normalisation"): the part
    # of `cache_write_tokens` written to a 1-hour cache (None: the server did not split its
    # writes by TTL), and the service tier the response named, the latest one it sent.
    cache_write_1h_tokens: int | None = None
    service_tier: str | None = None
    # The per-call keep limits (docs/metrics.md, "What a call keeps"): capture kept the body up to
    # `wire.KEEP_LIMIT`, inflating stopped at `wire.DECODED_LIMIT`, or the SSE walk at
    # `wire.EVENT_LIMIT` events. The metrics cover the kept
    # part; `dropped_bytes` received bytes were never read for content (not kept, or kept but not
    # decoded) and `dropped_reads` reads were not kept at all. The reason is in `notes`.
    capped: bool = False
    dropped_bytes: int = 0
    dropped_reads: int = 0
    # Fingerprints for diagnosis (docs/metrics.md, "Prompt and output fingerprints"): sizes and
    # hashes, never text. Defaults keep data written before they existed readable.
    prompt_chars: int | None = None
    prefix_hashes: tuple[str, ...] = ()
    cache_breakpoint_chars: int | None = None
    cache_breakpoint_tokens: int | None = None
    request_shingles: tuple[int, ...] = ()
    output_shingles: tuple[int, ...] = ()
    output_digests: tuple[int, ...] = ()
    # Client saturation (docs/metrics.md): the worst lateness of the event loop's wake-ups while
    # this call was in flight, in ms; None for sync calls and where no loop monitor ran.
    loop_lag_max_ms: float | None = None
    # The most this call's ttft or one of its gaps can be off (its data waiting for a busy loop
    # to read and stamp it), in ms, once each stamp is moved back by the lateness the loop's
    # passes and the kernel's arrival times show: `_stamp_bounds`. None for sync calls and where
    # the loop's passes could not be timed.
    stamp_error_max_ms: float | None = None
    client_saturated: bool = False
    # The stamps were held back by a busy machine, not by the client: the consumer's absences
    # that would make the call consumer-bound, or the loop lag that would make it saturated,
    # were (mostly) its thread waiting for a CPU (docs/metrics.md, "A busy machine").
    cpu_starved: bool = False
    # Held back as much, but by garbage collection holding the process (`gc_pauses`): the
    # collector, which no change to the test body's per-chunk work would cure (docs/metrics.md,
    # "Garbage collection").
    gc_paused: bool = False
    # Prompt and output text, only with --latency-capture-text=N (capped at N characters each);
    # None by default, so no text reaches the outputs.
    prompt_text: str | None = None
    output_text: str | None = None
    # µs from the first attempt of this attempt's call being handed to the transport to this one
    # being handed over: the attempts the SDK retried and its back-off. 0 for a first attempt;
    # stamped when attempts are grouped into a call (`calls.Call.of`), never by `call_metrics`.
    waited_us: float = 0.0
    # µs from the intended start of this attempt's sample (an open-loop rate's schedule) to its
    # call's first hand-off: the `queue` metric, the same for every attempt of the call. None in
    # a closed loop; stamped when attempts are grouped into a call, never by `call_metrics`.
    queued_us: float | None = None
    # The call's price in micro-US-dollars (`cost`), what its cache reads saved and its cache
    # writes cost extra against plain input, and which table priced it or why none did
    # (`pricing`: "genai-prices", "budgets.toml", "no price", "no usage"). Stamped by
    # `pricing.Prices.stamp` once the test's calls are in, never by `call_metrics`: None until
    # then (and in files written before costs existed).
    cost: float | None = None
    cost_cache_saved: float | None = None
    cost_cache_extra: float | None = None
    price_source: str | None = None

    @property
    def flagged(self) -> tuple[str, ...]:
        """Why this call's timings do not measure the server, if they do not: its set flags of
        `catalogue.DISTORTING_FLAGS` (consumer_bound, client_saturated, capped, cpu_starved), in
        that order."""
        return tuple(name for name in DISTORTING_FLAGS if getattr(self, name))

    @property
    def stamps_late_ms(self) -> float | None:
        """The most this call's stamps may be late by its event loop (ms): the loop's passes'
        bound (`stamp_error_max_ms`) or its lag monitor's worst wake-up, the larger. What a
        `client_saturated` call is said to be off by."""
        known = [v for v in (self.stamp_error_max_ms, self.loop_lag_max_ms) if v is not None]
        return max(known) if known else None

    @property
    def failed(self) -> bool:
        """Counts towards error_rate. An early break by the test (`incomplete` alone) does not."""
        return self.error is not None

    def to_dict(self, *, fingerprints: bool = True) -> dict[str, Any]:
        """Plain JSON-able data (it travels on test reports, across pytest-xdist): every field
        but those holding their empty value (None, 0, False, "", ()), which `from_dict` restores.
        `fingerprints=False` leaves out the request/output shingles, which only the per-test
        serial-calls check reads: once a test is diagnosed they are ~90 % of a call's size."""
        out: dict[str, Any] = {}
        for name, empty in _empty_values().items():
            value = getattr(self, name)
            if value == empty and type(value) is type(empty):
                continue
            if not fingerprints and name in SERIAL_FINGERPRINTS:
                continue
            if name == "prefix_hashes" and all(len(h) == PREFIX_HASH_CHARS for h in value):
                out[name] = "".join(value)  # fixed-width digests: one string, no separators
                continue
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallMetrics:
        kwargs: dict[str, Any] = {}
        for name, empty in _empty_values().items():
            value = data.get(name, empty)
            if name == "prefix_hashes" and isinstance(value, str):
                value = [
                    value[i : i + PREFIX_HASH_CHARS]
                    for i in range(0, len(value), PREFIX_HASH_CHARS)
                ]
            kwargs[name] = tuple(value) if isinstance(value, list) else value
        return cls(**kwargs)

    def without_fingerprints(self, *, prefix: bool = True) -> CallMetrics:
        """This call without the shingles only per-test diagnosis reads (see `to_dict`), and,
        with `prefix=False`, without its prefix hashes too (a call the cache checks of a group
        will not compare)."""
        drop_prefix = not prefix and bool(self.prefix_hashes)
        if not (
            self.request_shingles or self.output_shingles or self.output_digests or drop_prefix
        ):
            return self
        return replace(
            self,
            request_shingles=(),
            output_shingles=(),
            output_digests=(),
            prefix_hashes=() if drop_prefix else self.prefix_hashes,
        )


# The fields only the per-test serial-calls check reads (diagnose._serial).
SERIAL_FINGERPRINTS: Final = frozenset({"request_shingles", "output_shingles", "output_digests"})


@functools.cache
def _empty_values() -> dict[str, object]:
    """Each field's empty value, from its annotation: what an absent key in `to_dict`'s output
    stands for (an optional field's None, a count's 0, a flag's False, a tuple's ())."""
    empties: dict[str, object] = {}
    for f in fields(CallMetrics):
        kind = str(f.type)
        if f.default is not MISSING:
            empties[f.name] = f.default
        elif kind.endswith("| None"):
            empties[f.name] = None
        elif kind.startswith("tuple"):
            empties[f.name] = ()
        elif kind == "bool":
            empties[f.name] = False
        elif kind == "int":
            empties[f.name] = 0
        elif kind == "str":
            empties[f.name] = ""
        else:  # pragma: no cover - a new field type needs its empty value here
            raise TypeError(f"CallMetrics.{f.name}: no empty value for {kind}")
    return empties


def call_metrics(record: WireRecord) -> CallMetrics:
    """Compute the metrics of one recorded attempt. Never raises on malformed input: what cannot
    be read is absent and said so in `notes`. Should a bug in the parsing still raise, the call
    is kept as an error (`metrics_error`, the exception's type as its detail): one call's bytes
    must not end the run or lose what every other call measured."""
    try:
        return _call_metrics(record)
    except Exception as exc:  # the promise above; the type names the bug
        endpoint, host = _split_url(record.url)
        values = dict(_empty_values())
        values.update(
            api=UNKNOWN,
            endpoint=endpoint,
            host=host,
            status=record.status,
            attempt=record.attempt,
            error="metrics_error",
            # The type only: an exception's text may quote the body or a header.
            error_detail=type(exc).__name__,
            t_start_ns=record.t_start_ns,
            t_end_ns=_t_end(record),
            notes=(f"metrics_error: the response could not be parsed ({type(exc).__name__})",),
        )
        return CallMetrics(**values)  # type: ignore[arg-type]


def _call_metrics(record: WireRecord) -> CallMetrics:
    if record.t_cut_ns is not None:
        # Cut off by its test's end: what had arrived by then, whatever the thread did later.
        cut = record.t_cut_ns
        record = replace(
            record, reads=[r for r in record.reads if r[1] <= cut], t_eof_ns=None, error=None
        )
    t0 = record.t_start_ns
    endpoint, host = _split_url(record.url)
    payload = _json_object(record.request_body)
    # The path's adapter says what the request asked for (a sniffed API names it in the body).
    model, asked_stream = apis.for_path(endpoint).request(endpoint, payload)
    prompt = request_print(payload)
    body = decode_reads(record.reads, record.content_encoding)
    scan = scan_body(endpoint, record.content_type, asked_stream, body)
    if record.prefetched:
        scan.note("prefetched: body was in memory before the transport returned; no token timing")
    if record.cancelled:
        # The caller's choice (a hedge's loser, its own asyncio.timeout), as an early close is:
        # an error_rate budget does not count it; the SDK's timeout= makes a slow call a failure.
        scan.note("cancelled: the caller cancelled the call before it ended; not an error")
    capped = record.capped or body.capped or scan.capped
    if record.capped:
        kept = sum(len(data) for _, _, data in record.reads)
        scan.note(
            f"capped: kept the first {kept:,} body bytes in {len(record.reads):,} reads (limit "
            f"{record.keep_limit:,} B counting {READ_COST} B a read); not kept: "
            f"{record.dropped_bytes:,} bytes, {record.dropped_reads:,} reads"
        )
    if body.capped:
        scan.note(
            f"capped: inflating stopped at {DECODED_LIMIT:,} decoded bytes; "
            f"{body.undecoded_bytes:,} received bytes not decoded"
        )

    def us(t_ns: int | None) -> float | None:
        return None if t_ns is None else (t_ns - t0) / 1000

    content = scan.content
    timed = scan.streamed and not record.prefetched and scan.api != UNKNOWN
    stamps = [t for t, _, _ in content]
    # Each read's events as a peek counts them, and whether the parser agrees (`_ends`): what
    # the kernel's counts of whole events are matched with.
    peeked = timed and content and (record.arrival_passes or record.asked_arrivals)
    ended, agree = (
        counted_ends([chunk for _, _, chunk in record.reads], scan.event_reads, scan.end_read)
        if peeked
        else ([], bytearray())
    )
    bounds = (
        None
        if record.loop_lag is None or not (timed and content)
        else _stamp_bounds(record.loop_lag, stamps, t0, record, ended, agree)
    )
    # Each content event's time: the earliest its arrival is shown by (its stamp, less the
    # lateness the loop's passes and the kernel's arrival times show); never before it came.
    # A sync call's, by the kernel's arrival times at the consumer's asks (`asked_shown`).
    if bounds is not None:
        times = bounds.shown
    elif peeked and record.asked_arrivals:
        times = asked_shown(record, [(t, read) for t, read, _ in content], ended, agree)
    else:
        times = stamps
    ttft = ttfo = e2e = tpot = None
    itl: tuple[float, ...] = ()
    usage = scan.usage.result() if scan.usage is not None else None
    if timed and content:
        ttft = us(times[0])
        answers = (
            t
            for t, (_, _, chs) in zip(times, content, strict=True)
            if any(c != REASONING for c in chs)
        )
        ttfo = next((us(t) for t in answers), None)
        e2e = us(times[-1])
        itl = tuple((b - a) / 1000 for a, b in itertools.pairwise(times))
        out = usage.output_tokens if usage is not None else None
        if ttft is not None and e2e is not None and out is not None and out > 1:
            tpot = (e2e - ttft) / (out - 1)
    else:
        # No token timing exists (non-streaming, opaque, unknown API, prefetched, or no content
        # at all): e2e is the body's end, its EOF or, where the client stopped at the stream's
        # end marker instead (openai's sync Stream at [DONE], an SDK raising on an error event),
        # that marker's arrival.
        end = record.t_eof_ns if record.t_eof_ns is not None else scan.t_end_marker_ns
        e2e = us(record.t_headers_ns if record.prefetched else end)

    reads_with_content = sorted({read for _, read, _ in content})
    # Read-ahead stamps arrivals in its own thread or task: the consumer's pace is not in them.
    paced_by_consumer = not (record.prefetched or record.read_ahead)
    on = Reads(record) if paced_by_consumer else None  # one reading of them, for three judges
    pace = consumer_pace(on, reads_with_content) if on is not None else Pace()
    consumer_bound = pace.bound(len(reads_with_content))
    # Held back as much, but by garbage collection: the process's collector, not the test body.
    consumer_paused = not consumer_bound and pace.bound(len(reads_with_content), paused=True)
    if consumer_paused:
        scan.note(
            f"gc_paused: garbage collection held the process "
            f"{sum(ns for _, ns in record.paused) / 1e6:.0f} ms while the call's data waited "
            "to be read: the collector, not the test body"
        )
    # Held back as much, but by waiting for a CPU: the machine's doing, said so.
    consumer_starved = (
        not consumer_bound
        and not consumer_paused
        and pace.bound(len(reads_with_content), queued=True)
    )
    if consumer_starved:
        scan.note(
            f"cpu_starved: {pace.starved_chunks} chunks were found buffered after the test had "
            f"been away {pace.starved_away_ns / 1e6:.0f} ms, {pace.starved_queued_ns / 1e6:.0f} "
            "ms of it waiting for a CPU: a busy machine, not the test body"
        )

    # A sync consumer behind the stream by more than the target, where the detector above did
    # not see it: absences each too short to count (litellm's sync stream parses a 2 ms-a-token
    # stream at about its pace and stays 10-26 ms behind, every absence under a millisecond).
    # The socket's word at an ask bounds it from below (`_pace.behind`); whose doing, the span
    # from that ask to the read says.
    sync = on if timed and content and record.loop_lag is None else None
    lag = behind(sync, times, [read for _, read, _ in content]) if sync is not None else None
    if (
        lag is not None
        and lag.late_ns > STAMP_TARGET_MS * 1e6
        and not (consumer_bound or consumer_paused or consumer_starved)
    ):
        late_ms = lag.late_ns / 1e6
        # The test body's where its own absences over the span account for at least half the
        # lateness (litellm parsing each event just under the stream's pace), the collector's
        # where its pauses do; else the machine's. The rest of the lateness is the reads' own
        # time, preempted, or held off the GIL by another thread: an in-process simulator's,
        # writing (its test suite's reads took 12 ms over 9 chunks, away 2 ms of their own,
        # beside two CPU hogs), litellm's logging threads (a "0 ms" collection was blamed
        # before this rule; session 24). Neither is the test body's work per chunk.
        if lag.own_ns * 2 >= lag.late_ns:
            consumer_bound = True
            pace.bound_chunks = max(pace.bound_chunks, lag.chunks)
            scan.note(
                f"consumer_bound: a content event's time is at least {late_ms:.0f} ms late: its "
                "data was in the socket when the test asked for a read, and the test read "
                f"{lag.chunks} chunks before it, away {lag.own_ns / 1e6:.0f} ms in all"
            )
        elif lag.paused_ns * 2 >= lag.late_ns:
            consumer_paused = True
            scan.note(
                f"gc_paused: a content event's time is at least {late_ms:.0f} ms late: garbage "
                f"collection held the process {lag.paused_ns / 1e6:.0f} ms meanwhile, the test "
                f"away {lag.own_ns / 1e6:.0f} ms of its own: the collector, not the test body"
            )
        else:
            consumer_starved = True
            scan.note(
                f"cpu_starved: a content event's time is at least {late_ms:.0f} ms late: the "
                f"test's thread waited {lag.queued_ns / 1e6:.0f} ms for a CPU meanwhile, away "
                f"{lag.own_ns / 1e6:.0f} ms of its own, the rest in its reads (a busy machine, "
                "or another thread holding the GIL), not the test body"
            )

    # A sync read that waited for its data, stamped late because its thread, woken by the data,
    # waited for a CPU: a busy machine's doing (`_pace.wake_delay`).
    woken = wake_delay(sync, reads_with_content) if sync is not None else 0
    flagged = consumer_bound or consumer_paused or consumer_starved
    if woken > STAMP_TARGET_MS * 1e6 and not flagged:
        consumer_starved = True
        scan.note(
            f"cpu_starved: a read's data came at least {woken / 1e6:.0f} ms before the test's "
            "thread, woken by it, got a CPU to take it: a busy machine, not the test body"
        )

    error, detail = scan_error(record, scan, capped=capped)
    output_pieces = scan.output.pieces()
    out_shingles, out_digests = output_print(output_pieces)
    t_end = _t_end(record)
    lags = None if record.loop_lag is None else _loop_lag_max_ms(record.loop_lag, t0, t_end)
    lag_ms, own_lag_ms, paused_lag_ms, gc_ms = lags if lags is not None else (None,) * 4
    stamp_error, stamp_own = (None, None) if bounds is None else (bounds.error_ms, bounds.own_ms)
    # Stamps that may be off by more than the target (issue #17); whose doing, the passes' own
    # waits for a CPU and the ticks say.
    late_stamps = stamp_error is not None and stamp_error > STAMP_TARGET_MS
    woken_late = late_stamps and stamp_own is not None and stamp_own <= STAMP_TARGET_MS
    lagged = own_lag_ms is not None and own_lag_ms > SATURATED_LAG_MS
    # A collection that held the loop past the target while stamps may be that late, and
    # explains it (what the loop's own work leaves is within the target): the collector's
    # doing (one 40-45 ms collection stalled 150 aiohttp streams at once, every one 20-40 ms
    # late, with the loop's lag under SATURATED_LAG_MS; bench_ceiling, no freeze). A 6 ms
    # collection in a call whose stamps may be 900 ms late (200 streams burning the loop) is
    # not.
    gc_explains = (
        gc_ms is not None
        and gc_ms > STAMP_TARGET_MS
        and (stamp_own is None or stamp_own - gc_ms <= STAMP_TARGET_MS)
    )
    loop_paused = not lagged and (
        (paused_lag_ms is not None and paused_lag_ms > SATURATED_LAG_MS)
        or (late_stamps and gc_explains)
    )
    if loop_paused:
        scan.note(
            f"gc_paused: the event loop woke up to {lag_ms:.0f} ms late while garbage "
            f"collection held the process {gc_ms:.0f} ms (its own work explains "
            f"{own_lag_ms:.0f} ms)"
        )
    # The machine held the stamps: by the passes (their late part was the woken thread's wait
    # for a CPU), or by the ticks (a wake-up that much later than the loop's own work explains).
    # Where the passes bound the stamps within the target, a tick's wait for a CPU under
    # SATURATED_LAG_MS says whose doing a late stamp would be, not that one was: the timer was
    # late, the data's stamps were not. One such tick (6.6 ms late, at 75 streams) flagged all
    # 75 calls in flight, every one within the target by the simulator's truth; of 143 punctual
    # calls flagged in a focused run, 92 were such ticks', and they flagged no late call the
    # bound had not (benchmarks/bench_ceiling.py, session 18).
    ticks_starved = (
        lag_ms is not None
        and paused_lag_ms is not None
        and (
            paused_lag_ms <= SATURATED_LAG_MS < lag_ms
            or (lag_ms - paused_lag_ms > STARVED_LAG_MS and (stamp_error is None or late_stamps))
        )
    )
    loop_starved = not lagged and not loop_paused and (woken_late or ticks_starved)
    if loop_starved and woken_late:
        scan.note(
            f"cpu_starved: a stamp may be up to {stamp_error:.0f} ms late, all but "
            f"{stamp_own:.1f} ms of it the event loop's thread waiting for a CPU once data "
            "arrived: a busy machine"
        )
    elif loop_starved:
        # Late, but not from the loop's own work: the machine (or another thread holding the
        # GIL) kept the process off the CPU. The client did not saturate; its stamps still
        # carry the wait, so say it.
        scan.note(
            f"cpu_starved: the event loop woke up to {lag_ms:.0f} ms late while this process "
            f"waited for a CPU (its own work explains {own_lag_ms:.0f} ms): a busy machine"
        )
    # Late stamps with neither the machine nor the collector to blame: the loop's own work. The
    # ticks' evidence of a wait for a CPU wins over the passes': a busy pass the process spent
    # preempted looks like its own work to the passes (only a waiting select's wake-up is read).
    saturated = lagged or (late_stamps and not loop_starved and not loop_paused)
    if saturated and not lagged:
        scan.note(
            f"client_saturated: a stamp may be up to {stamp_error:.0f} ms late: the event loop's "
            "passes ran long with its own work while the data waited"
        )
    limit = record.text_limit
    channels: list[str] = []
    for _, _, chs in content:
        channels.extend(c for c in chs if c not in channels)
    return CallMetrics(
        api=scan.api,
        model=_model_name(model if model is not None else scan.model),
        endpoint=endpoint,
        host=host,
        stream=asked_stream or scan.streamed,
        status=record.status,
        attempt=record.attempt,
        ttfb=us(record.t_headers_ns),
        ttft=ttft,
        ttfo=ttfo,
        e2e=e2e,
        tpot=tpot,
        itl=itl,
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        cache_read_tokens=usage.cache_read_tokens if usage else None,
        cache_write_tokens=usage.cache_write_tokens if usage else None,
        reasoning_tokens=usage.reasoning_tokens if usage else None,
        cache_write_1h_tokens=usage.cache_write_1h_tokens if usage else None,
        service_tier=_tier_name(scan.service_tier),
        cache_fields_reported=usage.cache_fields_reported if usage else False,
        content_events=len(content),
        content_chunks=len(reads_with_content),
        channels=tuple(channels),
        error=error,
        error_detail=detail,
        # Not read to its end: neither EOF nor the protocol's own end marker was reached (the
        # openai SDK's sync Stream stops at [DONE] and closes without reading to EOF).
        incomplete=record.t_eof_ns is None and not scan.terminal,
        opaque=body.opaque is not None,
        consumer_bound=consumer_bound,
        consumer_bound_chunks=pace.bound_chunks,
        t_start_ns=t0,
        t_end_ns=t_end,
        notes=tuple(scan.notes),
        capped=capped,
        dropped_bytes=record.dropped_bytes + body.undecoded_bytes,
        dropped_reads=record.dropped_reads,
        prompt_chars=prompt.chars,
        prefix_hashes=prompt.prefix_hashes,
        cache_breakpoint_chars=prompt.breakpoint_chars,
        cache_breakpoint_tokens=estimated_tokens(prompt.breakpoint_chars),
        request_shingles=prompt.shingles,
        output_shingles=out_shingles,
        output_digests=out_digests,
        loop_lag_max_ms=lag_ms,
        stamp_error_max_ms=None if stamp_error is None else round(stamp_error, 3),
        client_saturated=saturated,
        gc_paused=consumer_paused or loop_paused,
        cpu_starved=consumer_starved or loop_starved,
        prompt_text=prompt_text(payload)[:limit] if limit > 0 and payload is not None else None,
        output_text="".join(output_pieces)[:limit] if limit > 0 else None,
    )


def _model_name(name: str | None) -> str | None:
    """A model name as kept and shown: the server's (or the request's) string as one printable
    word without secrets; None stays None."""
    return None if name is None else safe_token(name, 120) or None


def _tier_name(name: str | None) -> str | None:
    """A service tier as kept: the server's string as one short printable word without
    secrets (a tier name is a word: "default", "flex", "standard"); None stays None."""
    return None if name is None else safe_token(name, 40) or None


def _loop_lag_max_ms(
    log: LoopLag, t_start: int, t_end: int
) -> tuple[float, float, float, float] | None:
    """The worst lateness of a wake-up whose late span overlaps [t_start, t_end], the worst of
    what the loop's own work explains, the worst of that with garbage collection's pauses, and
    the worst of the pauses alone (ms): a wake-up at w that was l late means the loop could not
    run from w − l to w. None when no wake-up fell in the window (a call shorter than one tick,
    or a loop that stopped).

    A span that began before the call counts only from the call's start: the loop ran the
    call's hand-off, so whatever held it had let go by then, and only the wait after it delayed
    the call's stamps. (A test body that works 100 ms on the loop, then starts calls, had the
    monitor's wake-up land just after the calls' hand-offs, and those calls were flagged
    client-saturated with the whole 100 ms: the examples' hedging test, issue #14.)"""
    wakes, lates, owns, paused = log.wakes_ns, log.lates_ns, log.owns_ns, log.paused_ns
    worst: int | None = None
    worst_own = worst_paused = worst_gc = 0
    index = bisect.bisect_left(wakes, t_start)
    while index < len(wakes):
        woke, late = wakes[index], max(lates[index], 0)
        if woke - late > t_end:
            # Ticks are back to back: once a late span starts after the call, all later ones do.
            break
        seen = min(late, woke - t_start)  # the part of the span after the call's start
        worst = seen if worst is None else max(worst, seen)
        own = min(owns[index], seen)
        worst_own = max(worst_own, own)
        worst_paused = max(worst_paused, min(owns[index] + paused[index], seen))
        worst_gc = max(worst_gc, min(paused[index], seen))
        index += 1
    if worst is None:
        return None
    return worst / 1e6, worst_own / 1e6, worst_paused / 1e6, worst_gc / 1e6


@dataclass(frozen=True, slots=True)
class _Shown:
    """What the loop's passes and the kernel's arrival times show of a call's content stamps."""

    # Each stamp less the lateness shown: the earliest time its event is shown to have come by.
    shown: list[int]
    # The most the ttft or a gap read from `shown` can be off, and the most of that the loop's
    # own doing (less its thread's waits for a CPU once woken: a busy machine's), in ms.
    error_ms: float
    own_ms: float


def _stamp_bounds(
    log: LoopLag,
    stamps: Sequence[int],
    t_start: int,
    record: WireRecord,
    ended: Sequence[int],
    agree: Sequence[int],
) -> _Shown | None:
    """How late each content stamp is shown to be, at least and at most, by the loop's passes
    and the kernel's arrival times; the stamps less the least (`_Shown.shown`, what the call's
    timings are read from), and how far those can still be off.

    A stamp taken in the pass whose select returned at S is late by at least t - S (its data
    was there by then). The data was read off the socket by a callback `record.stamp_passes`
    passes earlier, and arrived no sooner than that pass's `earliest` (`LoopLag.earliest_ns`),
    nor before the request was sent: so late by at most t - that. None when the passes do not
    cover the stamps (a loop whose selector could not be timed, a log begun later, or one that
    stopped keeping passes at its limit).

    Where the kernel said when the data read in that pass arrived (`WireRecord.arrivals_ns`,
    the newest queued) and what whole events its queue held, a stamp of an event that was
    whole there is late by at least t - that arrival, and by exactly that where the queue held
    that one event and the pass read it alone; a stamp of an event whose end came later, by at
    most that (`_kernel_arrivals`). Where a probe of the loop's epoll found the socket holding
    nothing during the pass before the reading one (`WireRecord.drained_ns`), the data that
    pass read came after: late by at most t - that.

    A stream's events arrive in order, so an event came no later than any later one is shown
    to have come by. Each time shown is then off by at most its stamp's upper bound less its
    lower one (0 where the kernel said exactly): the ttft by the first's, a gap by the larger
    of its two (each end errs late only)."""
    readies, earliest, woken = log.readies_ns, log.earliest_ns, log.woken_ns
    if len(readies) >= log.pass_limit and stamps and stamps[-1] > readies[-1]:
        return None  # the log stopped keeping passes before these stamps
    # aiohttp's reader is stamped in the callback that read the socket, except what it held
    # already when capture began timing it, with the head: stamped in the request's task, which
    # that callback woke for the next pass.
    head = -1 if record.t_headers_ns is None else bisect.bisect_right(readies, record.t_headers_ns)

    def read_pass(t: int) -> int:
        """The pass whose callback read the data stamped at `t` off the socket (-1: before
        the log)."""
        j = bisect.bisect_right(readies, t) - 1
        return j - (max(record.stamp_passes, 1) if j == head - 1 else record.stamp_passes)

    arrivals = _kernel_arrivals(record, read_pass, readies, ended, agree)
    # The last time in the pass before each reading pass its socket was seen drained.
    drained = dict(zip(record.drained_passes, record.drained_ns, strict=True))
    floored: set[int] = set()
    bounds: list[tuple[int, int, int]] = []  # each stamp's (least, most lateness, CPU wait)
    for t in stamps:
        p = read_pass(t)
        if p < 0:
            return None
        # A stamp in the callback that read the socket may hold bytes that arrived after the
        # pass's select returned (and after the kernel was asked), just before its read: no
        # lower bound but 0. So may one in the head's pass of a binding that stamps there
        # (aiohttp): the request's task, which stamps what was buffered with the head, runs
        # before that pass's callbacks, which may read and stamp more (review, session 19).
        j = bisect.bisect_right(readies, t) - 1
        in_reading_pass = j == p or (record.stamp_passes == 0 and j == head - 1)
        lo = 0 if in_reading_pass else t - readies[p + 1]
        hi = t - max(earliest[p], t_start)
        arrival = arrivals.get(p)
        if arrival is not None:
            age = t - arrival.ns
            if arrival.kind is _Kernel.EXACT:
                lo = hi = age
            elif arrival.kind is _Kernel.BEFORE:
                hi = min(hi, age)
            elif arrival.kind is _Kernel.ALONE:
                hi = age
            elif arrival.kind is _Kernel.WHOLE or (
                arrival.kind is _Kernel.FIRST and t == arrival.first and p not in floored
            ):
                # At least that old, and maybe older than the pass's earliest: data that
                # waited in the kernel while its transport did not read (anyio's, between the
                # consumer's reads). FIRST's, the first event's alone (others of its chunk
                # share its stamp). The newest data's time says nothing of how much older an
                # event before it is: where the socket was not watched through the pass
                # before, no older than the call's bytes read before (two events waiting 10 ms
                # apart behind a 30 ms hold were both shown at the second's arrival: session
                # 20, beside two CPU hogs).
                floored.add(p)
                lo, hi = max(lo, age), max(hi, age)
                if arrival.since is not None:
                    hi = max(hi, t - max(arrival.since, t_start))
            if arrival.whole_until is not None and t > arrival.whole_until:
                # Its end was not queued when the socket was peeked, after the select.
                hi = min(hi, t - readies[p])
        empty = drained.get(p)
        if empty is not None and t - empty >= lo:
            # Nothing was queued on the socket then: what the pass read came after. Not where
            # that is after what the kernel's time stamp showed: loopback stamps a packet as it
            # is queued, before the softirq delivers it to the socket, which a probe may find
            # empty in between (review, session 20). Left out then, not clamped to the stamp,
            # which would make the stamp of an event queued before the newest look exact
            # (review, session 21).
            hi = min(hi, t - empty)
        # Each bound rests on its stamp's upper bound, and so on that stamp's wait for a CPU.
        bounds.append((min(lo, hi), hi, woken[p]))
    shown = [t - lo for t, (lo, _, _) in zip(stamps, bounds, strict=True)]
    for i in range(len(shown) - 2, -1, -1):
        # In order: no later than the next is shown by, nor before its stamp's upper bound.
        shown[i] = max(min(shown[i], shown[i + 1]), stamps[i] - bounds[i][1])
    worst = own = 0
    for t, at, (_, hi, wait) in zip(stamps, shown, bounds, strict=True):
        spread = hi - (t - at)
        worst = max(worst, spread)
        own = max(own, spread - wait)
    return _Shown(shown, worst / 1e6, own / 1e6)


class _Kernel(enum.Enum):
    """What the kernel's arrival time says of the stamps of the events a pass read."""

    # The queue held one whole event, ending with it, and the pass read that alone: the stamp
    # is late by exactly t - the arrival.
    EXACT = enum.auto()
    # Every event the pass read was whole in the queue: each stamp late by at least that.
    WHOLE = enum.auto()
    # None of them was (their ends came after the arrival): each late by at most that.
    BEFORE = enum.auto()
    # Only some were: the first, at least (the events are read in order).
    FIRST = enum.auto()
    # Only some were, and the first chunk held more than one event: which stamp is whose
    # cannot be told (only `_Arrival.whole_until` speaks).
    PARTLY = enum.auto()
    # A TLS queue that was one whole record, and the pass read one chunk holding at most one
    # event: that event's end came in that record (at the arrival) or after it, so the stamp
    # is late by at most that.
    ALONE = enum.auto()


@dataclass(frozen=True, slots=True)
class _Arrival:
    kind: _Kernel
    ns: int  # the kernel's time stamp of the newest data queued
    first: int  # the stamp of the first chunk the pass read
    # Every event the pass read in a chunk stamped after this was not whole in the queue when
    # it was peeked, after the pass's select returned: their ends came after that. The stamp of
    # the chunk that ended the last event whole there (before the pass's first chunk where none
    # was); None where every event was whole there or the bytes said nothing.
    whole_until: int | None = None
    # The earliest its data can have come where its socket was not watched for reading through
    # the pass before (`WireRecord.arrival_fresh`: anyio's, registered at each receive): when
    # the pass that read the call's bytes before returned from its select (what came before
    # that was read then), or the request's start; None where it was watched (the pass's
    # earliest holds).
    since: int | None = None


def _kernel_arrivals(
    record: WireRecord,
    read_pass: Callable[[int], int],
    readies: Sequence[int],
    ended_by_read: Sequence[int],
    agree: Sequence[int],
) -> dict[int, _Arrival]:
    """What the kernel's arrival time of the data queued in each pass (by `read_pass` of a
    read's stamp) where the call's socket was peeked says of that pass's stamps (`_Kernel`):
    the events whole in the queue (`WireRecord.arrival_events`) matched with those the pass
    read, each counted at the read that brought its end. Not for a compressed body, whose
    events cannot be counted (nor one aiohttp inflated: its queue says nothing), nor a time
    stamp the pass contradicts (before the request, or after the pass's select returned: the
    kernel's clock read some other way)."""
    # A capped record's last kept read may be cut short: its events cannot be counted.
    if not record.arrival_passes or record.content_encoding or record.capped:
        return {}
    # Each pass's (first chunk's stamp, events ended in it, chunks, events ended in all).
    read: dict[int, tuple[int, int, int, int]] = {}
    # And each chunk that ended an event: (its stamp, the events the pass ended before it).
    ending: dict[int, list[tuple[int, int]]] = {}
    since: dict[int, int] = {}
    before = -1  # the pass that read the bytes before
    # Passes with a read whose events the parser and the count pair differently (`_ends`).
    unmatched: set[int] = set()
    reads = zip(record.reads, ended_by_read, agree, strict=True)
    for (_, arrived, _), ended, agreed in reads:
        p = read_pass(arrived)
        if p not in read:
            since[p] = readies[before] if 0 <= before < p else record.t_start_ns
        before = p
        if not agreed:
            unmatched.add(p)
        first, in_first, chunks, events = read.get(p, (arrived, ended, 0, 0))
        read[p] = (first, in_first, chunks + 1, events + ended)
        if ended:
            ending.setdefault(p, []).append((arrived, events))
    said: dict[int, _Arrival] = {}
    for p, arrived, whole, ends, fresh in zip(*record.arrival_notes, strict=True):
        if p not in read or p in unmatched or not record.t_start_ns <= arrived <= readies[p]:
            continue
        first, in_first, chunks, events = read[p]
        if whole == ONE_RECORD and chunks == 1 and events <= 1:
            kind = _Kernel.ALONE
        elif whole < 0:  # the bytes said nothing (`capture._queued`)
            continue
        elif whole == 0:
            kind = _Kernel.BEFORE
        elif events <= whole:
            # A queue that held more than the pass read (a read cut at the transport's size:
            # the rest is a later pass's): what it read was whole there all the same.
            kind = _Kernel.EXACT if events == whole == 1 and ends else _Kernel.WHOLE
        elif in_first == 1:
            # The first chunk's one event, the first the pass read, was whole in the queue;
            # with more in that chunk, which of them a stamp is cannot be told.
            kind = _Kernel.FIRST
        else:
            kind = _Kernel.PARTLY
        # The events past the `whole` first were not whole when the queue was peeked, after
        # the select returned (data read in the pass's callback after it): they ended later.
        # Counted by stamp, a chunk stamped as the last whole one's left out with it.
        until = None
        if 0 <= whole < events:
            until = max((t for t, n in ending.get(p, ()) if n < whole), default=first - 1)
        older = since.get(p, record.t_start_ns) if fresh else None
        said[p] = _Arrival(kind, arrived, first, until, older)
    return said


def _split_url(url: str) -> tuple[str, str]:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # e.g. an unbalanced IPv6 bracket or a non-numeric port
        return url, ""
    return parts.path or "/", f"{host}:{port}" if port is not None else host


def _t_end(record: WireRecord) -> int:
    """The last moment the call was seen alive on the wire (for timelines). A close is used only
    when nothing was read: an early break may leave the close until teardown or GC."""
    if record.t_eof_ns is not None:
        return record.t_eof_ns
    if record.t_dropped_ns is not None:  # reads past the keep limit were not kept, but seen
        return record.t_dropped_ns
    if record.reads:
        return record.reads[-1][1]
    for t in (record.t_closed_ns, record.t_headers_ns):
        if t is not None:
            return t
    return record.t_start_ns
