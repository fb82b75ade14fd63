"""The simulator's concurrency limit (`max_concurrency`, `max_queue`) and what the model predicts
under load (`expected_under_load`), checked against the server's truth log and through the real
SDKs: the limit holds, the wait for a slot is inside ttft, a request over the line gets the
provider's 429 with retry-after, the SDKs retry it, and the plugin counts `retries` and
`error_rate` as the server saw them."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
from collections.abc import Iterator
from typing import Any
from unittest.mock import ANY

import anthropic
import httpx2
import openai
import pytest
from remote_sim import FOUR_SLOTS, flags_of, remote_simulator, truth_log

from pytest_latency import capture, stats
from pytest_latency.metrics import call_metrics
from pytest_latency.sim import (
    LatencyModel,
    SimServer,
    SimSettingsError,
    TruthRecord,
    add_sim_arguments,
    expected_under_load,
    model_from_args,
)
from pytest_latency.sim._admission import Admission
from pytest_latency.wire import WireRecord

pytest_plugins = ["pytester"]

USER: Any = [{"role": "user", "content": "Say something short."}]
# 10 tokens 4 ms apart: a request holds its slot ~42 ms, long enough that requests sent together
# all arrive while the first ones are still being served, even on a busy machine.
SLOW = LatencyModel(
    ttfb_ms=1.0, prefill_us_per_token=0.0, decode_ms_per_token=4.0, output_tokens=10, seed=3
)


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(SLOW) as s:
        yield s


@pytest.fixture
def sim(server: SimServer) -> SimServer:
    server.set_model(SLOW)
    server.clear_truth()
    return server


def _most_served(records: list[TruthRecord]) -> int:
    """The most requests the truth log shows being served at once: each from when it got its
    slot to its last write (it gives the slot back after that)."""
    edges = []
    for r in records:
        if r.t_slot_ns is None or r.t_done_ns is None:
            continue
        edges += [(r.t_slot_ns, 1), (r.t_done_ns, -1)]
    # At a tie the end comes first: a slot given back is taken by the next in the same instant.
    edges.sort(key=lambda e: (e[0], e[1]))
    return max(itertools.accumulate(d for _, d in edges), default=0)


async def _openai_fan_out(sim: SimServer, n: int, *, max_retries: int = 0) -> list[Any]:
    client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="s", max_retries=max_retries)

    async def one() -> str:
        stream = await client.chat.completions.create(model="g", messages=USER, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    try:
        return await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    finally:
        await client.close()


# --- the model's fields -------------------------------------------------------------------------


def test_limit_fields_are_validated_and_are_cli_flags() -> None:
    with pytest.raises(SimSettingsError, match="max_queue=4 needs max_concurrency > 0"):
        LatencyModel(max_queue=4)
    with pytest.raises(SimSettingsError, match="max_concurrency must be >= 0, got -1"):
        LatencyModel(max_concurrency=-1)
    with pytest.raises(SimSettingsError, match="max_queue must be an int"):
        LatencyModel(max_concurrency=2, max_queue=1.5)  # type: ignore[arg-type]
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    model = model_from_args(parser.parse_args(["--max-concurrency=4", "--max-queue=8"]))
    assert (model.max_concurrency, model.max_queue) == (4, 8)
    needs = r"max_queue=8 needs max_concurrency > 0 .*\(command line\)"
    with pytest.raises(SimSettingsError, match=needs):
        model_from_args(parser.parse_args(["--max-queue=8"]))


def test_expected_under_load_follows_the_schedule_and_littles_law() -> None:
    model = LatencyModel(
        ttfb_ms=2.0,
        prefill_us_per_token=100.0,
        decode_ms_per_token=3.0,
        tokens_per_chunk=4,
        concurrency_slowdown=0.25,
        output_tokens=8,
        tail_prob=0.1,
        tail_ms=50.0,
        max_concurrency=4,
        max_queue=8,
    )
    one = expected_under_load(model, 1, prompt_tokens=10)
    # 2 headers + 0.1 × 50 tail + 1 prefill + 4 tokens × 3 ms.
    assert one.ttft_ms == pytest.approx(2 + 5 + 1 + 12)
    assert one.e2e_ms == pytest.approx(8 + 8 * 3) and one.queue_ms == 0
    four = expected_under_load(model, 4, prompt_tokens=10)
    assert four.served == 4 and four.queued == 0
    assert four.ttft_ms == pytest.approx(8 + 12 * 1.75)  # decode × (1 + 0.25 × 3)
    twelve = expected_under_load(model, 12, prompt_tokens=10)
    # 8 wait behind 4 slots: two service times each.
    assert (twelve.served, twelve.queued, twelve.rejected) == (4, 8, 0)
    assert twelve.queue_ms == pytest.approx(2 * four.service_ms)
    assert twelve.ttft_ms == pytest.approx(twelve.queue_ms + four.ttft_ms)
    twenty = expected_under_load(model, 20, prompt_tokens=10)
    assert (twenty.queued, twenty.rejected) == (8, 8) and twenty.queue_ms == twelve.queue_ms
    unlimited = expected_under_load(
        model.replace(max_concurrency=0, max_queue=0), 12, prompt_tokens=10
    )
    assert unlimited.served == 12 and unlimited.queue_ms == 0
    with pytest.raises(SimSettingsError, match="concurrency must be >= 1, got 0"):
        expected_under_load(model, 0, prompt_tokens=10)


# --- admission, alone ---------------------------------------------------------------------------


def test_admission_is_first_come_first_served_and_bounded() -> None:
    async def scenario() -> None:
        gate = Admission()
        assert gate.try_enter(2) and gate.try_enter(2) and not gate.try_enter(2)
        order: list[int] = []

        async def queued(i: int) -> None:
            assert await gate.wait(2, 2)
            order.append(i)

        first, second = asyncio.create_task(queued(1)), asyncio.create_task(queued(2))
        await asyncio.sleep(0)
        assert gate.waiting == 2 and not await gate.wait(2, 2)  # the line is full: refused
        assert not gate.try_enter(2)  # nobody jumps the line while it is not empty
        gate.leave()
        await first
        assert order == [1] and gate.serving == 2 and gate.waiting == 1
        # A waiter that gives up leaves the line; the slot goes to nobody else.
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert gate.waiting == 0
        gate.leave()
        assert gate.serving == 1 and gate.try_enter(2)
        assert Admission().try_enter(0)  # 0: no limit

    asyncio.run(scenario())


# --- the limit, through the SDKs ----------------------------------------------------------------


def test_limit_holds_and_the_wait_for_a_slot_is_inside_ttft(sim: SimServer) -> None:
    sim.set_model(SLOW.replace(max_concurrency=3, max_queue=20))
    answers = asyncio.run(_openai_fan_out(sim, 12))
    assert all(isinstance(a, str) and a for a in answers), answers
    records = sim.truth()
    assert len(records) == 12 and not any(r.rejected for r in records)
    assert _most_served(records) == 3
    served = sorted(records, key=lambda r: r.t_slot_ns or 0)
    # The first three got a slot at once; each of the other nine waited for one to free: its
    # slot began right after another request's last write (the slot is handed on at once).
    assert [r.queue_ns for r in served[:3]] == [0, 0, 0]
    ends = sorted(r.t_done_ns for r in records if r.t_done_ns is not None)
    for r in served[3:]:
        assert r.queue_ns > 0 and r.t_slot_ns == r.t_received_ns + r.queue_ns
        freed = max(t for t in ends if t <= r.t_slot_ns)
        # Handed on late by a whole service would be 41 ms (1 + 10 x 4); under 25 leaves a
        # busy machine's thread switches room (nine hand-offs, each one can be late).
        assert r.t_slot_ns - freed < 25e6, (r.t_slot_ns - freed, r.queue_ns)
        # The schedule starts in the slot: ttft = the wait + what an unqueued request takes. Its
        # first content was due 1 ms (headers) + 4 ms (a token) after the slot, as the log's
        # own due time says exactly; how late it was sent is the machine's (27 ms beside two
        # CPU hogs), so the log's due time, not the send, is held to the schedule. A schedule
        # started at receipt would put the wait in twice: 40 ms and more here.
        first = r.content_events[0]
        assert r.ttft_ns is not None and r.t_slot_ns is not None
        assert 4e6 <= first.t_due_ns - r.t_slot_ns < 4e6 + 2e6, first.t_due_ns - r.t_slot_ns
        assert r.ttft_ns - r.queue_ns >= 4e6 and first.t_sent_ns >= first.t_due_ns - 1e6


def test_over_the_line_is_the_providers_429_with_retry_after(sim: SimServer) -> None:
    sim.set_model(SLOW.replace(max_concurrency=1, max_queue=1, retry_after_ms=250.0))
    answers = asyncio.run(_openai_fan_out(sim, 3))
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], openai.RateLimitError), answers
    error = errors[0]
    assert error.response.headers["retry-after-ms"] == "250"
    assert error.response.headers["retry-after"] == "1"
    assert isinstance(error.body, dict) and error.body["code"] == "rate_limit_exceeded"
    (rejected,) = [r for r in sim.truth() if r.rejected]
    assert rejected.status == 429 and rejected.api == "openai.chat" and not rejected.events

    sim.clear_truth()

    async def anthropic_fan_out() -> list[Any]:
        client = anthropic.AsyncAnthropic(
            base_url=sim.anthropic_base_url, api_key="s", max_retries=0
        )
        async with client:
            return await asyncio.gather(
                *(client.messages.create(model="c", max_tokens=16, messages=USER) for _ in "abc"),
                return_exceptions=True,
            )

    answers = asyncio.run(anthropic_fan_out())
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], anthropic.RateLimitError), answers
    body: Any = errors[0].body
    assert body == {"type": "error", "error": {"type": "rate_limit_error", "message": ANY}}
    assert "1 being served and 1 waiting" in body["error"]["message"]
    assert [r.status for r in sim.truth() if r.rejected] == [429]


def test_a_client_that_gives_up_waiting_frees_its_place(sim: SimServer) -> None:
    """A waits 200 ms in the one slot; B gives up after 50 ms in line; C queues behind B. When A
    ends, B's client is gone: B is recorded as 499 and C gets the slot at once, not after B."""
    sim.set_model(SLOW.replace(decode_ms_per_token=20.0, max_concurrency=1, max_queue=5))
    body = {"model": "g", "messages": USER, "stream": True}

    async def scenario() -> None:
        async with httpx2.AsyncClient(base_url=sim.openai_base_url, timeout=5) as client:
            first = asyncio.create_task(client.post("/chat/completions", json=body))
            await asyncio.sleep(0.02)
            second = asyncio.create_task(client.post("/chat/completions", json=body, timeout=0.05))
            await asyncio.sleep(0.02)
            health = (await client.get(sim.base_url + "/health")).json()
            assert (health["serving"], health["waiting"]) == (1, 1)
            with pytest.raises(httpx2.ReadTimeout):
                await second
            await client.post("/chat/completions", json=body)
            await first

    asyncio.run(scenario())
    a, b, c = sorted(sim.truth(), key=lambda r: r.t_received_ns)
    assert (a.status, b.status, c.status) == (200, 499, 200)
    assert b.queue_ns > 0 and not b.events and not b.rejected
    assert a.t_done_ns is not None and c.t_done_ns is not None
    # C's slot came when A's ended (within 20 ms), B's never held it.
    assert abs(c.t_received_ns + c.queue_ns - a.t_done_ns) < 20e6
    assert _most_served([a, c]) == 1


