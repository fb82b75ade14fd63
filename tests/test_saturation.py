"""Client saturation: the event-loop lag monitor, the `client_saturated` flag, and the
`--latency-flagged` policy (keep, exclude, fail) for flagged calls, unit and end to end."""

from __future__ import annotations

import asyncio
import bisect
import gc
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, TypeVar

import anthropic  # noqa: F401  (loaded once: pytester runs re-import nothing)
import httpx2
import openai
import pytest
from latency_data import call_metrics as synthetic
from latency_data import pool_of
from remote_sim import (
    content_times,
    error_of,
    error_span_ms,
    itl_errors,
    paced,
    remote_simulator,
    truth_log,
    truth_of,
    without_arrivals,
)
from test_metrics import DONE, T0, chat_chunk, chat_usage, make_record

import pytest_latency.sim  # noqa: F401
from pytest_latency import instrument
from pytest_latency.budgets import parse_expectation
from pytest_latency.calls import Call
from pytest_latency.capture import _stream
from pytest_latency.capture._queued import Framing
from pytest_latency.capture._stream import LAG_TICK_NS
from pytest_latency.diagnose import CPU_STARVED, GC_PAUSED, diagnose_calls, title
from pytest_latency.metrics import SATURATED_LAG_MS, STAMP_TARGET_MS, CallMetrics, call_metrics
from pytest_latency.sim import TruthRecord
from pytest_latency.verdicts import FLAGGED_EXPR, judge
from pytest_latency.wire import EVENTS_UNKNOWN, ONE_RECORD, LoopLag, WireRecord


def make_call(*, ttft_ms: float = 100.0, consumer_bound: bool = False) -> CallMetrics:
    return synthetic(
        t_start_ms=0, ttft_ms=ttft_ms, e2e_ms=ttft_ms + 50, consumer_bound=consumer_bound
    )


pytest_plugins = ["pytester"]


# ---- the monitor -------------------------------------------------------------------------------


def _record(t_start: int) -> WireRecord:
    return WireRecord("POST", "http://h/v1/chat/completions", b"{}", t_start)


def test_the_monitor_runs_while_a_call_is_in_flight_and_stops_by_itself() -> None:
    async def main() -> tuple[WireRecord, bool]:
        record = _record(time.perf_counter_ns())
        _stream.watch_loop(record, time.perf_counter_ns)
        await asyncio.sleep(0.05)
        # The loop is blocked for 30 ms: the next wake-up is that late.
        time.sleep(0.03)
        await asyncio.sleep(0.02)
        record.t_eof_ns = time.perf_counter_ns()
        # The monitor notices within a scan period that nothing is in flight.
        await asyncio.sleep(_stream.LAG_TICK_NS * _stream.LAG_SCAN_TICKS * 3 / 1e9)
        monitor = _stream.MONITORS[asyncio.get_running_loop()]
        stopped = monitor.log is None and not monitor.inflight
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        return record, stopped and not tasks

    record, stopped = asyncio.run(main())
    assert stopped
    assert record.loop_lag is not None and len(record.loop_lag) > 5
    m = call_metrics(record)
    # 30 ms blocked, less the part of the tick that had passed when it began (up to 10 ms).
    assert m.loop_lag_max_ms is not None and m.loop_lag_max_ms > 15
    assert m.client_saturated is (m.loop_lag_max_ms > SATURATED_LAG_MS)


def test_a_loop_closed_with_a_call_in_flight_leaves_no_pending_task() -> None:
    # asyncio.run cancels what is left: the monitor ends quietly (filterwarnings=error, and the
    # "Task was destroyed but it is pending" log would show as an unraisable error).
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def main() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        _stream.watch_loop(_record(time.perf_counter_ns()), time.perf_counter_ns)
        await asyncio.sleep(0.01)

    asyncio.run(main())
    gc.collect()
    # The entry died with its loop (other tests' loops may still be alive: frameworks keep
    # theirs, in threads of their own).
    assert loops[0]() is None
    assert all(loop is not loops[0]() for loop in list(_stream.MONITORS))


def test_a_loop_closed_without_cancelling_its_tasks_logs_nothing_of_the_monitor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A loop run by hand (run_until_complete, then close) leaves pending tasks pending; when
    # the monitor's task is collected asyncio logs "Task was destroyed but it is pending!",
    # printed at the end of this project's own runs. The monitor is the plugin's, not the
    # user's: nothing to report.
    loop = asyncio.new_event_loop()

    async def call() -> None:
        _stream.watch_loop(_record(time.perf_counter_ns()), time.perf_counter_ns)
        await asyncio.sleep(0.01)

    try:
        loop.run_until_complete(call())
        assert _stream.MONITORS[loop].log is not None  # still running when the loop closes
    finally:
        loop.close()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        del loop
        gc.collect()
    assert not [r for r in caplog.records if "destroyed" in r.getMessage()], caplog.text


def test_no_monitor_for_sync_calls_or_an_injected_clock() -> None:
    record = _record(0)
    _stream.watch_loop(record, time.perf_counter_ns)  # no running loop
    assert record.loop_lag is None

    async def main() -> None:
        _stream.watch_loop(record, lambda: 0)

    asyncio.run(main())
    assert record.loop_lag is None
    assert call_metrics(record).loop_lag_max_ms is None
    assert call_metrics(record).client_saturated is False


def test_the_worst_late_span_overlapping_the_call_counts() -> None:
    log = LoopLag(2_000_000)
    ms = 1_000_000
    # wake-up stamps and how late each was; the call runs from 100 ms to 200 ms.
    for woke, late in [(90, 50), (104, 0), (150, 3), (230, 40), (260, 90)]:
        log.add(woke * ms, late * ms)
    record = _record(100 * ms)
    record.t_eof_ns = 200 * ms
    record.loop_lag = log
    m = call_metrics(record)
    # 90−50 ends before the start; 230−40 = 190 overlaps the end; 260−90 = 170 overlaps it too,
    # but ticks run back to back: a span that starts after the end stops the scan.
    assert m.loop_lag_max_ms == 90.0
    assert m.client_saturated
    record.t_eof_ns = 160 * ms
    assert call_metrics(record).loop_lag_max_ms == 3.0


def test_a_late_span_that_began_before_the_call_counts_from_its_start() -> None:
    """The loop ran the call's hand-off, so what held it had let go: only the wait after the
    start delayed the call. A test body busy for 100 ms that then starts its calls had the late
    wake-up land 3 ms after their hand-off, and those calls were flagged with all 100 ms (the
    examples' hedging test: its first 4 hedged calls, issue #14)."""
    log = LoopLag(2_000_000)
    ms = 1_000_000
    log.add(103 * ms, 100 * ms)  # held from 3 ms to 103 ms; the call handed off at 100 ms
    log.add(106 * ms, 0)
    record = _record(100 * ms)
    record.t_eof_ns = 200 * ms
    record.loop_lag = log
    m = call_metrics(record)
    assert m.loop_lag_max_ms == 3.0 and not m.flagged
    # Held after the start as long: saturated, as before.
    log.add(180 * ms, 60 * ms)
    m = call_metrics(record)
    assert (m.loop_lag_max_ms, m.flagged) == (60.0, ("client_saturated",))


def _chat_record(stamps_ms: list[float], log: LoopLag, *, stamp_passes: int) -> WireRecord:
    """A streamed chat call from 0 ms whose content chunks were stamped at `stamps_ms`, on a
    loop whose passes `log` holds."""
    chunks = [(50.0, chat_chunk({"role": "assistant", "content": ""}))]
    chunks += [(at, chat_chunk({"content": f"t{i} "})) for i, at in enumerate(stamps_ms)]
    chunks.append((stamps_ms[-1] + 1, chat_usage() + DONE))
    record = make_record("http://h/v1/chat/completions", chunks, loop_lag=log)
    record.stamp_passes = stamp_passes
    return record


def _loopback_pairs(n: int) -> tuple[socket.socket, list[tuple[socket.socket, socket.socket]]]:
    """A loopback server and `n` connections to it: each (client, non-blocking; the server's
    end)."""
    server = socket.create_server(("127.0.0.1", 0))
    pairs = []
    for _ in range(n):
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        client.setblocking(False)
        pairs.append((client, peer))
    return server, pairs


def _forget_arrivals(record: WireRecord) -> None:
    """Empty, in place, what the peeks noted on `record` (the kernel's arrival times and what
    the queues held), so that the next peek's notes stand alone."""
    for notes in record.arrival_notes:
        del notes[:]


def _passes(log: LoopLag, *passes: tuple[float, float] | tuple[float, float, float]) -> LoopLag:
    """Each pass as (when its select returned, the earliest its callbacks' data arrived[, how
    long of that the loop's woken thread waited for a CPU]), ms after T0."""
    for ready, earliest, *woken in passes:
        log.readies_ns.append(T0 + int(ready * 1_000_000))
        log.earliest_ns.append(T0 + int(earliest * 1_000_000))
        log.woken_ns.append(int(woken[0] * 1_000_000) if woken else 0)
    return log


def test_the_loops_passes_bound_each_stamp_and_flag_a_late_one() -> None:
    """A stamp taken in the pass whose select returned at S is at least t - S late; its data,
    read `stamp_passes` passes earlier, arrived no sooner than that pass's earliest. The call's
    timings are read from each stamp less its least lateness (its event was there by then), and
    are off by at most a stamp's upper bound less its lower one (issue #17: the tick monitor
    missed such calls under 50 ms of lag)."""
    # Short passes, 1 ms each: stamps at 100.5, 120.5, 140.5 ms; each pass's data arrived
    # after the one before returned.
    quick = _passes(LoopLag(LAG_TICK_NS), *[(float(t), t - 1.0) for t in range(90, 150)])
    m = call_metrics(_chat_record([100.5, 120.5, 140.5], quick, stamp_passes=1))
    # stamp 100.5: lo 0.5 (select at 100), hi 100.5 - earliest of the pass before (98) = 2.5:
    # read as 100.0, off by 2.0 at most.
    assert m.stamp_error_max_ms == pytest.approx(2.0)
    assert m.ttft == pytest.approx(100_000)
    assert m.itl == pytest.approx((20_000, 20_000))
    assert not m.flagged
    # The same through aiohttp, stamped in the pass that read the socket: 1.5 ms at most.
    assert call_metrics(
        _chat_record([100.5, 120.5, 140.5], quick, stamp_passes=0)
    ).stamp_error_max_ms == pytest.approx(1.5)

    # One long pass, 12 ms of the loop's own work (selected at 108, ran until 120), before the
    # second stamp: its data may have waited all of it. The lag ticks saw nothing (no tick fell
    # in it), so only the passes tell.
    passes = [(float(t), t - 1.0) for t in range(90, 109)] + [(120.0, 108.0), (121.0, 120.0)]
    passes += [(float(t), t - 1.0) for t in range(122, 150)]
    busy = _passes(LoopLag(LAG_TICK_NS), *passes)
    m = call_metrics(_chat_record([100.5, 121.5, 140.5], busy, stamp_passes=1))
    # stamp 121.5 in the pass selected at 121; its data read in the pass before (selected at
    # 120, earliest 108): lo 0.5, hi 13.5, read as 121.0 and off by 13 ms at most.
    assert m.stamp_error_max_ms == pytest.approx(13.0)
    assert m.itl == pytest.approx((21_000, 19_000))
    assert m.flagged == ("client_saturated",)
    assert m.loop_lag_max_ms is None and m.stamps_late_ms == pytest.approx(13.0)
    assert any(n.startswith("client_saturated: a stamp may be up to 13 ms late") for n in m.notes)
    # A probe in that long pass found the socket empty at 119 ms (`capture._drains`): the data
    # came after, so the stamp is 0.5-2.5 ms late; off by 2 at most, not flagged.
    record = _chat_record([100.5, 121.5, 140.5], busy, stamp_passes=1)
    record.drained_passes.append(19)
    record.drained_ns.append(T0 + 119_000_000)
    m = call_metrics(record)
    assert m.stamp_error_max_ms == pytest.approx(2.0)
    assert not m.flagged
    # Found empty before the pass's earliest: the passes' bound stands.
    record.drained_ns[0] = T0 + 100_000_000
    assert call_metrics(record).stamp_error_max_ms == pytest.approx(13.0)


