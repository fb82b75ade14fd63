"""What one call keeps (docs/metrics.md, "What a call keeps"): capture's keep limit, the decoded
limit and the event limit, each in isolation with small limits, and a capped call's flag from
its metrics to the result file, the Markdown and `--latency-flagged`; tests/test_hostile.py
drives the real defaults through a hostile server."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import anthropic  # noqa: F401  (kept loaded across pytester's in-process runs: see test_plugin_sim)
import openai  # noqa: F401
import pytest
from test_metrics import CHAT_URL, MS, T0, chat_chunk, chat_text_stream, make_record

import pytest_latency.sim  # noqa: F401
from pytest_latency.capture import _stream
from pytest_latency.capture._queued import Framing
from pytest_latency.metrics import CallMetrics, _scan, call_metrics
from pytest_latency.metrics._body import decode_reads
from pytest_latency.wire import NOTE_COST, READ_COST, WireRecord

pytest_plugins = ["pytester"]


def _record(limit: int) -> WireRecord:
    return WireRecord("POST", CHAT_URL, b"{}", 0, keep_limit=limit)


CHUNKS = [bytes([65 + i]) * 100 for i in range(10)]
# Three whole reads and 50 bytes of the fourth fit.
LIMIT = 3 * (100 + READ_COST) + READ_COST + 50


def _check_capped(record: WireRecord) -> None:
    assert [data for _, _, data in record.reads] == [*CHUNKS[:3], CHUNKS[3][:50]]
    assert record.capped and record.dropped_reads == 6 and record.dropped_bytes == 50 + 600
    assert record.t_dropped_ns is not None and record.t_dropped_ns > record.reads[-1][1]


def test_timed_body_keeps_up_to_the_limit_and_counts_the_rest() -> None:
    record = _record(LIMIT)
    clock = itertools.count(1_000, 1_000).__next__
    body = _stream.TimedBody(CHUNKS, record, clock)
    assert list(body) == CHUNKS  # the consumer gets every byte
    _check_capped(record)
    assert record.t_eof_ns is not None


def test_async_timed_body_keeps_up_to_the_limit() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for chunk in CHUNKS:
            yield chunk

    async def read_all(record: WireRecord) -> list[bytes]:
        clock = itertools.count(1_000, 1_000).__next__
        return [c async for c in _stream.AsyncTimedBody(chunks(), record, clock)]

    record = _record(LIMIT)
    assert asyncio.run(read_all(record)) == CHUNKS
    _check_capped(record)


def test_read_ahead_keeps_up_to_the_limit() -> None:
    record = _record(LIMIT)
    assert list(_stream.ReadAhead(CHUNKS, record, itertools.count(1_000, 1_000).__next__)) == (
        CHUNKS
    )
    _check_capped(record)


def test_prefetched_body_is_kept_up_to_the_limit() -> None:
    record = _record(READ_COST + 10)
    _stream.note_prefetched(record, b"x" * 100, itertools.count(1_000, 1_000).__next__)
    assert record.reads[0][2] == b"x" * 10 and record.dropped_bytes == 90
    assert record.dropped_reads == 0 and record.capped


def test_under_the_limit_nothing_is_flagged() -> None:
    record = _record(10 * (100 + READ_COST))
    list(_stream.TimedBody(CHUNKS, record, itertools.count(1_000, 1_000).__next__))
    assert len(record.reads) == 10 and not record.capped


def test_notes_of_the_consumers_absences_are_charged_to_the_limit() -> None:
    """A test body away 1.5 ms before every read: each read kept may carry a note in `read_cpu`,
    `queued`, `paused`, `ready` and `asked_arrivals` (its socket holds bytes unread throughout),
    charged `NOTE_COST` each, and the reads past the limit carry none (they were noted past it: 300
    reads of a 2,000 B limit kept 11 and noted 299)."""
    record = _record(2_000)
    body = _stream.TimedBody([b"data: {}\n\n"] * 100, record, time.perf_counter_ns)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.send(b"x" * 100)
        body.watch_socket(ours, Framing.RAW)
        for _ in body:
            until = time.perf_counter() + 0.0015
            while time.perf_counter() < until:
                pass
    assert record.capped
    noted = (record.read_cpu, record.queued, record.paused, record.ready, record.asked_arrivals)
    if _stream.CAN_ASK_UNREAD and record.read_cpu:
        assert record.ready and {n for _, n in record.ready} == {100}, record.ready
    notes = sum(len(kind) for kind in noted)
    kept = sum(len(data) + READ_COST for _, _, data in record.reads)
    # The read that crossed the limit was noted before it was found not to fit.
    assert kept + NOTE_COST * notes <= record.keep_limit + 6 * NOTE_COST, (kept, notes)
    for kind in noted:
        assert len(kind) <= len(record.reads) + 1


def test_a_capped_call_keeps_its_timing_up_to_the_limit() -> None:
    whole = make_record(CHAT_URL, chat_text_stream())
    # What capture keeps with the limit inside the third content chunk: the first three reads,
    # part of the fourth; the two after it are counted and their last stamp kept.
    kept = [*whole.reads[:3], (*whole.reads[3][:2], whole.reads[3][2][:20])]
    dropped = whole.reads[4:]
    capped = replace(
        whole,
        reads=kept,
        dropped_bytes=len(whole.reads[3][2]) - 20 + sum(len(r[2]) for r in dropped),
        dropped_reads=len(dropped),
        t_dropped_ns=dropped[-1][1],
        t_eof_ns=None,
    )
    full, cut = call_metrics(whole), call_metrics(capped)
    assert not full.capped and cut.capped
    assert cut.ttft == full.ttft and cut.itl == full.itl[:1]
    assert cut.content_events == 2 and cut.dropped_reads == 2
    assert cut.dropped_bytes == capped.dropped_bytes
    assert cut.error is None  # no end marker was kept, but the call was not cut: no `truncated`
    assert cut.tpot is None and cut.output_tokens is None  # the usage chunk was past the limit
    assert cut.t_end_ns == dropped[-1][1]
    assert any(n.startswith("capped: kept the first") for n in cut.notes)
    # The plain-data form carries the flag and the counts; older data (without them) still reads.
    assert CallMetrics.from_dict(cut.to_dict()) == cut
    assert "capped" not in full.to_dict()


def test_a_gzip_bomb_stops_inflating_at_the_decoded_limit() -> None:
    bomb = gzip.compress(b"data: " + b"0" * 1_000_000 + b"\n\n", 9)
    reads = [(0, i, bomb[j : j + 300]) for i, j in enumerate(range(0, len(bomb), 300))]
    body = decode_reads(reads, "gzip", limit=10_000)
    assert body.capped and len(body.data) == 10_000
    assert 0 < body.undecoded_bytes < len(bomb)
    whole = decode_reads(reads, "gzip", limit=2_000_000)
    assert not whole.capped and len(whole.data) == 1_000_008


def test_a_gzip_bomb_call_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    # A small decoded limit, through the call's own path.
    monkeypatch.setattr(
        "pytest_latency.metrics._call.decode_reads",
        lambda reads, encoding: decode_reads(reads, encoding, limit=10_000),
    )
    events = b"".join(chat_chunk({"content": "x" * 50}) for _ in range(2_000))
    packed = gzip.compress(events)
    record = make_record(CHAT_URL, [(100, packed)], content_encoding="gzip")
    m = call_metrics(record)
    assert m.capped and m.dropped_bytes > 0 and m.error is None
    assert 0 < m.content_events < 2_000
    assert any(n.startswith("capped: inflating stopped") for n in m.notes)


def test_the_event_walk_stops_at_the_event_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_scan, "EVENT_LIMIT", 10)
    chunks = [(100 + i, chat_chunk({"content": "x"}) * 4) for i in range(10)]
    m = call_metrics(make_record(CHAT_URL, chunks))
    # The read that reached the limit is walked whole: 12 events; the rest is not parsed.
    assert m.capped and m.content_events == 12 and m.error is None
    assert m.e2e == (T0 + 102 * MS - T0) / 1000
    assert any(n.startswith("capped: walked the first 10 events") for n in m.notes)


CAPPED_SUITE = """
import pytest
from pytest_latency.metrics import _scan