async def _anthropic_fan_out(sim: SimServer, n: int, *, max_retries: int) -> list[Any]:
    client = anthropic.AsyncAnthropic(
        base_url=sim.anthropic_base_url, api_key="s", max_retries=max_retries
    )
    async with client:
        replies = [
            client.messages.create(model="c", max_tokens=16, messages=USER) for _ in range(n)
        ]
        return await asyncio.gather(*replies, return_exceptions=True)


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_the_sdks_retry_a_full_line_after_retry_after(sim: SimServer, sdk: str) -> None:
    sim.set_model(SLOW.replace(max_concurrency=2, max_queue=0, retry_after_ms=30.0))
    fan_out = _openai_fan_out if sdk == "openai" else _anthropic_fan_out
    answers = asyncio.run(fan_out(sim, 6, max_retries=8))
    assert not any(isinstance(a, BaseException) for a in answers), answers
    records = sim.truth()
    rejected = [r for r in records if r.rejected]
    assert rejected and all(r.status == 429 for r in rejected)
    assert len(records) - len(rejected) == 6
    # Each retry is the same request again, numbered by the SDK; none gave up.
    assert max(r.attempt for r in records) >= 1
    assert _most_served(records) == 2
    # A retry came back after the back-off the 429 asked for (30 ms), not at once.
    retries = sorted(r.t_received_ns for r in records if r.attempt >= 1)
    first_reject = min(r.t_received_ns for r in rejected)
    assert retries[0] - first_reject >= 25e6


