"""Garbage collection is neither the test body nor the machine (issue #14; session 7): CPython's
collector stops the process, and a full collection in a process as large as this suite's took
~110 ms, so a prompt `for _ in stream: pass` loop came out consumer_bound on CI and a first call
paid a collection its next calls did not. Capture sums the collector's pauses (`gc_pauses`) over
each absence; `metrics` flags `gc_paused`; the plugin freezes what exists when the first test
body starts, so collections during calls scan only what was made since. The arithmetic's unit
checks are in test_metrics and test_saturation; here real SDK streams from a simulator in its
own process (a collection in the consumer stops an in-process one too)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_sim import paced, remote_simulator

from pytest_latency import gc_pauses

# pytest-asyncio warns in an inner run whose ini leaves its loop scope unset.
INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

pytest_plugins = ["pytester"]

INNER = """
import gc, json, time
import pytest

# Tracked objects the collector must scan on every full collection, as a large process has.
HEAP = [[i] for i in range(__HEAP__)]


def burn(ms):
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("work", ["collect", "burn"])
def test_consumer(openai_client, latency, work):
    started = time.perf_counter()
    gc.collect()
    collect_ms = (time.perf_counter() - started) * 1000
    stream = openai_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "q"}], stream=True)
    for _ in stream:
        if work == "collect":
            gc.collect()  # what an automatic full collection does between two reads
        else:
            burn(collect_ms)  # as long, but the test body's own work
    (call,) = latency.calls
    with open(f"{work}.json", "w") as f:
        json.dump({"flagged": call.final.flagged, "notes": call.final.notes,
                   "collect_ms": collect_ms, "chunks": call.final.content_chunks}, f)
"""

# 20 tokens 2 ms apart: a consumer that stops for a full collection of the 100k-object heap
# (tens of ms) each chunk finds the next ones buffered.
SIM_FLAGS = paced(decode_ms_per_token=2, output_tokens=20)


@pytest.fixture
def remote_sim() -> Iterator[str]:
    with remote_simulator(*SIM_FLAGS) as url:
        yield url


def test_a_consumer_held_by_collections_is_gc_paused_and_one_doing_as_much_work_is_bound(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, remote_sim: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sim-key")
    pytester.makepyfile(test_inner=INNER.replace("__HEAP__", "100_000"))
    # A fresh process: the heap above is what its collections scan (with --latency-gc=keep:
    # frozen, it would be scanned by none of them).
    result = pytester.runpytest_subprocess(
        f"--latency-openai-base-url={remote_sim}/v1", "-p", "no:randomly", "--latency-gc=keep"
    )
    result.assert_outcomes(passed=2)
    collected = json.loads(Path(pytester.path, "collect.json").read_text())
    burned = json.loads(Path(pytester.path, "burn.json").read_text())
    assert collected["collect_ms"] > 5, collected  # long enough to outlast two tokens
    assert collected["flagged"] == ["gc_paused"], collected
    (note,) = [n for n in collected["notes"] if n.startswith("gc_paused")]
    assert "garbage collection held the process" in note, note
    assert burned["flagged"] == ["consumer_bound"], burned


FREEZE = """
import gc, json

def test_body(latency):
    with open("frozen.json", "w") as f:
        json.dump(gc.get_freeze_count(), f)
"""


@pytest.mark.parametrize(("option", "frozen"), [((), True), (("--latency-gc=keep",), False)])
def test_the_first_test_body_starts_with_the_heap_frozen_unless_told_to_keep_it(
    pytester: pytest.Pytester, option: tuple[str, ...], frozen: bool
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_inner=FREEZE)
    assert gc.get_freeze_count() == 0  # an earlier inline run thawed what it froze
    result = pytester.runpytest(*option)
    result.assert_outcomes(passed=1)
    count = json.loads(Path(pytester.path, "frozen.json").read_text())
    assert (count > 0) is frozen, count
    # The session leaves the collector as it found it: this process's garbage collectable.
    assert gc.get_freeze_count() == 0


def test_a_session_leaves_what_was_frozen_before_it_frozen(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=FREEZE)
    pytester.makeini(INI)
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        pytester.runpytest().assert_outcomes(passed=1)
        assert gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()


def test_a_bad_gc_policy_in_the_ini_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(f"{INI}latency_gc = off\n")
    pytester.makepyfile(test_inner=FREEZE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*latency_gc = 'off' in *tox.ini* is not valid*freeze, keep*"])


def test_the_pause_clock_sums_collections() -> None:
    before = gc_pauses.paused_ns()
    junk = [[i] for i in range(100_000)]
    gc.collect()
    assert gc_pauses.paused_ns() > before
    del junk