PROMPT = [{"role": "user", "content": "a question"}]

@pytest.fixture
def small_event_limit(monkeypatch):
    monkeypatch.setattr(_scan, "EVENT_LIMIT", 4)  # the simulator's answer is ~20 events

def ask(client):
    for _ in client.chat.completions.create(model="m", messages=PROMPT, stream=True):
        pass

@pytest.mark.latency("ttft.p95 < 5s", samples=2)
def test_capped(openai_client, small_event_limit):
    ask(openai_client)

def test_whole(openai_client):
    ask(openai_client)
"""


def test_a_capped_call_is_counted_shown_and_selectable_by_the_flagged_policy(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner=CAPPED_SUITE)
    outputs = ("--latency-sim=instant", "--latency-json=r.json", "--latency-markdown=r.md")
    pytester.runpytest(*outputs).assert_outcomes(passed=2)
    data = json.loads((pytester.path / "r.json").read_text())
    flags = {t["nodeid"].split("::")[1]: t["flags"]["capped"] for t in data["tests"]}
    assert flags == {"test_capped": 2, "test_whole": 0}
    assert data["session"]["flags"]["capped"] == 2
    markdown = (pytester.path / "r.md").read_text()
    assert "- 2 calls capped \\(past a per-call keep limit: its metrics cover only" in markdown

    fail = pytester.runpytest("--latency-sim=instant", "--latency-flagged=fail")
    fail.assert_outcomes(passed=1, failed=1)
    # Capped both; either may be consumer_bound as well: the instant simulator streams faster
    # than the SDK parses, and on a slow moment its chunks queue past the flag's line (a quiet
    # CI run: "3 chunks found already buffered", and test_whole's call 13; session 28). The
    # count of capped calls is what is asked here.
    fail.stdout.fnmatch_lines(["*2 of 2 calls flagged: *2 capped (past a per-call keep limit*"])

    excluded = pytester.runpytest(*outputs, "--latency-flagged=exclude")
    judged = json.loads((pytester.path / "r.json").read_text())["tests"]
    budget = next(t for t in judged if t["nodeid"].endswith("test_capped"))["budgets"][0]
    assert budget["n"] == 0, (budget, excluded.stdout.str())  # its calls left out of the pool