# Requests per client: 48 measured at each level after the first round, a burst that finds the
# line empty (and fewer streams served), which is left out.
def _rounds(clients: int) -> int:
    return 48 // clients + 1


async def _closed_loop(
    base_url: str, clients: int
) -> tuple[list[tuple[str, WireRecord]], list[list[str]]]:
    """`clients` workers, each sending its next streamed chat request when its last ended, each
    through a real async openai client of its own, instrumented as the plugin instruments it;
    every call as (the server's `x-sim-request-id`, its record), and each worker's request ids
    in order. A client a worker makes one call at a time on: its records come in its calls'
    order, so each pairs with its id, and with the server's record of it."""
    ids: list[list[str]] = [[] for _ in range(clients)]
    records: list[list[WireRecord]] = [[] for _ in range(clients)]

    async def worker(mine: list[str], sink: list[WireRecord]) -> None:
        client = capture.instrument(
            openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="s", max_retries=0),
            sink=sink.append,
        )
        async with client:
            for _ in range(_rounds(clients)):
                stream = await client.chat.completions.create(model="g", messages=USER, stream=True)
                mine.append(stream.response.headers["x-sim-request-id"])
                async for _chunk in stream:
                    pass

    await asyncio.gather(*(worker(mine, sink) for mine, sink in zip(ids, records, strict=True)))
    pairs = zip(ids, records, strict=True)
    return [call for mine, sink in pairs for call in zip(mine, sink, strict=True)], ids