def test_the_kernels_arrival_time_makes_a_stamp_in_a_long_pass_exact() -> None:
    """Where the kernel said when the data read in a pass arrived, the queue then held one whole
    event and the pass read that alone, the stamp is late by exactly t - that arrival: data
    that came just before a long pass's poll is not counted the whole pass late. A second
    chunk read in that pass came after the peek: for it, the passes' bound holds."""
    passes = [(float(t), t - 1.0) for t in range(90, 109)] + [(120.0, 108.0), (121.0, 120.0)]
    passes += [(float(t), t - 1.0) for t in range(122, 150)]

    def record(arrived_ms: float, *, second: bool = False) -> WireRecord:
        stamps = [100.5, 121.5, 121.6, 140.5] if second else [100.5, 121.5, 140.5]
        r = _chat_record(stamps, _passes(LoopLag(LAG_TICK_NS), *passes), stamp_passes=1)
        # The stamp at 121.5, in the pass selected at 121, read its data in the pass before
        # (index 19: selected at 120 after 12 ms of the loop's own work, earliest 108); the
        # queue then held one whole event, ending with it.
        _arrived(r, 19, arrived_ms)
        return r

    # Arrived 0.2 ms before the long pass's poll: 1.7 ms late, exactly, so read as 119.8; the
    # other two stamps are 0.5-2.5 ms late by the passes, read 0.5 back and off by 2 at most.
    m = call_metrics(record(119.8))
    assert m.stamp_error_max_ms == pytest.approx(2.0)
    assert m.itl == pytest.approx((19_800, 20_200))
    assert not m.flagged
    # A probe that found the socket empty after the kernel's time stamp (loopback stamps a
    # packet as it is queued, before the softirq delivers it) does not overrule the stamp.
    r = record(119.8)
    r.drained_passes.append(19)
    r.drained_ns.append(T0 + 120_500_000)
    assert call_metrics(r).itl == pytest.approx((19_800, 20_200))
    # Arrived as the long pass began: 12.5 ms late, exactly: read as 109.0, not flagged (by the
    # passes alone it is 0.5-13.5 ms late, and flagged: below).
    m = call_metrics(record(109.0))
    assert m.stamp_error_max_ms == pytest.approx(2.0)
    assert m.itl == pytest.approx((9_000, 31_000))
    assert not m.flagged
    # Two chunks read in that pass, the second's event not yet whole when the queue was
    # peeked, after the select returned (at 120): it came after that, 0.6-1.6 ms late (the
    # passes alone say 0.6-13.6; session 20). The first, whole in the queue, came by 119.8,
    # but maybe as early as the call's bytes before were read (the pass selected at 99: anyio
    # may have stopped reading since, the pass's earliest no bound then): 1.7-22.5 ms late,
    # off by 20.8.
    m = call_metrics(record(119.8, second=True))
    assert m.stamp_error_max_ms == pytest.approx(20.8)
    # Watched for reading through the pass before (aiohttp's socket, an anyio one waiting in
    # its receive): the pass's earliest holds, 1.7-13.5 ms late, off by 11.8.
    watched = record(119.8, second=True)
    watched.arrival_fresh[0] = False
    assert call_metrics(watched).stamp_error_max_ms == pytest.approx(11.8)
    assert m.flagged == ("client_saturated",)
    assert m.itl[:2] == pytest.approx((19_800, 1_200))
    # Where the data waited in the kernel while its transport did not read (anyio's, between
    # reads), older than the pass's earliest (108), the first is read as that old (100.0),
    # exactly, and the first stamp's event, before it, no later; the second as above.
    m = call_metrics(record(100.0, second=True))
    assert m.ttft == pytest.approx(100_000)
    assert m.itl[0] == pytest.approx(0)
    assert m.stamp_error_max_ms == pytest.approx(2.0)
    assert call_metrics(record(100.0)).stamp_error_max_ms == pytest.approx(2.0)
    # A compressed body's events cannot be counted: not the kernel's figure.
    r = record(119.8)
    r.content_encoding = "gzip"
    assert call_metrics(replace(r, reads=r.reads)).stamp_error_max_ms != pytest.approx(2.0)
    # Nor where the parser pairs the pass's read with other events than the count does (a
    # comment: two blank lines, one event; `metrics._ends`): the passes' bound holds.
    r = record(119.8)
    asked, arrived, chunk = r.reads[2]
    r.reads[2] = (asked, arrived, chunk + b": keep-alive\n\n")
    r.arrival_events[0] = 2
    m = call_metrics(r)
    assert (m.stamp_error_max_ms, m.itl[0]) == pytest.approx((13.0, 21_000))
    r.reads[2] = (asked, arrived, chunk + b"data: {}\n\n")  # two events, as counted: the kernel's
    assert call_metrics(r).itl[0] == pytest.approx(19_800)


def _arrived(
    record: WireRecord,
    index: int,
    at_ms: float,
    whole: int = 1,
    ends: bool = True,
    fresh: bool = True,
) -> None:
    """The kernel's arrival time for the data read in pass `index`, at `at_ms` after T0, and
    what the queue then held: `whole` events (-1: not known), ending at one's end or not; and
    whether the socket was not watched through the pass before (`fresh`: anyio's)."""
    record.arrival_passes.append(index)
    record.arrivals_ns.append(T0 + int(at_ms * 1_000_000))
    record.arrival_events.append(whole)
    record.arrival_ends.append(ends)
    record.arrival_fresh.append(fresh)


def test_what_the_queue_held_says_how_much_of_the_kernels_time_to_trust() -> None:
    """The peek copies the queue: its events, matched with those the pass read, say which
    stamps the kernel's arrival time (the newest data's) bounds, and from which side. Here an
    anyio transport's loop, 1 ms passes, each chunk read in one and stamped in the next (a
    stamp 0.5-2.5 ms late by the passes alone); the kernel says the middle three tokens waited
    3, 6 and 3 ms (anyio had stopped reading). Each time is read back by the lateness shown,
    so where the kernel says exactly, the gaps are the arrivals' and off by nothing."""
    passes = _passes(LoopLag(LAG_TICK_NS), *[(float(t), t - 1.0) for t in range(90, 200)])
    stamps = [100.5, 121.5, 141.5, 161.5, 181.5]

    def measured(
        whole: int,
        ends: bool = True,
        *,
        ages: tuple[float | None, ...] = (),
        drained: float | None = None,
    ) -> CallMetrics:
        r = _chat_record(stamps, passes, stamp_passes=1)
        for stamp, age in zip(stamps, ages or (None, 3, 6, 3, None), strict=True):
            if age is not None:
                _arrived(r, int(stamp) - 91, stamp - age, whole, ends)
                if drained is not None:  # a probe found the socket empty that long before
                    r.drained_passes.append(int(stamp) - 91)
                    r.drained_ns.append(T0 + int((stamp - age - drained) * 1_000_000))
        return call_metrics(r)

    def bound(
        whole: int,
        ends: bool = True,
        *,
        ages: tuple[float | None, ...] = (),
        drained: float | None = None,
    ) -> float:
        m = measured(whole, ends, ages=ages, drained=drained)
        assert m.stamp_error_max_ms is not None
        return m.stamp_error_max_ms

    # One whole event queued, ending with it, and read alone: each of those stamps is late by
    # exactly its age, from both sides, and read as its arrival: the bound is the first and
    # last stamps' (0.5-2.5 ms late by the passes, read 0.5 back), 2 ms, not flagged.
    assert bound(1) == pytest.approx(2.0)
    assert measured(1).itl == pytest.approx((18_500, 17_000, 23_000, 22_500))
    # Queued with the start of the next event after it (its stamp the newer's): late by at
    # least the age, and, anyio having stopped reading, by as much as since the call's bytes
    # before were read (the pass selected at 99, for the stamp at 121.5): 3-22.5 ms, off by
    # 19.5 (session 20; before, the pass's earliest bounded it, 2 ms: two events waiting 10
    # ms apart behind a 30 ms hold were both read back as the second's arrival). A probe
    # that found the socket empty since bounds it again.
    assert bound(1, ends=False) == pytest.approx(19.5)
    assert bound(1, ends=False, drained=0.5) == pytest.approx(2.0)
    # A probe that found the socket empty after the kernel's time stamp (loopback's softirq
    # delivering it late) contradicts it: left out, not clamped to it, which made each stamp
    # look exact at its age (review, session 21).
    assert bound(1, ends=False, drained=-0.5) == pytest.approx(19.5)
    # A queue that held more than the pass read (a read cut short: the rest a later pass's):
    # what it read was whole there all the same, and as old, at most, as since the bytes
    # before were read, or the socket was last found empty.
    assert bound(2) == pytest.approx(19.5)
    assert bound(2, drained=0.5) == pytest.approx(2.0)
    # No event whole in the queue: each ended after it was peeked, after its pass's select
    # returned (1.5 ms before its stamp), so is 0.5-1.5 ms late: off by 1 at most, not the
    # passes' 2 (session 20; before, by the arrival alone, 1.5).
    assert bound(0, ages=(1.6, 1.6, 2, 1.6, 1.6)) == pytest.approx(1.0)
    # TLS, the queue one whole record: the kernel's time bounds the stamp from above only (one
    # chunk, one event): the 6 ms stamp is 0.5-6 ms late, off by 5.5.
    assert bound(ONE_RECORD) == pytest.approx(5.5)
    # Bytes that say nothing: the passes' bounds alone (the 6 ms goes unseen, as before session
    # 15: the price of not guessing).
    assert bound(EVENTS_UNKNOWN) == pytest.approx(2.0)
    assert measured(EVENTS_UNKNOWN).itl == pytest.approx((21_000, 20_000, 20_000, 20_000))
    # A rise and fall past the accuracy target, 4 then 10 ms late: read as it came, not flagged.
    m = measured(1, ages=(None, 4, 10, 4, None))
    assert m.itl == pytest.approx((17_500, 14_000, 26_000, 23_500))
    assert not m.flagged