def _think_ms(truths: list[TruthRecord], ids: list[list[str]]) -> float:
    """The clients' mean think time as the server saw it: from its last write of a client's
    request to its receipt of that client's next. A closed loop's line is shorter by it (Little's
    law: C clients cycling through `served` busy slots wait service × (C − served) / served − Z),
    and on a busy machine Z is the clients' own delay, not the server's."""
    by_id = {t.request_id: t for t in truths}
    gaps = [
        by_id[nxt].t_received_ns - (by_id[prev].t_done_ns or by_id[prev].t_received_ns)
        for mine in ids
        for prev, nxt in itertools.pairwise(mine)
    ]
    return statistics.fmean(gaps) / 1e6


def test_measured_ttft_at_concurrency_1_4_16_is_what_the_model_predicts() -> None:
    """The plugin's ttft (its capture of the real async openai client) against the simulator in
    its own process, at C = 1, 4 and 16 closed-loop clients and 4 slots: 26 ms, then 44 ms (the
    first event's decode slowed by 0.25 × 3 other streams), then 302 ms (12 waiting for three
    services). The server's planned ttft p50 is the prediction within 5 % + 1 ms above it, and
    may fall short by 15 % + 1 ms (a busy machine's clients keep a shorter line). Each call's
    ttft is held to the server's own log of that call: its first content's send, from the
    client's hand-off (one clock: CLOCK_MONOTONIC), so neither the server's lateness nor the
    request's way in counts against the capture, only the delivery. Without the slowdown C = 4
    would measure 26 ms, without the wait in ttft C = 16 would measure 44: each far outside."""
    with remote_simulator(*flags_of(FOUR_SLOTS)) as base_url:
        for clients in (1, 4, 16):
            httpx2.delete(f"{base_url}/_sim/truth").raise_for_status()
            calls, ids = asyncio.run(_closed_loop(base_url, clients))
            truths = truth_log(base_url)
            by_id = {t.request_id: t for t in truths}
            assert _most_served(truths) == min(clients, 4)
            # Each client's first request starts with the others' (a burst) before any second.
            steady = sorted(calls, key=lambda call: call[1].t_start_ns)[clients:]
            served = sorted(truths, key=lambda t: t.t_received_ns)[clients:]
            assert len(steady) == len(served) == 48
            predicted = expected_under_load(FOUR_SLOTS, clients, prompt_tokens=7).ttft_ms
            # The server's ttft as it planned it (first content due): its process is as busy as
            # the client's, and its sends are late beside CPU hogs (17.9 ms sent against 14 ms
            # due at C = 1), which the client's figures include and the per-call truth removes.
            server_p50 = stats.percentile(sorted(_planned_ttft_ms(t) for t in served), 50)
            # Below the prediction by the clients' think time where there is a line: on a busy
            # machine they are slow to send their next request, so fewer wait (C = 16 beside two
            # hogs and a second test worker: server p50 116 ms against 155 ms; session 11). Less
            # 15 % on top: a mean think time, a p50 line.
            think = _think_ms(truths, ids)
            # And below it where the clients kept fewer streams in service than they could:
            # the server slows each stream's decode by the streams in service when it
            # plans it (beside two hogs at C = 4, a think time of 41 ms: p50 17 ms against
            # 23; session 22). Held to the model at the count it saw, not to less.
            seen = int(stats.percentile(sorted(_serving_at_slot(t, truths) for t in served), 50))
            if seen < min(clients, FOUR_SLOTS.max_concurrency):
                predicted_seen = expected_under_load(FOUR_SLOTS, max(1, seen), prompt_tokens=7)
                floor_ms = predicted_seen.ttft_ms
            else:
                floor_ms = predicted
            line = think if clients > FOUR_SLOTS.max_concurrency else 0
            floor = (floor_ms - line) * 0.85 - 1
            # "Within the target, or flagged": a call whose stamps a starved client held back
            # says so (cpu_starved, client_saturated), and is held to nothing more.
            honest = [(rid, r) for rid, r in steady if not call_metrics(r).flagged]
            errors = sorted(_ttft_error_ms(record, by_id[rid]) for rid, record in honest)
            figures = (clients, predicted, think, seen, server_p50, errors)
            assert floor <= server_p50 <= predicted * 1.05 + 1, figures
            if not errors:  # every call flagged (16 streams beside two hogs): none is promised
                continue
            p50 = stats.percentile(errors, 50)
            # The capture's own error, on the calls no flag set aside: above the send by the
            # delivery, which a busy machine lengthens; below it only where the server's stamp,
            # taken after its write returned, was late itself (down to -5.4 ms beside two CPU
            # hogs). Quiet: p50 0.2-0.3 ms, p95 under 1 ms at every level. Beside two hogs the
            # unflagged calls' p50 was 0.2-3.8 ms and their worst 7.2 ms: a process late for
            # want of a CPU by over 5 ms is flagged cpu_starved (16 streams, 9-22 ms late, were
            # unflagged under the 50 ms rule alone; `metrics.STARVED_LAG_MS`). The accuracy
            # targets, 1 ms p50 and 5 ms p99, are benchmarks/bench_accuracy.py's.
            assert -1 <= p50 <= 8, figures
            assert errors[-1] <= 20, figures