def test_a_connection_kept_alive_is_read_in_each_responses_own_framing() -> None:
    """A JSON body delimited by its length, then a stream in chunks on the same connection: the
    peeks read the queue as the newest attempt's framing, not the first's (a chunk's closing
    CRLF after a partial CRLF event, read as RAW, passes for an event's end: review, session
    21)."""

    async def main() -> None:
        server = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        try:
            first, second = _record(time.perf_counter_ns()), _record(time.perf_counter_ns())
            for r in (first, second):
                _stream.watch_loop(r, time.perf_counter_ns)
            monitor = _stream.MONITORS[asyncio.get_running_loop()]
            _stream.watch_socket(first, client, Framing.RAW)
            assert monitor.sockets[client.fileno()].framing is Framing.RAW
            first.t_eof_ns = time.perf_counter_ns()
            _stream.watch_socket(second, client, Framing.CHUNKED)
            assert monitor.sockets[client.fileno()].framing is Framing.CHUNKED
            second.t_eof_ns = time.perf_counter_ns()
        finally:
            for s in (client, peer, server):
                s.close()

    asyncio.run(main())


def test_a_peek_notes_when_the_kernel_received_the_data_on_the_one_attempt_reading_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`watch_socket` turns on the kernel's receive time stamps; a long pass's peek (or any
    pass's, among an attempt's first) reads the time stamp of the data queued, without taking
    it, and notes it on the attempt in flight on that socket: on neither of two (HTTP/2, whose
    data it is the kernel cannot say), not on one that has ended, not on one past its keep
    limit; and takes it back where the pass did not read the socket after all (its reader
    cancelled)."""

    async def main() -> None:
        server = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        client.setblocking(False)
        first, second = _record(time.perf_counter_ns()), _record(time.perf_counter_ns())
        for r in (first, second):
            _stream.watch_loop(r, time.perf_counter_ns)
        loop = asyncio.get_running_loop()
        monitor = _stream.MONITORS[loop]
        reader = loop.call_soon(lambda: None)  # stands for the socket's reader handle
        ready = [(SimpleNamespace(fd=client.fileno(), data=(reader, None)), selectors.EVENT_READ)]
        noted: list[tuple[WireRecord, object, int]] = []
        buffer = bytearray(_stream.PEEK_BYTES)

        def peek(index: int, long: bool = True, polled: bool = True) -> None:
            sockets = monitor.sockets
            _stream._peek(ready, sockets, index, long, noted, buffer, polled)  # type: ignore[arg-type]

        try:
            _stream.watch_socket(first, client, Framing.RAW)
            # The kernel turns its receive time stamps on for the first socket that asks in
            # deferred work: until it has run, data arrives unstamped (and a peek notes none).
            for _ in range(200):
                peer.send(b".")
                await asyncio.sleep(0.005)
                peek(6)
                client.recv(100)
                if first.arrivals_ns:
                    break
            assert list(first.arrival_passes)[-1:] == [6]
            _forget_arrivals(first)
            sent = time.perf_counter_ns()
            peer.send(b"data: x\n\n")
            await asyncio.sleep(0.02)
            # An attempt's first passes are asked about however short they were (its ttft's
            # stamps), where the select waited (an idle loop; a busy one's polls are not): until
            # the kernel has told of `FIRST_PEEKS` of them.
            peek(7, long=False)
            assert not first.arrival_passes
            peek(7, long=False, polled=False)
            assert list(first.arrival_passes) == [7]
            noted.clear()
            monkeypatch.setattr(_stream, "FIRST_PEEKS", 1)
            peek(8, long=False, polled=False)
            assert list(first.arrival_passes) == [7]
            _forget_arrivals(first)
            monkeypatch.setattr(_stream, "FIRST_PEEKS", 0)  # past them, from here on
            # After a short pass, only a socket peeked every pass (an anyio transport's).
            peek(7, long=False)
            assert not first.arrival_passes
            monitor.sockets[client.fileno()].every_pass = True
            # Not after a select that waited: what it returned came while it waited.
            peek(7, long=False, polled=False)
            assert not first.arrival_passes
            # Nor where the socket was watched for reading through the last pass's select,
            # which did not return it: its data came since, as the passes bound it.
            fd = client.fileno()
            _stream._peek(ready, monitor.sockets, 7, False, noted, buffer, True, {fd: 6})  # type: ignore[arg-type]
            assert not first.arrival_passes
            # Returned by that select: its reader may have left data behind (asyncio's takes
            # 256 KiB at most), so what it holds may be older.
            _stream._peek(ready, monitor.sockets, 7, False, noted, buffer, True, {fd: 6}, {fd})  # type: ignore[arg-type]
            assert list(first.arrival_passes) == [7]
            _stream._unread(noted)
            _forget_arrivals(first)
            # Registered since (anyio's receive registers it anew): what it holds may be older.
            _stream._peek(ready, monitor.sockets, 7, False, noted, buffer, True, {fd: 7})  # type: ignore[arg-type]
            assert list(first.arrival_passes) == [7]
            _stream._unread(noted)
            _forget_arrivals(first)
            peek(7, long=False)  # and where its registrations are not known
            assert list(first.arrival_passes) == [7]
            _stream._unread(noted)  # the pass read it (its reader was not cancelled): kept
            assert list(first.arrival_passes) == [7] and not noted
            (arrived,) = first.arrivals_ns
            assert sent <= arrived <= sent + 10_000_000, (arrived - sent) / 1e6
            _forget_arrivals(first)
            # Two wall-clock reads 1 ms apart around the perf_counter read (a thread switch, a
            # preemption): the pass's arrivals could be off by as much, so none is noted.
            wall = iter(range(time.time_ns(), time.time_ns() + 10**10, 1_000_000))
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(time, "time_ns", lambda: next(wall))
                peek(7, long=False)
            assert not first.arrival_passes
            peek(7, long=False)
            assert list(first.arrival_passes) == [7]
            _stream._unread(noted)
            assert client.recv(100) == b"data: x\n\n"  # the peek took nothing
            # What the queue held: one event, ending with it.
            assert (list(first.arrival_events), list(first.arrival_ends)) == ([1], [1])
            # An event and, 5 ms later, the start of the next: the time stamp is the newer's
            # (the queue's last data), one event whole, the queue not ending at one's end.
            peer.send(b"data: a\n\n")
            await asyncio.sleep(0.005)
            later = time.perf_counter_ns()
            peer.send(b"data: b")
            await asyncio.sleep(0.005)
            peek(8)
            assert list(first.arrival_events)[-1:] == [1] and list(first.arrival_ends)[-1:] == [0]
            assert later <= first.arrivals_ns[-1] <= later + 5_000_000, (
                first.arrivals_ns[-1] - later
            ) / 1e6
            _stream._unread(noted)
            assert client.recv(100) == b"data: a\n\ndata: b"
            for kept in first.arrival_notes:
                del kept[1:]
            _stream.watch_socket(second, client, Framing.RAW)  # two attempts on the socket
            peer.send(b"data: y\n\n")
            await asyncio.sleep(0.01)
            peek(8)
            assert list(first.arrival_passes) == [7] and not second.arrival_passes
            first.t_eof_ns = time.perf_counter_ns()  # one has ended: the other's data
            peek(9)
            assert list(second.arrival_passes) == [9]
            second.dropped_reads = 1  # past its keep limit: no more stamps, no more arrivals
            peek(10)
            assert list(second.arrival_passes) == [9]
            second.dropped_reads = 0
            # A reader cancelled before it ran (anyio stopped reading): the pass did not read
            # what was peeked, and its arrival is taken back.
            reader.cancel()
            peek(11)
            assert list(second.arrival_passes) == [9, 11]
            _stream._unread(noted)
            assert list(second.arrival_passes) == [9]
        finally:
            second.t_eof_ns = time.perf_counter_ns()
            for s in (client, peer, server):
                s.close()
        # Closed: a peek finds nothing and says nothing.
        peek(12)
        assert list(second.arrival_passes) == [9]

    asyncio.run(main())


def test_a_socket_peeked_every_pass_is_peeked_only_when_registered_since_the_last_select(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a busy loop (its selects poll), a captured socket of a transport that stops reading
    between reads is peeked where it was registered for reading after the last select (its data
    may have waited unseen), and not where it was watched through that select: the loop's
    `register` and `modify` are timed by pass (`_time_passes`), and undone with the select.
    Long passes, which peek whatever they return, are kept out of it (a preempted pass on a
    busy machine would be one), and so are an attempt's first passes, which peek whatever they
    return."""
    monkeypatch.setattr(_stream, "PEEK_AFTER_NS", 10**12)
    monkeypatch.setattr(_stream, "FIRST_PEEKS", 0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server, pairs = _loopback_pairs(2)
        (watched, watched_peer), (late, late_peer) = pairs
        records = [_record(time.perf_counter_ns()) for _ in pairs]
        for record in records:
            _stream.watch_loop(record, time.perf_counter_ns)
        selector = loop._selector  # type: ignore[attr-defined]
        assert {"select", "register", "modify"} <= set(vars(selector))
        stop = False

        async def spin() -> None:  # keeps a callback ready: every select polls
            while not stop:
                await asyncio.sleep(0)

        spinner = asyncio.ensure_future(spin())
        got: list[bytes] = []
        try:
            for record, (client, _) in zip(records, pairs, strict=True):
                _stream.watch_socket(record, client, Framing.RAW, every_pass=True)
            # Kernel stamps are turned on in deferred work: wait until a peek notes one.
            for _ in range(200):
                late_peer.send(b".")
                await asyncio.sleep(0.005)
                loop.add_reader(late.fileno(), lambda: got.append(late.recv(100)))
                await asyncio.sleep(0.002)
                loop.remove_reader(late.fileno())
                if records[1].arrivals_ns:
                    break
            assert records[1].arrivals_ns
            _forget_arrivals(records[1])
            # Watched through many polls before its data comes: not peeked.
            loop.add_reader(watched.fileno(), lambda: got.append(watched.recv(100)))
            await asyncio.sleep(0.01)
            watched_peer.send(b"data: w\n\n")
            await asyncio.sleep(0.01)
            loop.remove_reader(watched.fileno())
            assert b"data: w\n\n" in got
            assert not records[0].arrival_passes
            # Its data waiting before it was registered: peeked.
            late_peer.send(b"data: l\n\n")
            await asyncio.sleep(0.01)
            loop.add_reader(late.fileno(), lambda: got.append(late.recv(100)))
            await asyncio.sleep(0.01)
            loop.remove_reader(late.fileno())
            assert b"data: l\n\n" in got
            assert len(records[1].arrival_passes) == 1
        finally:
            stop = True
            await spinner
            for r in records:
                r.t_eof_ns = time.perf_counter_ns()
            for pair in pairs:
                for s in pair:
                    s.close()
            server.close()
        monitor = _stream.MONITORS[loop]
        for _ in range(100):  # the monitor's next scan finds nothing in flight and stops
            if monitor.log is None:
                break
            await asyncio.sleep(0.01)
        assert monitor.log is None
        assert not {"select", "register", "modify"} & set(vars(selector))

    asyncio.run(main())


def test_a_socket_registered_before_the_passes_were_timed_was_watched_through_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A socket registered for reading before the monitor began timing the loop's passes (a
    pooled connection: aiohttp's transport stays registered between calls) was watched through
    every pass since: on a busy loop its data is not peeked as data that may have waited
    unseen, and where a long pass peeks it, the note does not say so (`arrival_fresh`). Not
    known, the bound of a call's last event on the connection a warm-up left came out 20 ms
    against 0.2 true (bench_ceiling, session 29)."""
    monkeypatch.setattr(_stream, "FIRST_PEEKS", 0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server, [(client, peer)] = _loopback_pairs(1)
        got: list[bytes] = []
        # Registered first: the pool's connection, before this loop's monitor began.
        loop.add_reader(client.fileno(), lambda: got.append(client.recv(100)))
        record = _record(time.perf_counter_ns())
        _stream.watch_loop(record, time.perf_counter_ns)
        stop = False

        async def spin() -> None:  # keeps a callback ready: every select polls
            while not stop:
                await asyncio.sleep(0)

        spinner = asyncio.ensure_future(spin())
        try:
            _stream.watch_socket(record, client, Framing.RAW, every_pass=True)
            monkeypatch.setattr(_stream, "PEEK_AFTER_NS", 10**12)
            for i in range(3):
                peer.send(b"data: %d\n\n" % i)
                await asyncio.sleep(0.01)
            assert len(got) == 3
            assert not record.arrival_passes  # polled, watched: not peeked
            # Every pass long: peeked, as watched through the pass before. The kernel's stamps
            # are turned on in deferred work: send until a peek notes one.
            monkeypatch.setattr(_stream, "PEEK_AFTER_NS", 0)
            for _ in range(200):
                peer.send(b"data: x\n\n")
                await asyncio.sleep(0.005)
                if record.arrival_passes:
                    break
            assert record.arrival_passes
            assert not any(record.arrival_fresh)
        finally:
            stop = True
            await spinner
            loop.remove_reader(client.fileno())
            record.t_eof_ns = time.perf_counter_ns()
            for s in (client, peer, server):
                s.close()

    asyncio.run(main())


STOPPER = """
import os, signal, socket, sys, time
peer = socket.socket(fileno=int(sys.argv[1]))
parent = int(sys.argv[2])
time.sleep(0.005)  # the loop waits in its select by now
os.kill(parent, signal.SIGSTOP)  # kept from running, as a hypervisor's steal would
time.sleep(0.002)
sent = time.perf_counter_ns()  # CLOCK_MONOTONIC: the parent's clock too
peer.send(b"data: x\\n\\n")  # comes while the loop cannot take it
time.sleep(0.03)
os.kill(parent, signal.SIGCONT)
print(sent)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_wait_that_ended_past_its_timeout_unexplained_bounds_its_data_from_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A select whose thread was kept from running where the guest's scheduler cannot see (a
    hypervisor's steal) returns past its timeout, and its thread's wait for a CPU does not
    explain it: what it returned may have come at any time of the wait, and the wait was not
    the loop's doing (`woken`). Bounded from its return instead, 36 of 150 aiohttp streams had
    events 5-9.7 ms late under bounds of 2-3 ms, unflagged, on a virtual machine whose
    hypervisor stole 960 ms of CPU in a 1.5 s round (bench_ceiling, session 29). Here the
    process is stopped, its data comes, and 30 ms later it goes on; a stop, unlike a steal, is
    a sleep of the thread's own, which the sleep count would see (the wait bounded as a poll),
    so the count is left out, as on a platform that has none."""
    monkeypatch.setattr(_stream, "_sleeps", lambda: None)

    async def main() -> tuple[WireRecord, int, int]:
        loop = asyncio.get_running_loop()
        server, [(client, peer)] = _loopback_pairs(1)
        record = _record(time.perf_counter_ns())
        _stream.watch_loop(record, time.perf_counter_ns)
        got: list[int] = []

        def on_data() -> None:
            got.append(time.perf_counter_ns())
            client.recv(100)

        loop.add_reader(client.fileno(), on_data)
        await asyncio.sleep(0.02)  # the monitor's passes are timed
        stopper = subprocess.Popen(
            [sys.executable, "-c", STOPPER, str(peer.fileno()), str(os.getpid())],
            pass_fds=[peer.fileno()],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            for _ in range(400):
                if got:
                    break
                await asyncio.sleep(0.005)
        finally:
            out, _ = stopper.communicate()
            loop.remove_reader(client.fileno())
            record.t_eof_ns = time.perf_counter_ns()
            for s in (client, peer, server):
                s.close()
        assert got
        return record, int(out), got[0]

    record, sent, read = asyncio.run(main())
    log = record.loop_lag
    assert log is not None
    assert read - sent > 25_000_000  # the stop held the read back
    # The pass that read the data bounds it from before it was sent: from its wait's start
    # where the stop fell in its select's wait, or from the poll before where it fell outside.
    p = bisect.bisect_right(log.readies_ns, read) - 1
    assert log.earliest_ns[p] <= sent, (log.earliest_ns[p] - sent) / 1e6


def _held_stream(library: str) -> tuple[WireRecord, TruthRecord]:
    """One stream of 20 tokens 10 ms apart from a simulator in a process of its own, the loop
    held from 2 ms after each token until 0.3 ms after the next is due: the record and the
    simulator's truth of it."""
    with remote_simulator(*paced(decode_ms_per_token=10.0, output_tokens=20)) as base:

        async def main() -> list[WireRecord]:
            records: list[WireRecord] = []
            loop = asyncio.get_running_loop()
            body = {
                "model": "m",
                "stream": True,
                "messages": [{"role": "user", "content": "q"}],
                "stream_options": {"include_usage": True},
            }
            url = f"{base}/v1/chat/completions"
            first: list[float] = []

            def hold(until: float) -> None:
                time.sleep(max(until - time.perf_counter(), 0.0))

            def holds(chunk: bytes) -> None:
                """On the simulator's schedule (due times from the request's receipt, 10 ms
                apart), from the first content token's arrival (the loop idle till then)."""
                if not first and b'"content":"' in chunk and b'"role"' not in chunk:
                    first.append(time.perf_counter())
                    for i in range(15):  # the last tokens, usage and [DONE] on an idle loop
                        at = first[0] + i * 0.010
                        loop.call_at(loop.time() + at + 0.002 - first[0], hold, at + 0.0103)

            if library == "httpx2":
                client: Any = instrument(httpx2.AsyncClient(timeout=10), sink=records.append)
                async with client.stream("POST", url, json=body) as r:
                    async for chunk in r.aiter_bytes():
                        holds(chunk)
                await client.aclose()
            else:
                import aiohttp

                session = instrument(aiohttp.ClientSession(), sink=records.append)
                async with session.post(url, json=body) as r:
                    async for chunk in r.content.iter_any():
                        holds(chunk)
                await session.close()
            return records

        (record,) = asyncio.run(main())
        truth = truth_of(record, truth_log(base))
    return record, truth


@pytest.mark.parametrize("library", ["httpx2", "aiohttp"])
def test_data_that_arrived_just_before_a_long_pass_ended_is_not_flagged(library: str) -> None:
    """The loop is held from 2 ms after each token (10 ms apart, from a simulator in a process
    of its own) until 0.3 ms after the next arrives: each stamp is a fraction of a ms late, but
    the passes alone say it may have waited the whole hold (over the target: flagged,
    falsely). The kernel's arrival times, each that of the token the simulator sent, say how
    late it really was."""
    # A busy machine can make the simulator miss the holds (its token then comes to an idle
    # loop, in a short pass the kernel is not asked about): too few passes are left to check
    # (2 of 20 once in CI). And it can hold back what nothing in the process sees: between the
    # simulator's write and the select's return, not the loop's thread waiting for a CPU (a
    # hypervisor's steal, a loopback delivery left to ksoftirqd). A short pass's bound, the
    # select's return, is then short of the error against the write: 2.1 ms against 0.56 in a
    # quiet CI run (the first content's, which the kernel's stamp now times, `FIRST_PEEKS`),
    # 1.15 ms against 0.61 after the holds, -n 2 beside test_accuracy (session 28). A bound the
    # code got wrong would be wrong in every stream: a stream with too few arrivals to check,
    # or whose bound is short of the error, is run again, at most twice.
    for _ in range(3):
        record, truth = _held_stream(library)
        m = call_metrics(record)
        errors = [abs(e) for e in itl_errors(m, truth)] + [abs(error_of(record, m, truth).ttft)]
        passes_only = call_metrics(without_arrivals(record))
        assert passes_only.stamp_error_max_ms is not None
        # The holds made the passes long: alone, they bound the stamps past the target.
        assert passes_only.stamp_error_max_ms > STAMP_TARGET_MS, passes_only.stamp_error_max_ms
        # Each arrival the kernel gave for a pass that read one content chunk is that token's:
        # after the simulator began its write, before it noted the write done (0.2 ms either way
        # for the two clocks' reads), not another's 10 ms away.
        log = record.loop_lag
        assert log is not None
        content = [
            i
            for i, (_, _, c) in enumerate(record.reads)
            if b'"content":"' in c and b'"role"' not in c
        ]
        sent = dict(zip(content, truth.content_events, strict=True))
        read_in: dict[int, list[int]] = {}  # the reads whose data each pass read off the socket
        for i, (_, arrived, _) in enumerate(record.reads):
            p = bisect.bisect_right(log.readies_ns, arrived) - 1 - record.stamp_passes
            read_in.setdefault(p, []).append(i)
        checked = 0
        for p, arrived in zip(record.arrival_passes, record.arrivals_ns, strict=True):
            if len(read_in.get(p, ())) == 1 and read_in[p][0] in sent:
                event = sent[read_in[p][0]]
                began, done = event.sent_span_ns
                assert began - 200_000 <= arrived <= done + 200_000, p
                checked += 1
        least, most = error_span_ms(content_times(record, m), truth)  # read from `m`, as measured
        sound = m.stamp_error_max_ms is not None and m.stamp_error_max_ms >= least - 0.2
        if checked >= 5 and sound:
            break
    assert checked >= 5, checked
    assert m.stamp_error_max_ms is not None
    # The bound is sound against what was sent (the least error the simulator's notes before
    # and after each write allow: a busy machine may preempt it between the two)
    # and, when each long pass that read a token read only that (the kernel's time stamp is
    # then its own), tight: within 1.5 ms of the worst error, and no flag where that is under
    # the target. (On a quiet machine: 0.6-0.7 ms, the passes alone 10.4 ms.)
    # Tight against the most the notes allow: the error against the note after each write
    # alone understates it where the simulator was preempted between the write and the note
    # (beside two CPU hogs: bound 9.7 ms, that error 7.9, session 18).
    assert m.stamp_error_max_ms >= least - 0.2, (m.stamp_error_max_ms, least, errors)
    peeked = [read_in.get(p, []) for p in record.arrival_passes]
    if all(len(reads) == 1 for reads in peeked if set(reads) & set(sent)):
        tight = (m.stamp_error_max_ms, most, errors)
        assert m.stamp_error_max_ms <= max(max(errors), most) + 1.5, tight
        if max(errors) < STAMP_TARGET_MS - 1.5:
            assert "client_saturated" not in m.flagged, (m.flagged, m.notes)


def test_late_stamps_are_put_down_to_the_collector_or_the_machine_when_the_ticks_say_so() -> None:
    """The passes say how late a stamp may be, the ticks whose doing it was: a 12 ms pass that a
    collection filled is `gc_paused` (one 40-45 ms collection stalled 150 aiohttp streams at once,
    each 20-45 ms late, with the loop's lag under SATURATED_LAG_MS), one the process spent
    waiting for a CPU `cpu_starved`; neither is the client's."""
    ms = 1_000_000
    passes = [(float(t), t - 1.0) for t in range(90, 109)] + [(120.0, 108.0), (121.0, 120.0)]
    passes += [(float(t), t - 1.0) for t in range(122, 150)]
    for paused, queued, flag in [(11, 0, "gc_paused"), (0, 11, "cpu_starved")]:
        log = _passes(LoopLag(LAG_TICK_NS), *passes)
        log.add(T0 + 119 * ms, 12 * ms, own_ns=12 * ms - queued * ms, paused_ns=paused * ms)
        m = call_metrics(_chat_record([100.5, 121.5, 140.5], log, stamp_passes=1))
        assert m.stamp_error_max_ms == pytest.approx(13.0)
        assert m.flagged == (flag,), m.notes
    # A collection that cannot explain the lateness is not blamed for it: a 6 ms one in a
    # 40 ms pass of the loop's own work (under the ticks' 50 ms) leaves 37 ms: saturated.
    slow = [(float(t), t - 1.0) for t in range(90, 109)] + [(150.0, 109.0), (151.0, 150.0)]
    slow += [(float(t), t - 1.0) for t in range(152, 190)]
    log = _passes(LoopLag(LAG_TICK_NS), *slow)
    log.add(T0 + 149 * ms, 41 * ms, own_ns=41 * ms, paused_ns=6 * ms)
    m = call_metrics(_chat_record([100.5, 151.5, 170.5], log, stamp_passes=1))
    assert m.stamp_error_max_ms == pytest.approx(42.0)
    assert m.flagged == ("client_saturated",), m.notes
    # An idle loop whose thread, woken by the arrival, waited 9 ms for a CPU (a busy machine: the
    # ticks need not see it): the stamp may be that late, and it is the machine's.
    woke = [(float(t), t - 1.0) for t in range(90, 110)] + [(119.0, 109.8, 9.0)]
    woke += [(float(t), t - 1.0) for t in range(120, 150)]
    m = call_metrics(
        _chat_record([100.5, 120.5, 140.5], _passes(LoopLag(LAG_TICK_NS), *woke), stamp_passes=1)
    )
    assert m.stamp_error_max_ms == pytest.approx(10.2)
    assert m.flagged == ("cpu_starved",), m.notes
    assert any(n.startswith("cpu_starved: a stamp may be up to 10 ms late") for n in m.notes)


def test_what_aiohttps_reader_held_with_the_head_is_bounded_one_pass_later() -> None:
    """aiohttp's reader is stamped in the callback that read the socket, but what it held
    already when the head returned is stamped in the request's task, a pass later: a chunk
    that came with the head, read in the pass selected at 4 ms and stamped at 8.45 ms, may be
    8.45 ms late, not 4.45 (the bound of a stamp in its reading pass). It is not read back: in
    the head's pass, the request's task (which stamps what came with the head) runs before the
    pass's callbacks, which may read and stamp more, data that came after the pass's select
    (review, session 19: a content event that came at 9.3 ms and was stamped at 9.5 by the
    callback was read back to 8.0)."""
    passes = [(float(t), t - 4.0) for t in range(0, 40, 4)]
    log = _passes(LoopLag(LAG_TICK_NS), *passes)
    chunks = [(8.45, chat_chunk({"role": "assistant", "content": "t0 "}))]
    chunks += [(12.5, chat_chunk({"content": "t1 "})), (16.5, chat_usage() + DONE)]
    record = make_record("http://h/v1/chat/completions", chunks, headers_ms=8.4, loop_lag=log)
    record.stamp_passes = 0
    m = call_metrics(record)
    assert m.stamp_error_max_ms == pytest.approx(8.45)
    assert m.ttft == pytest.approx(8_450)
    assert m.flagged == ("client_saturated",)
    # Stamped by the callback later in that pass, after data that came at 9.3: not before it.
    chunks[0] = (9.5, chunks[0][1])
    late = make_record("http://h/v1/chat/completions", chunks, headers_ms=8.4, loop_lag=log)
    late.stamp_passes = 0
    assert call_metrics(late).ttft == pytest.approx(9_500)


def test_an_idle_loops_wait_is_not_counted_against_its_stamps() -> None:
    """A select that waited (the loop had nothing to run) ends at the first arrival: the wait
    is not lateness. An idle loop between 20 ms tokens: passes whose earliest is their own
    return (less the slack), not the pass before's."""
    passes = []
    for t in range(100, 200, 20):  # a wait of 19.8 ms, then the read, then the stamp's pass
        passes += [(float(t), t - 0.2), (t + 0.1, float(t))]
    idle = _passes(LoopLag(LAG_TICK_NS), (80.0, 79.0), *passes)
    m = call_metrics(_chat_record([100.15, 120.15, 140.15], idle, stamp_passes=1))
    # 0.05-0.35 ms late (the stamp's pass began at 100.1; the wait ended at 100.0, less 0.2).
    assert m.stamp_error_max_ms == pytest.approx(0.3)
    assert not m.flagged


def test_without_passes_the_stamps_have_no_bound() -> None:
    # uvloop, a proactor loop, or a log begun after the stamps: the ticks alone, as before.
    m = call_metrics(_chat_record([100.5, 120.5], LoopLag(LAG_TICK_NS), stamp_passes=1))
    assert m.stamp_error_max_ms is None and not m.flagged
    late = _passes(LoopLag(LAG_TICK_NS), (130.0, 129.0), (131.0, 130.0))
    assert (
        call_metrics(_chat_record([100.5, 120.5], late, stamp_passes=1)).stamp_error_max_ms is None
    )


def test_a_log_keeps_so_many_passes_and_later_stamps_have_no_bound() -> None:
    async def main() -> LoopLag:
        record = _record(time.perf_counter_ns())
        _stream.watch_loop(record, time.perf_counter_ns)
        assert record.loop_lag is not None
        record.loop_lag.pass_limit = 5
        await asyncio.sleep(0.1)
        record.t_eof_ns = time.perf_counter_ns()
        return record.loop_lag

    log = asyncio.run(main())
    assert len(log.readies_ns) == len(log.earliest_ns) == len(log.woken_ns) == 5
    passes = [(float(t), t - 1.0) for t in range(90, 110)]
    full = _passes(LoopLag(LAG_TICK_NS), *passes)
    full.pass_limit = len(passes)
    assert call_metrics(_chat_record([100.5, 105.5], full, stamp_passes=1)).stamp_error_max_ms
    m = call_metrics(_chat_record([100.5, 120.5], full, stamp_passes=1))
    assert m.stamp_error_max_ms is None and not m.flagged


def test_a_real_loops_passes_are_timed_while_calls_are_in_flight_and_not_after() -> None:
    async def main() -> tuple[WireRecord, bool, bool]:
        loop = asyncio.get_running_loop()
        record = _record(time.perf_counter_ns())
        _stream.watch_loop(record, time.perf_counter_ns)
        timed = "select" in vars(loop._selector)  # type: ignore[attr-defined]
        await asyncio.sleep(0.03)
        record.t_eof_ns = time.perf_counter_ns()
        await asyncio.sleep(_stream.LAG_TICK_NS * _stream.LAG_SCAN_TICKS * 3 / 1e9)
        return record, timed, "select" in vars(loop._selector)  # type: ignore[attr-defined]

    record, timed, still = asyncio.run(main())
    assert timed and not still
    log = record.loop_lag
    assert log is not None and len(log.readies_ns) == len(log.earliest_ns) > 3
    assert list(log.readies_ns) == sorted(log.readies_ns)
    assert all(e <= r for e, r in zip(log.earliest_ns, log.readies_ns, strict=True))


@pytest.mark.parametrize("library", ["httpx2", "aiohttp"])
def test_a_loop_held_under_the_lag_threshold_flags_the_stamps_it_made_late(library: str) -> None:
    """Another task holds the loop 30 ms while a stream's tokens arrive every 10 ms: the
    stamps are that late against what the simulator (a process of its own) sent. The lag
    monitor's worst wake-up is under SATURATED_LAG_MS, so before the passes were timed the
    call went unflagged (issue #17); the passes bound it, and flag it where the time read back
    may still be off by more than the target. (Read back, the times may come closer than the
    stamps: beside two CPU hogs, 6.6 and 14.7 ms off where the stamps were over 15; session
    20. Flagged then all the same, the bound covering the error.)"""
    with remote_simulator(*paced(decode_ms_per_token=10.0, output_tokens=20)) as base:

        async def main() -> list[WireRecord]:
            records: list[WireRecord] = []
            body = {
                "model": "m",
                "stream": True,
                "messages": [{"role": "user", "content": "q"}],
            }
            url = f"{base}/v1/chat/completions"
            if library == "httpx2":
                client: Any = instrument(httpx2.AsyncClient(timeout=10), sink=records.append)
                async with client.stream("POST", url, json=body) as r:
                    asyncio.get_running_loop().call_later(0.06, time.sleep, 0.03)
                    async for _ in r.aiter_bytes():
                        pass
                await client.aclose()
            else:
                import aiohttp

                session = instrument(aiohttp.ClientSession(), sink=records.append)
                async with session.post(url, json=body) as r:
                    asyncio.get_running_loop().call_later(0.06, time.sleep, 0.03)
                    async for _ in r.content.iter_any():
                        pass
                await session.close()
            return records

        (record,) = asyncio.run(main())
        truth = truth_of(record, truth_log(base))
    m = call_metrics(record)
    # The stamps themselves (no passes: no read-back) were late: the loop was held.
    stamped = call_metrics(replace(record, loop_lag=None))
    assert max(abs(e) for e in itl_errors(stamped, truth)) > 15, itl_errors(stamped, truth)
    assert m.loop_lag_max_ms is not None and m.loop_lag_max_ms < SATURATED_LAG_MS
    # Read back, the bound covers the error, and a call that may be off past the target is
    # flagged: time.sleep is the loop's own doing; beside CPU hogs the ticks may put it down
    # to the machine instead (cpu_starved): flagged either way.
    least, _ = _error_span_ms(record, truth)
    assert m.stamp_error_max_ms is not None and m.stamp_error_max_ms >= least - 0.2, (
        m.stamp_error_max_ms,
        least,
    )
    assert m.stamp_error_max_ms > STAMP_TARGET_MS, m.stamp_error_max_ms
    assert {"client_saturated", "cpu_starved"} & set(m.flagged), (m.flagged, m.notes)


def _error_span_ms(record: WireRecord, truth: TruthRecord) -> tuple[float, float]:
    """The least and the most the call's ttft or worst gap, as its metrics read them (each
    content stamp less the lateness shown), can be off against what the simulator sent
    (`remote_sim.error_span_ms`)."""
    m = call_metrics(record)
    assert m.ttft is not None
    return error_span_ms(content_times(record, m), truth)


def test_calm_calls_are_within_the_target_of_what_was_sent_or_flagged() -> None:
    """The promise call by call: an unflagged call's ttft and gaps are within the p99 target
    (5 ms) of the simulator's send times (a process of its own). Four streams at once through
    the async openai SDK, three rounds: on a quiet machine none is flagged; on a busy one some
    may be, and each that is late must be. Judged by the least error the simulator's notes
    before and after each write allow, and held to the target plus 2 ms."""
    with remote_simulator(*paced(decode_ms_per_token=10.0, output_tokens=20)) as base:

        async def main() -> list[WireRecord]:
            records: list[WireRecord] = []
            client = instrument(
                openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0),
                sink=records.append,
            )

            async def stream(i: int) -> None:
                s = await client.chat.completions.create(
                    model=f"m{i}",  # pairs the call with the simulator's record of it
                    messages=[{"role": "user", "content": f"q{i}"}],
                    stream=True,
                    stream_options={"include_usage": True},
                )
                async for _ in s:
                    pass

            await stream(-1)  # the SDK's first streamed call in this process: not the point
            records.clear()
            for round_ in range(3):
                await asyncio.gather(*(stream(4 * round_ + i) for i in range(4)))
            await client.close()
            return records

        records = asyncio.run(main())
        truths = truth_log(base)
    assert len(records) == 12
    late = []
    by_model = {t.model: t for t in truths}
    for record in records:
        m = call_metrics(record)
        assert m.model is not None
        truth = by_model[m.model]
        worst, _ = _error_span_ms(record, truth)
        if worst > STAMP_TARGET_MS + 2 and not m.flagged:
            late.append((worst, m.stamp_error_max_ms, m.loop_lag_max_ms))
        # A flag rests on a bound over the target, or on the lag monitor's own evidence.
        if m.client_saturated:
            assert m.stamps_late_ms is not None and m.stamps_late_ms > STAMP_TARGET_MS
    assert not late, late


def test_a_loop_held_by_garbage_collection_is_paused_not_saturated() -> None:
    log = LoopLag(2_000_000)
    ms = 1_000_000
    log.add(195 * ms, 90 * ms, own_ns=90 * ms, paused_ns=80 * ms)  # 80 ms of it a collection
    record = _record(100 * ms)
    record.t_eof_ns = 300 * ms
    record.loop_lag = log
    m = call_metrics(record)
    assert (m.loop_lag_max_ms, m.client_saturated, m.gc_paused) == (90.0, False, True)
    assert m.flagged == ("gc_paused",)
    assert any(n.startswith("gc_paused: the event loop woke up to 90 ms late") for n in m.notes)
    # The loop's own 60 ms beside a 30 ms collection: its own work saturated it.
    log.add(290 * ms, 90 * ms, own_ns=90 * ms, paused_ns=30 * ms)
    assert call_metrics(record).flagged == ("client_saturated",)


def test_a_paused_call_is_excluded_and_diagnosed_as_the_collector() -> None:
    data = make_call(ttft_ms=900).to_dict()
    data.update(gc_paused=True)
    paused = CallMetrics.from_dict(data)
    calls = [make_call(ttft_ms=100) for _ in range(3)] + [paused]
    budget = [parse_expectation("ttft.max < 500ms", source="t")]
    assert [j.passed for j in judge(budget, pool_of(_data(calls)), flagged="exclude")] == [True]
    (finding,) = [f for f in diagnose_calls(calls) if f.kind == GC_PAUSED]
    assert finding.evidence == {"calls": 1, "of": 4}
    assert "garbage collection" in finding.message and "do less work" not in finding.message
    assert title(GC_PAUSED) == "Garbage-collection pauses"