def _ttft_error_ms(record: WireRecord, truth: TruthRecord) -> float:
    """The call's ttft minus the server's: its first content's send after the client's hand-off
    (the stream carries no usage, so no tpot: `remote_sim.signed_error_of` wants one)."""
    sent_ms = (truth.content_events[0].t_sent_ns - record.t_start_ns) / 1e6
    return _ttft_ms(record) - sent_ms


def _serving_at_slot(truth: TruthRecord, truths: list[TruthRecord]) -> int:
    """How many requests, this one included, held a slot when it got its own: the count the
    server's plan slows its decode by."""
    at = truth.t_slot_ns
    assert at is not None
    held = [(t.t_slot_ns, t.t_done_ns) for t in truths if t.t_slot_ns is not None]
    return sum(1 for slot, done in held if slot <= at and (done is None or at < done))


def _planned_ttft_ms(truth: TruthRecord) -> float:
    return (truth.content_events[0].t_due_ns - truth.t_received_ns) / 1e6


def _ttft_ms(record: WireRecord) -> float:
    ttft = call_metrics(record).ttft
    assert ttft is not None
    return ttft / 1000


# --- what the plugin counts -------------------------------------------------------------------

INNER_FAN_OUT = """
import asyncio
import json
import statistics
import pytest

@pytest.fixture
def limited(llm_sim):
    # 2 slots, 2 places in line, 40 ms a request: 8 sent together are 2 served, 2 waiting and
    # 4 turned away, whose retries (30 ms later) find the line full again or a place in it.
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=1.0, prefill_us_per_token=0.0, decode_ms_per_token=4.0, output_tokens=10,
        jitter=0.0, max_concurrency=2, max_queue=2, retry_after_ms=30.0))
    return llm_sim

async def fan_out(client, n):
    # Distinct questions, as a fan-out's are: the plugin tells a call's retries from another
    # call's by the request they resend.
    async def one(i):
        stream = await client.chat.completions.create(
            model="g", messages=[{"role": "user", "content": f"question {i}"}], stream=True)
        async for _ in stream:
            pass
    return await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)

def check(latency, truth, out, retries):
    raised = [o for o in out if isinstance(o, Exception)]
    calls = latency.calls
    assert len(calls) == 8
    # Each call's attempts are the server's records of it: one per try, retries numbered.
    assert sum(len(c.attempts) for c in calls) == len(truth)
    assert sum(c.retries for c in calls) == sum(1 for t in truth if t.attempt > 0)
    # A call fails when its last try was turned away: the SDK gave up and raised.
    given_up = [t for t in truth if t.rejected and t.attempt == retries]
    assert sum(c.failed for c in calls) == len(raised) == len(given_up)
    assert {c.final.error for c in calls if c.failed} <= {"http_429"}
    assert all(type(e).__name__ == "RateLimitError" for e in raised)
    return {"calls": 8, "failed": len(raised), "retries": sum(1 for t in truth if t.attempt > 0),
            "rejected": sum(t.rejected for t in truth)}

@pytest.mark.asyncio
async def test_no_retries(limited, async_openai_client, latency):
    out = await fan_out(async_openai_client.with_options(max_retries=0), 8)
    seen = check(latency, limited.truth(), out, 0)
    assert seen["failed"] == seen["rejected"] == 4
    with open("no_retries.json", "w") as f:
        json.dump(seen, f)

@pytest.mark.asyncio
async def test_retries(limited, async_openai_client, latency):
    out = await fan_out(async_openai_client.with_options(max_retries=2), 8)
    seen = check(latency, limited.truth(), out, 2)
    assert seen["retries"] >= 4
    with open("retries.json", "w") as f:
        json.dump(seen, f)
"""