def test_round_trip_and_old_data() -> None:
    record = _record(0)
    record.t_eof_ns = 10
    m = call_metrics(record)
    data = m.to_dict()
    assert CallMetrics.from_dict(json.loads(json.dumps(data))) == m
    for key in ("loop_lag_max_ms", "client_saturated", "prompt_text", "output_text"):
        data.pop(key, None)  # empty values are left out already
    old = CallMetrics.from_dict(data)
    assert (old.loop_lag_max_ms, old.client_saturated, old.prompt_text) == (None, False, None)


# ---- the flagged-calls policy in the verdicts ------------------------------------------------


def _data(calls: list[CallMetrics]) -> dict[str, Any]:
    return {
        "nodeid": "t",
        "samples": 1,
        "calls": [Call(0, False, (c,)).to_wire() for c in calls],
        "manual": [],
    }


def _saturated(call: CallMetrics, lag_ms: float) -> CallMetrics:
    data = call.to_dict()
    data.update(loop_lag_max_ms=lag_ms, client_saturated=True)
    return CallMetrics.from_dict(data)


def test_exclude_leaves_flagged_calls_out_of_timing_pools_but_not_counts() -> None:
    calm = [make_call(ttft_ms=100) for _ in range(9)]
    slow = [
        _saturated(make_call(ttft_ms=900), 150.0),
        make_call(ttft_ms=900, consumer_bound=True),
    ]
    data = _data(calm + slow)
    expectations = [
        parse_expectation(e, source="t") for e in ("ttft.max < 500ms", "error_rate < 50%")
    ]
    kept = judge(expectations, pool_of(data))
    assert [j.passed for j in kept] == [False, True]
    excluded = judge(expectations, pool_of(data), flagged="exclude")
    assert [j.passed for j in excluded] == [True, True]
    assert excluded[0].n == 9 and excluded[1].n == 11  # counts keep every call

    only_flagged = judge(expectations[:1], pool_of(_data(slow)), flagged="exclude")
    assert not only_flagged[0].passed
    assert "2 flagged call(s) excluded" in only_flagged[0].message


def test_fail_adds_a_judgement_naming_the_flags() -> None:
    calls = [make_call(), _saturated(make_call(), 150.0), make_call(consumer_bound=True)]
    expectations = [parse_expectation("ttft.p50 < 10s", source="t")]
    judgements = judge(expectations, pool_of(_data(calls)), flagged="fail")
    assert [j.expr for j in judgements] == ["ttft.p50 < 10s", FLAGGED_EXPR]
    failure = judgements[1]
    assert not failure.passed and failure.n == 3
    assert "2 of 3 calls flagged" in failure.message
    assert "1 consumer_bound" in failure.message
    assert "1 client_saturated (stamps up to 150 ms late" in failure.message
    # No flagged call, nothing added; no budget, nothing judged.
    assert len(judge(expectations, pool_of(_data([make_call()])), flagged="fail")) == 1
    assert judge([], pool_of(_data(calls)), flagged="fail") == []
    with pytest.raises(ValueError, match="flagged-calls policy"):
        judge(expectations, pool_of(_data(calls)), flagged="drop")


def test_a_starved_call_is_flagged_excluded_and_diagnosed_as_a_busy_machine() -> None:
    data = make_call(ttft_ms=900).to_dict()
    data.update(cpu_starved=True)
    starved = CallMetrics.from_dict(data)
    assert starved.flagged == ("cpu_starved",)
    calls = [make_call(ttft_ms=100) for _ in range(3)] + [starved]
    budget = [parse_expectation("ttft.max < 500ms", source="t")]
    assert [j.passed for j in judge(budget, pool_of(_data(calls)), flagged="exclude")] == [True]
    failure = judge(budget, pool_of(_data(calls)), flagged="fail")[1]
    assert "1 cpu_starved (the process waited for a CPU: a busy machine" in failure.message
    (finding,) = [f for f in diagnose_calls(calls) if f.kind == CPU_STARVED]
    assert finding.evidence == {"calls": 1, "of": 4}
    assert "busy machine" in finding.message and "do less work" not in finding.message
    assert title(CPU_STARVED) == "Busy machine"


# ---- end to end --------------------------------------------------------------------------------

INNER = """
import asyncio
import time
import pytest

def burn(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass

async def stream(client, i, burn_ms):
    s = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"q{i}"}], stream=True, max_tokens=16)
    async for _ in s:
        burn(burn_ms)  # the test body's CPU work between chunks, on the loop

@pytest.mark.asyncio
async def test_saturated(async_openai_client, latency):
    # 1 ms of the test body's work a chunk on 100 streams: the loop's wake-ups come over 50 ms
    # late. (At 0.2 ms a chunk on 200 streams, the kernel's arrival times read most calls'
    # stamps back to within the target: 1-15 of 200 were flagged.)
    await asyncio.gather(*(stream(async_openai_client, i, 1.0) for i in range(100)))
    finals = [c.final for c in latency.calls]
    assert len(finals) == 100
    assert all(f.loop_lag_max_ms is not None for f in finals)
    assert sum(f.client_saturated for f in finals) > 50

def test_sync_calls_have_no_loop_lag(openai_client, latency):
    openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    (call,) = latency.calls
    assert call.final.loop_lag_max_ms is None and not call.final.client_saturated
"""

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
ASYNC_ARGS = ("--latency-sim=instant", "-p", "asyncio", "--asyncio-mode=strict")


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(
        """
        [pytest]
        asyncio_default_fixture_loop_scope = function
        """
    )
    return pytester


def test_many_streams_with_cpu_work_are_saturated(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(test_inner=INNER)
    result = tester.runpytest(*ASYNC_ARGS)
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*Task was destroyed*")


BUDGETED = """
import asyncio
import time
import pytest

def burn(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass

async def stream(client, i, burn_ms):
    s = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"q{i}"}], stream=True, max_tokens=16)
    async for _ in s:
        burn(burn_ms)

@pytest.mark.asyncio
@pytest.mark.latency("e2e.p50 < 60s")
async def test_saturated(async_openai_client):
    await asyncio.gather(*(stream(async_openai_client, i, 1.0) for i in range(100)))
"""


def test_fail_fails_a_budgeted_test_with_saturated_calls_and_says_why(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(test_inner=BUDGETED)
    tester.runpytest(*ASYNC_ARGS).assert_outcomes(passed=1)
    result = tester.runpytest(*ASYNC_ARGS, "--latency-flagged=fail")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*pytest-latency: flagged calls in a budgeted test*",
            "*of 100 calls flagged:*client_saturated (stamps up to * ms late*",
        ]
    )