def test_the_plugin_counts_retries_and_error_rate_as_the_server_saw_them(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner_fan_out=INNER_FAN_OUT)
    result = pytester.runpytest(
        "--latency-sim=instant",
        "-p",
        "asyncio",
        "--asyncio-mode=strict",
        "--latency-json=result.json",
    )
    result.assert_outcomes(passed=2)
    seen = {
        name: json.loads((pytester.path / f"{name}.json").read_text())
        for name in ("no_retries", "retries")
    }
    data = json.loads((pytester.path / "result.json").read_text())
    tests = {t["nodeid"].rsplit("::", 1)[-1]: t for t in data["tests"]}
    for name, counted in seen.items():
        entry = tests[f"test_{name}"]
        assert entry["call_count"] == 8
        assert entry["error_count"] == counted["failed"]
        assert entry["retries"] == counted["retries"]
        assert entry["retried_errors"].get("http_429", 0) >= min(1, counted["retries"])
    assert (
        data["session"]["error_count"] == seen["no_retries"]["failed"] + seen["retries"]["failed"]
    )


# Found by the fan-out above: `recording._group` joined a retry (attempt n) to the latest call
# with the same request whose last attempt was n − 1, whether that attempt failed or not. Two
# identical requests sent together, the first turned away and the second served, made the first's
# retry the second call's "retry": 1 call failed (it did not) and 1 succeeded twice. Only an
# attempt that failed is retried by the SDKs: a call whose last attempt was answered is no
# candidate.
def test_a_retry_never_joins_a_call_that_succeeded() -> None:
    from pytest_latency.recording import Recording

    url = "http://sim/v1/chat/completions"
    body = b'{"model":"g","messages":[{"role":"user","content":"hi"}]}'
    ok = json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": "g",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
    ).encode()
    limited = json.dumps({"error": {"type": "requests", "code": "rate_limit_exceeded"}}).encode()

    def attempt(t_ns: int, n: int, status: int, answer: bytes) -> WireRecord:
        record = WireRecord("POST", url, body, t_start_ns=t_ns, attempt=n)
        record.t_headers_ns, record.status = t_ns + 1_000_000, status
        record.content_type = "application/json"
        record.reads.append((t_ns + 1_000_000, t_ns + 1_000_000, answer))
        record.t_eof_ns = t_ns + 1_100_000
        return record

    recording = Recording("t")
    recording.begin_run(warmup=False)
    # B is turned away; A, sent with it, is served; B's retry comes 30 ms later and succeeds.
    for record in (attempt(0, 0, 429, limited), attempt(100_000, 0, 200, ok)):
        recording.sink(record)
    recording.sink(attempt(30_000_000, 1, 200, ok))
    recording.end_run()
    calls = recording.calls()
    assert [[a.status for a in c.attempts] for c in calls] == [[429, 200], [200]]
    assert not any(c.failed for c in calls)


def test_a_call_its_caller_cancelled_is_incomplete_not_failed(sim: SimServer) -> None:
    """A hedge's loser is cancelled while it reads (asyncio.wait, then cancel the rest): the
    caller's choice, as an early close is. The call is kept, incomplete and noted, and no
    error: an error_rate budget does not count it."""
    sim.set_model(SLOW.replace(output_tokens=40))
    records: list[WireRecord] = []

    async def scenario() -> None:
        client = capture.instrument(
            openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="s", max_retries=0),
            sink=records.append,
        )
        async with client:

            async def read() -> None:
                stream = await client.chat.completions.create(model="g", messages=USER, stream=True)
                async for _chunk in stream:
                    pass

            reading = asyncio.create_task(read())
            while not records or not records[0].reads:  # cancelled mid-stream, inside a read
                await asyncio.sleep(0.001)
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading

    asyncio.run(scenario())
    (record,) = records
    assert record.cancelled and record.error is None
    m = call_metrics(record)
    assert m.incomplete and not m.failed and m.error is None
    assert any(n.startswith("cancelled:") for n in m.notes), m.notes
    assert m.ttfb is not None