CONSUMER = """
import json
import time
import pytest

def ask(client, sleep_s):
    for _ in client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "q"}], stream=True, max_tokens=20):
        time.sleep(sleep_s)

@pytest.fixture
def paced(llm_sim):
    # 20 tokens over 120 ms: a consumer sleeping 25 ms a chunk finds several reads buffered, and
    # a prompt consumer has 6 ms a chunk to keep up even on a busy machine. At 3 ms it did not:
    # beside two CPU hogs the SDK's own work on a chunk took over 1 ms (AWAY_NS) now and then,
    # its next chunk had arrived meanwhile (one time in three), and 2 of 16 such chunks flag a
    # call; at 1.5 ms it fell behind beside one hog. Where a busy machine merges the slow one's
    # reads, few chunks are left to flag; its 25 ms on the role chunk, before the first token,
    # flags the call by itself (over 20 ms of its own before the first content event). At 20 ms
    # that was borderline once the wait for a CPU on waking was no longer counted as the
    # consumer's: beside two CPU hogs one run in three did not flag it.
    # The first content comes 26 ms after the role chunk (a tail before it, every call): where
    # the two came 6 ms apart a busy machine once held the client back until both were queued
    # (-n 2 beside test_accuracy and test_frameworks, session 28), the slow call's ttft was
    # then its server's, and the budget held.
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=1.0, prefill_us_per_token=0.0, decode_ms_per_token=6.0, jitter=0.0,
        tail_prob=1.0, tail_ms=20.0))

# The kernel's arrival times put a buffered event's time back no later than its data came
# (HTTP/1 in the clear): the slow call's e2e is the server's. Not its ttft: the first content
# waits in the socket with the events after it while the consumer sleeps on the role chunk, and
# all the kernel says is when the newest of them came, ~100 ms after the request. The prompt
# calls' ttft is ~27 ms.
@pytest.mark.latency("ttft.max < 50ms")
def test_budgeted(openai_client, latency, paced):
    with latency.sample(warmup=True):  # the client's first-use work is not the point here
        ask(openai_client, 0)
    with latency.sample():
        for _ in range(3):
            ask(openai_client, 0)
        ask(openai_client, 0.100)  # slower than decode: consumer-bound, ttft ~100 ms
    assert len(latency.calls) == 4 and latency.calls[-1].final.consumer_bound
    with open("flags.json", "w") as f:
        json.dump([c.final.flagged for c in latency.calls], f)
"""


def test_exclude_and_fail_on_a_consumer_bound_call(tester: pytest.Pytester) -> None:
    tester.makepyfile(test_inner=CONSUMER)
    keep = tester.runpytest("--latency-sim=instant")
    keep.assert_outcomes(failed=1)
    keep.stdout.fnmatch_lines(["*latency budget missed*", "*ttft.max*"])
    exclude = tester.runpytest("--latency-sim=instant", "--latency-flagged=exclude")
    flags = json.loads((tester.path / "flags.json").read_text())
    assert flags[3] == ["consumer_bound"]
    # On a busy machine a prompt call's stamps can be held back too: cpu_starved, excluded as
    # well. With every call excluded the budget has no values left and fails, saying so.
    if all(flags[:3]):
        exclude.assert_outcomes(failed=1)
        exclude.stdout.fnmatch_lines(["*no values*4 flagged call(s) excluded*"])
    else:
        exclude.assert_outcomes(passed=1)
    # Open: in 1 quiet CI run of 3 one prompt call of the three came out consumer_bound too
    # (session 6), and again in 1 of 2 at session 7's end, after garbage collection and the VM's
    # stalls were told apart (gc_paused; held back under 10 ms). At most one is tolerated
    # until the cause is found (session 7 note).
    allowed: tuple[list[str], ...] = ([], ["cpu_starved"], ["gc_paused"], ["consumer_bound"])
    assert all(f in allowed for f in flags[:3]), flags
    assert sum(f == ["consumer_bound"] for f in flags[:3]) <= 1, flags
    fail = tester.runpytest("--latency-sim=instant", "--latency-flagged=fail")
    fail.assert_outcomes(failed=1)
    fail.stdout.fnmatch_lines(["* of 4 calls flagged: *consumer_bound*"])


def test_the_flagged_option_and_ini_key_are_validated(tester: pytest.Pytester) -> None:
    tester.makepyfile(test_inner="def test_x():\n    pass\n")
    result = tester.runpytest("--latency-flagged=drop")
    result.stderr.fnmatch_lines(["*'drop' is not a flagged-calls policy*"])
    tester.makeini(f"{INI}latency_flagged = drop\n")
    result = tester.runpytest()
    result.stderr.fnmatch_lines(["*latency_flagged = 'drop'*not valid*"])
    tester.makeini(f"{INI}latency_flagged = exclude\n")
    tester.runpytest().assert_outcomes(passed=1)


def test_a_late_loop_whose_thread_did_not_run_is_a_busy_machine_not_a_saturated_client() -> None:
    """Under CPU contention the loop wakes up late because the process waited for a CPU, not
    because the test's code kept the loop busy (issue #14, item 11): the monitor records the
    loop thread's own CPU time over each sleep, and only that part can saturate the client."""
    ms = 1_000_000
    for own_ms, saturated in ((120, True), (5, False)):
        log = LoopLag(10 * ms)
        log.add(250 * ms, 120 * ms, own_ms * ms)  # held from 130 ms: the call is in flight
        record = _record(100 * ms)
        record.t_eof_ns = 300 * ms
        record.loop_lag = log
        m = call_metrics(record)
        assert m.loop_lag_max_ms == 120.0  # the stamps' possible error, whatever the cause
        assert m.client_saturated is saturated
        assert m.cpu_starved is not saturated
        assert any(n.startswith("cpu_starved") for n in m.notes) is not saturated, m.notes


@pytest.mark.parametrize(
    ("late_ms", "own_ms", "starved"),
    [
        (25, 6.6, True),  # 16 streams beside two hogs: 18 ms in the run queue, stamps 9-22 ms late
        (25, 22, False),  # as late, but the loop's own work: under 50 ms, nothing to say
        (3.2, 0.5, False),  # a quiet machine: 2.7 ms waiting for a CPU is under the 5 ms target
        (9, 3, True),  # 6 ms waiting for a CPU: over the target
    ],
)
def test_a_loop_that_waited_for_a_cpu_past_the_accuracy_target_is_starved(
    late_ms: float, own_ms: float, starved: bool
) -> None:
    """Under the 50 ms a saturated client needs, a wake-up late by more than the p99 accuracy
    target (5 ms) for want of a CPU flags the call `cpu_starved`: its stamps may be that late
    (session 12: 16 streams beside two CPU hogs, unflagged before, 9-22 ms late)."""
    ms = 1_000_000
    log = LoopLag(10 * ms)
    log.add(150 * ms, round(late_ms * ms), round(own_ms * ms))
    record = _record(100 * ms)
    record.t_eof_ns = 200 * ms
    record.loop_lag = log
    m = call_metrics(record)
    assert not m.client_saturated
    assert m.cpu_starved is starved
    assert any(n.startswith("cpu_starved") for n in m.notes) is starved, m.notes


def test_a_tick_late_for_want_of_a_cpu_does_not_flag_stamps_the_passes_bound_within_target() -> (
    None
):
    """The tick's evidence of a wait for a CPU flags a call only where nothing bounds its stamps:
    where the passes bound them within the target, the timer was late and the data's stamps were
    not (session 18: one tick 6.6 ms late flagged all 75 calls in flight, each within the target
    by the simulator's truth). Where the bound is over the target, the tick still says whose
    doing it was."""
    ms = 1_000_000
    quick = [(float(t), t - 1.0) for t in range(90, 150)]
    log = _passes(LoopLag(LAG_TICK_NS), *quick)
    log.add(T0 + 130 * ms, round(9 * ms), round(3 * ms))  # 6 ms of it waiting for a CPU
    m = call_metrics(_chat_record([100.5, 120.5, 140.5], log, stamp_passes=1))
    assert m.stamp_error_max_ms == pytest.approx(2.0)
    assert m.loop_lag_max_ms == pytest.approx(9.0)
    assert not m.flagged, m.notes
    # The same tick with a long pass of the loop's own (12 ms) before the second stamp: late
    # stamps, and the tick puts them down to the machine.
    slow = [(float(t), t - 1.0) for t in range(90, 109)] + [(120.0, 108.0), (121.0, 120.0)]
    log = _passes(LoopLag(LAG_TICK_NS), *slow, *[(float(t), t - 1.0) for t in range(122, 150)])
    log.add(T0 + 130 * ms, round(9 * ms), round(3 * ms))
    m = call_metrics(_chat_record([100.5, 121.5, 140.5], log, stamp_passes=1))
    assert m.stamp_error_max_ms == pytest.approx(13.0)
    assert m.flagged == ("cpu_starved",), m.notes
    # And with no passes to bound the stamps, the tick alone flags (as before the passes).
    ticks = LoopLag(LAG_TICK_NS)
    ticks.add(T0 + 130 * ms, round(9 * ms), round(3 * ms))
    m = call_metrics(_chat_record([100.5, 120.5, 140.5], ticks, stamp_passes=1))
    assert m.stamp_error_max_ms is None
    assert m.flagged == ("cpu_starved",), m.notes


def test_the_monitor_tells_the_loop_s_own_delay_from_waiting_for_a_cpu() -> None:
    """A loop blocked by its own code (CPU work or a blocking call) is the client's doing; a
    loop whose thread waited, runnable, for a CPU is a busy machine. Checked in a subprocess
    pinned to one CPU at nice 10 beside two busy processes at normal priority on the same CPU:
    it wakes up late, and almost none of it is its own. (At nice 19, as at first, Linux 6.18's
    scheduler starved it for minutes: a 3 s loop at nice 19 there took 6 min to end.)"""
    import os
    import subprocess
    import sys

    if not os.path.exists("/proc/thread-self/schedstat") or not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs Linux schedstat and CPU affinity")
    code = """
import asyncio, json, os, sys, time
from pytest_latency.capture import _stream
from pytest_latency.diagnose import CPU_STARVED, GC_PAUSED, diagnose_calls, title
from pytest_latency.wire import WireRecord
mode = sys.argv[1]
if mode == "starved":
    os.nice(10)

async def main():
    record = WireRecord("POST", "http://h/v1/chat/completions", b"{}", time.perf_counter_ns())
    _stream.watch_loop(record, time.perf_counter_ns)
    await asyncio.sleep(0.02)
    if mode == "blocked":
        time.sleep(0.08)  # a blocking call on the loop: the client's own doing
    await asyncio.sleep(0.6 if mode == "starved" else 0.05)
    log = record.loop_lag
    worst = max(range(len(log)), key=lambda i: log.lates_ns[i])
    print(json.dumps([log.lates_ns[worst], log.owns_ns[worst]]))

asyncio.run(main())
"""
    cpu = min(os.sched_getaffinity(0))

    def pinned() -> None:
        os.sched_setaffinity(0, {cpu})

    results = {}
    for mode in ("blocked", "starved"):
        hogs = []
        if mode == "starved":
            burn = "while True: pass"
            hogs = [
                subprocess.Popen([sys.executable, "-c", burn], preexec_fn=pinned) for _ in range(2)
            ]
        try:
            out = subprocess.run(
                [sys.executable, "-c", code, mode],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
                preexec_fn=pinned,
            ).stdout
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        results[mode] = json.loads(out)
    late, own = results["blocked"]
    assert late > 50_000_000 and own > 0.8 * late, results
    # How late a starved wake-up is depends on the kernel's scheduler and its slices: 10 ms
    # on CI's machine, tens of ms on session 13's, 3.9-20 ms on session 15's (Linux 6.18, whose
    # slices are shorter). 2 ms is well above a quiet loop's jitter (0.1-0.3 ms); what the test
    # holds is whose time it was.
    late, own = results["starved"]
    assert late > 2_000_000 and own < 0.5 * late, results


def test_the_flagged_help_names_every_flag_the_policy_acts_on() -> None:
    # The help text cannot read the catalogue (pytest loads the settings module in every
    # session, the catalogue only with the first call): it is held to it here.
    from pytest_latency.catalogue import DISTORTING_FLAGS, FLAGS
    from pytest_latency.plugin._settings import FLAGGED_DESC

    named = {name for name in FLAGS if name in FLAGGED_DESC}
    expected = {"consumer_bound", "client_saturated", "capped", "cpu_starved", "gc_paused"}
    assert named == set(DISTORTING_FLAGS) == expected


def test_a_body_read_in_the_consumers_task_is_stamped_in_the_pass_that_read_it(
    tmp_path: Any,
) -> None:
    """anyio reads a TCP socket in the loop's protocol callback, a pass before the consumer's
    task takes the bytes (`stamp_passes` 1: the stamp's pass began after they came), but a Unix
    socket in the consumer's own task, where bytes that came after the pass's select are read
    and stamped in it: read back by that pass, they would be shown before they came (review,
    session 19). Likewise a test double's body, made in the task."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        event = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        writer.write(head + b"transfer-encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
        await writer.drain()
        writer.close()

    async def stamp_passes(transport: Any, url: str) -> int:
        records: list[WireRecord] = []
        async with instrument(httpx2.AsyncClient(transport=transport), sink=records.append) as c:
            async with c.stream("POST", url, json={"stream": True}) as r:
                async for _ in r.aiter_bytes():
                    pass
        (record,) = records
        return record.stamp_passes

    async def main() -> tuple[int, int, int]:
        path = str(tmp_path / "s.sock")
        unix = await asyncio.start_unix_server(serve, path)
        tcp = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = tcp.sockets[0].getsockname()[1]
        async with unix, tcp:
            over_tcp = await stamp_passes(httpx2.AsyncHTTPTransport(), f"http://127.0.0.1:{port}/")
            over_unix = await stamp_passes(httpx2.AsyncHTTPTransport(uds=path), "http://h/")

            async def body() -> Any:
                yield b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'

            double = httpx2.MockTransport(lambda _: httpx2.Response(200, content=body()))
            made = await stamp_passes(double, "http://h/")
        return over_tcp, over_unix, made

    assert asyncio.run(main()) == (1, 0, 0)


_SENDER = """
import socket, sys, time
sock = socket.socket(fileno=int(sys.argv[1]))
for _ in sys.stdin:  # each go from the parent
    time.sleep(0.001)
    sock.send(b"x")
    print(time.perf_counter_ns(), flush=True)
"""


def _hold_the_gil() -> None:
    held = b"\x01" * 50_000_000  # one C call, 20 ms here: the GIL is not let go
    del held


_T = TypeVar("_T")


async def _read_after(sock: socket.socket, trigger: Callable[[], _T]) -> tuple[int, _T]:
    """Watch `sock` for reading on the running loop, let the monitor's passes idle 20 ms, call
    `trigger`; when a reader callback sees the data, take it off: the callback's time, and what
    `trigger` returned."""
    loop = asyncio.get_running_loop()
    came: asyncio.Future[int] = loop.create_future()

    def arrived() -> None:
        if not came.done():
            came.set_result(time.perf_counter_ns())

    loop.add_reader(sock, arrived)
    await asyncio.sleep(0.02)  # the monitor's passes, idle
    triggered = trigger()
    read = await came
    loop.remove_reader(sock)
    sock.recv(10)
    return read, triggered


def _reads_with_the_gil_held(provoke: Callable[[Callable[[], None]], threading.Thread]) -> None:
    """Five times, on a monitored loop reading a socket whose data a process of its own sends
    1 ms after each go: `provoke(go)` starts a thread that holds the GIL around the data's
    arrival (and has the go sent); then check that the pass whose callback read the data does
    not bound it as coming later than it was sent."""
    a, b = socket.socketpair()
    with (
        a,
        b,
        subprocess.Popen(
            [sys.executable, "-c", _SENDER, str(b.fileno())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(b.fileno(),),
            text=True,
        ) as sender,
    ):
        assert sender.stdin is not None and sender.stdout is not None
        pipe = sender.stdin

        def go() -> None:
            pipe.write("go\n")
            pipe.flush()

        async def main() -> tuple[WireRecord, list[int]]:
            record = _record(time.perf_counter_ns())
            _stream.watch_loop(record, time.perf_counter_ns)
            reads: list[int] = []
            for _ in range(5):
                read, thread = await _read_after(a, lambda: provoke(go))
                reads.append(read)
                thread.join()
            record.t_eof_ns = time.perf_counter_ns()
            return record, reads

        record, reads = asyncio.run(main())
        sent = [int(sender.stdout.readline()) for _ in reads]
        pipe.close()
    log = record.loop_lag
    assert log is not None
    held = 0
    for read, came in zip(reads, sent, strict=True):
        p = bisect.bisect_right(log.readies_ns, read) - 1  # the pass whose callback read it
        # The data came before the pass's earliest, however its select returned.
        assert log.earliest_ns[p] <= came, ((log.earliest_ns[p] - came) / 1e6, p)
        held += log.readies_ns[p] - came > 5_000_000
    if not held:  # no select returned the data late (the GIL let go at once: a busy machine?)
        pytest.skip("no select held for the GIL past the data's arrival")


class _Stolen(selectors.EpollSelector):
    """An epoll selector whose next wait, once `send` is set, has the data sent and then keeps
    the thread from epoll for 5 ms without its sleeping or waiting for a CPU: as a hypervisor
    that takes a virtual CPU from a running thread (steal time) would."""

    send: Callable[[], None] | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout != 0 and self.send is not None:
            send, self.send = self.send, None
            send()
            end = time.perf_counter_ns() + 5_000_000
            while time.perf_counter_ns() < end:
                pass
        return super().select(timeout)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread sleeps are counted on Linux")
def test_a_wait_in_which_the_thread_never_slept_is_bounded_as_a_poll() -> None:
    """A wait that ends at an arrival sleeps once, in epoll. One that never slept found its
    data queued when it began: the time from its start to its return is not an arrival's
    wake-up but whatever kept the thread from epoll, which its counters may not show: beside
    three CPU hogs on this 2-CPU virtual machine, waits of 96-112 ms that never slept, under
    4 ms of them waiting for a CPU and under 0.1 on it, bounded data sent 65-115 ms before as
    arriving after (session 22; a hypervisor's steal fits). Here a spin stands in for it."""
    a, b = socket.socketpair()
    selector = _Stolen()

    async def main() -> tuple[WireRecord, list[int], list[int]]:
        record = _record(time.perf_counter_ns())
        _stream.watch_loop(record, time.perf_counter_ns)
        reads: list[int] = []
        sent: list[int] = []

        def send() -> None:
            sent.append(time.perf_counter_ns())
            b.send(b"x")

        def arm() -> None:
            selector.send = send

        for _ in range(3):
            read, _ = await _read_after(a, arm)
            reads.append(read)
        record.t_eof_ns = time.perf_counter_ns()
        return record, reads, sent

    with a, b:
        loop = asyncio.SelectorEventLoop(selector)
        try:
            record, reads, sent = loop.run_until_complete(main())
        finally:
            loop.close()
    log = record.loop_lag
    assert log is not None and len(sent) == 3
    for read, came in zip(reads, sent, strict=True):
        p = bisect.bisect_right(log.readies_ns, read) - 1  # the pass whose callback read it
        assert log.readies_ns[p] - came >= 4_000_000  # its select returned after the steal
        # The data came before the pass's earliest: the steal is not taken for a wait.
        assert log.earliest_ns[p] <= came, ((log.earliest_ns[p] - came) / 1e6, p)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread sleeps are counted on Linux")
def test_data_that_came_while_another_thread_held_the_gil_is_not_bounded_by_the_wake() -> None:
    """A waiting select ends at the first arrival, so what it returns came since, less the
    loop's thread's wait for a CPU once woken. Not when, once epoll returned, the thread slept
    again for the GIL another thread held: the data came before the select's return by all of
    that wait. A thread that slept twice in the select is bounded as a poll (by the pass
    before's), here by 20 ms of another thread's C call holding the GIL (session 20: one such
    wait, 7 ms, read a stamp back as at most 0.3 ms late)."""

    def provoke(go: Callable[[], None]) -> threading.Thread:
        def hold() -> None:
            time.sleep(0.002)  # the loop is in its select, waiting
            go()
            _hold_the_gil()

        thread = threading.Thread(target=hold)
        thread.start()
        return thread

    _reads_with_the_gil_held(provoke)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread sleeps are counted on Linux")
def test_data_queued_before_a_select_that_then_waited_for_the_gil_is_bounded_as_a_poll() -> None:
    """Data that came while the loop ran a callback is queued when the loop next selects; epoll
    returns it at once, without a sleep, but the thread may then wait for the GIL another took
    when the select let it go: one sleep, as a wait's would be. The loop polls first, so that
    what was queued is a poll's, bounded by the pass before's poll (review, session 20)."""

    def provoke(go: Callable[[], None]) -> threading.Thread:
        start = threading.Event()

        def hold() -> None:
            start.wait()  # then waits for the GIL, which the loop lets go in its next select
            _hold_the_gil()

        def busy() -> None:
            go()
            time.sleep(0.005)  # the data comes meanwhile
            start.set()

        thread = threading.Thread(target=hold)
        thread.start()
        asyncio.get_running_loop().call_soon(busy)
        return thread

    _reads_with_the_gil_held(provoke)
