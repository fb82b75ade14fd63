"""The frameworks teams call LLMs through, captured: each through the real package from PyPI (the
`frameworks` extra pins them), against the simulator in its own process, its truth log the oracle.

Every framework is run twice: under auto-capture (`install_auto_capture`, what
`--latency-capture=auto` installs), and with a client instrumented by `capture.instrument` where
the framework takes one (docs/frameworks.md gives each recipe). The first call of each scenario
is a warmup, as a `warmup=` budget would discard it: frameworks build their own models, parsers
and imports on the first call (litellm's first sync stream spends ~0.45 s of it between reads,
which capture flags `consumer_bound`; `test_a_frameworks_first_call_is_flagged_not_hidden`).
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import statistics
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# Imported here so they stay loaded: pytester's in-process runs drop every module first imported
# during a run, and importing the frameworks afresh costs seconds per inner run.
import agents  # noqa: F401
import httpx2
import langchain_openai  # noqa: F401
import pytest
from framework_scenarios import SCENARIOS, Scenario, modes, record_calls
from remote_sim import (
    PACED_DECODE_MS,
    PACED_TOKENS,
    away_after_the_role,
    content_times,
    error_of,
    paced,
    paced_simulator,
    remote_simulator,
    truth_log,
    truth_of,
    ttft_least_ms,
)

from pytest_latency import capture
from pytest_latency.metrics import call_metrics
from pytest_latency.sim import TruthRecord
from pytest_latency.wire import WireRecord

# The frameworks' own deprecations (litellm reads pydantic's `model_computed_fields` off an
# instance, which pydantic 2.11 deprecated) are theirs to fix; under the suite's warnings-as-errors
# they would fail the stream inside litellm. So are the clients they cache for the process
# (langchain-openai's default httpx clients, litellm's aiohttp sessions): bound to a loop that
# `asyncio.run` has closed, they warn when collected, in whichever test comes next.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    # pydantic's note on a litellm TypedDict (ReadOnly items), raised when litellm first builds it.
    pytest.mark.filterwarnings("ignore:Item.*ReadOnly. qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


CALLS = 6  # per scenario, the first a warmup
# The flags that say the machine, not the framework, held a call's stamps back.
MACHINE_FLAGS = frozenset({"cpu_starved", "client_saturated", "gc_paused"})
# tests/test_accuracy.py's bounds: they hold on a busy 2-core machine and still catch a
# consumer-paced stamp or a parse bias (tens of ms); benchmarks/ measures the strict targets.
P50_BOUND_MS = 2.0
# One case's median of five: a framework's own work between two reads comes on top of the
# machine's (litellm's anthropic provider on aiohttp: 1-5 ms before the first content on a quiet
# machine, docs/performance.md §1b; 5.08 ms beside two CPU hogs).
CASE_P50_BOUND_MS = 10.0
MAX_BOUND_MS = 20.0


@pytest.fixture(scope="module", autouse=True)
def _collect_the_frameworks_garbage() -> Iterator[None]:
    """The clients the frameworks cache and drop (see `pytestmark`) are collected here, under
    this module's warning filters, not in whichever test's collection comes next."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with paced_simulator() as base:
        yield base


CASES = [
    pytest.param(name, mode, id=f"{name}-{mode}")
    for name, scenario in SCENARIOS.items()
    for mode in modes(scenario)
]


@dataclass
class Run:
    records: list[WireRecord]
    ttft_errors: list[float]  # |measured - truth| in ms, per call past the warmup
    tpot_errors: list[float]
    # The least |ttft error| the simulator's span around its first content write allows, ms,
    # of each call the product did not flag (its promise: within the target, or flagged).
    unflagged_ttft_least: list[float] = field(default_factory=list)
    # Per call past the warmup: whether the product said the machine held its stamps back
    # (`MACHINE_FLAGS`).
    machine_held: list[bool] = field(default_factory=list)

    def kept(self, errors: list[float]) -> list[float]:
        """`errors` of the calls the machine did not hold back, where three or more are left:
        else none (a case the machine starved is judged by its flags and the pooled test)."""
        left = [e for e, held in zip(errors, self.machine_held, strict=True) if not held]
        return left if len(left) >= 3 else []


def _measure(scenario: Scenario, records: list[WireRecord], truths: list[TruthRecord]) -> Run:
    run = Run(records, [], [])
    for record in records[1:]:
        measured = call_metrics(record)
        assert measured.api == scenario.api and measured.error is None, record.error_message
        truth = truth_of(record, truths)
        assert measured.output_tokens == truth.output_tokens == PACED_TOKENS
        assert measured.input_tokens == truth.input_tokens
        error = error_of(record, measured, truth)
        run.ttft_errors.append(error.ttft)
        run.tpot_errors.append(error.tpot)
        run.machine_held.append(bool(MACHINE_FLAGS.intersection(measured.flagged)))
        if not measured.flagged:
            stamp = content_times(record, measured)[0]
            run.unflagged_ttft_least.append(ttft_least_ms(stamp, truth))
    return run


@pytest.fixture(scope="module")
def runs(sim: str) -> dict[tuple[str, str], Run | BaseException]:
    """Every case run once, in order (the server's truth log is shared): a failure is kept for
    its own case's test to raise, so one framework's break does not hide the others."""
    out: dict[tuple[str, str], Run | BaseException] = {}
    for case in CASES:
        name, mode = case.values
        scenario = SCENARIOS[str(name)]
        try:
            records = record_calls(scenario, sim, str(mode), CALLS)
            out[str(name), str(mode)] = _measure(scenario, records, truth_log(sim))
        except Exception as exc:
            out[str(name), str(mode)] = exc
    return out


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_a_framework_is_measured_as_the_simulator_sent(
    runs: dict[tuple[str, str], Run | BaseException], name: str, mode: str
) -> None:
    run = runs[name, mode]
    if isinstance(run, BaseException):
        raise run
    assert len(run.records) == CALLS, [r.url for r in run.records]  # each call recorded once
    # Per case, a bound that a consumer-paced stamp or a parse bias (tens of ms) breaks and a
    # busy machine's wake-up delays (1-3 ms a read at load 3 on 2 cores) do not. Over the calls
    # the product did not say the machine held back: beside a CI run's two busy loops all five
    # of litellm's anthropic async calls were flagged, three 13 ms off (session 27). A parse
    # bias shows in the quiet runs and in the pooled test, which counts every call.
    ttft = run.kept(run.ttft_errors)
    assert statistics.median(ttft or [0.0]) <= CASE_P50_BOUND_MS, (
        run.ttft_errors,
        run.machine_held,
    )
    # The worst call alone, against the simulator's span around its write and only where the
    # product did not flag it: a simulator preempted between its write and its note of it (48 ms
    # once beside two hogs, tests/test_capture_aiohttp.py) is not the stamp's error, and a call
    # the machine starved is flagged `cpu_starved`.
    worst = max(run.unflagged_ttft_least, default=0.0)
    assert worst <= MAX_BOUND_MS, (run.unflagged_ttft_least, run.ttft_errors)
    tpot = run.kept(run.tpot_errors)
    assert statistics.median(tpot or [0.0]) <= P50_BOUND_MS, (run.tpot_errors, run.machine_held)


def test_the_frameworks_pooled_errors_meet_the_accuracy_bound(
    runs: dict[tuple[str, str], Run | BaseException],
) -> None:
    """All cases' calls pooled, as tests/test_accuracy.py pools the SDKs' scenarios."""
    done = [run for run in runs.values() if isinstance(run, Run)]
    ttft = [e for run in done for e in run.ttft_errors]
    assert len(ttft) >= 50, f"{len(done)} of {len(runs)} cases ran"
    assert statistics.median(ttft) <= P50_BOUND_MS, sorted(ttft)


def test_litellm_s_raw_aiohttp_provider_is_captured_by_auto_capture(sim: str) -> None:
    """litellm's `aiohttp_openai/` provider posts through a raw aiohttp session it builds (no
    client to instrument). It cannot stream in 1.110 (it decodes the event stream as JSON), so its
    calls are whole answers: their e2e is checked against the time the simulator finished."""
    import litellm

    async def run() -> None:
        for _ in range(3):
            await litellm.acompletion(
                model="aiohttp_openai/gpt-4o-mini",
                api_base=f"{sim}/v1",
                api_key="k",
                messages=[{"role": "user", "content": "Count to twelve."}],
            )

    records: list[WireRecord] = []
    uninstall = capture.install_auto_capture(sink=records.append)
    try:
        asyncio.run(run())
    finally:
        uninstall()
    assert len(records) == 3 and all(r.read_ahead for r in records)  # the aiohttp binding's
    truths = truth_log(sim)
    for record in records[1:]:
        measured = call_metrics(record)
        truth = truth_of(record, truths)
        assert measured.api == "openai.chat" and measured.stream is False and not measured.error
        assert measured.output_tokens == truth.output_tokens == PACED_TOKENS
        assert measured.input_tokens == truth.input_tokens
        assert measured.e2e is not None and truth.t_done_ns is not None
        done_ms = (truth.t_done_ns - record.t_start_ns) / 1e6
        assert abs(measured.e2e / 1000 - done_ms) <= MAX_BOUND_MS, (measured.e2e, done_ms)


def test_a_frameworks_first_call_is_flagged_not_hidden(
    runs: dict[tuple[str, str], Run | BaseException], sim: str
) -> None:
    """A first call on which the framework spent its own time between reads (litellm's first
    sync stream builds its models then: ~0.45 s) has stamps of when the framework asked, not of
    when the server sent: capture flags it (`consumer_bound`, the work between reads; pydantic-ai's
    and the Agents SDK's first async runs are flagged so too) rather than pass that time off as
    the server's."""
    truths = truth_log(sim)
    late = []
    for case, run in runs.items():
        if isinstance(run, Run):
            first = run.records[0]
            measured = call_metrics(first)
            error = error_of(first, measured, truth_of(first, truths)).ttft
            if error > MAX_BOUND_MS:
                late.append((case, error, measured.flagged))
    if not late:  # another test of this process streamed through them first
        pytest.skip("no framework's first call was slow in this process")
    assert all(flagged for _, _, flagged in late), late


class _GILTakenInRead:
    """An httpcore2 network backend whose streams, once `armed`, hand the GIL to a thread that
    keeps it ~70 ms (sorting, one C call) inside the next socket read, after the bytes came:
    what a framework's own thread can do to a read by chance, made certain."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.armed = False
        block = list(range(400_000))
        random.Random(1).shuffle(block)
        self._block = block

    def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
        return _GILTakenStream(self, self._backend.connect_tcp(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def take_the_gil(self) -> None:
        started = threading.Event()

        def hold() -> None:
            started.set()
            sorted(self._block)

        holder = threading.Thread(target=hold)
        holder.start()
        started.wait()  # returns once the holder runs; the GIL comes back after its sort
        holder.join()


class _GILTakenStream:
    def __init__(self, backend: _GILTakenInRead, stream: Any) -> None:
        self._backend = backend
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._stream.read(max_bytes, timeout)
        if self._backend.armed:
            self._backend.armed = False
            self._backend.take_the_gil()
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@pytest.fixture(scope="module")
def slow_prefill_sim() -> Iterator[str]:
    """The paced stream with its first content ~40 ms after the role event (3 ms of prefill a
    prompt token), so that a consumer back at once reads the role event alone."""
    with remote_simulator(
        *paced(decode_ms_per_token=PACED_DECODE_MS, output_tokens=PACED_TOKENS),
        "--prefill-us-per-token=3000",
    ) as base:
        yield base


def test_a_read_held_off_the_gil_by_another_thread_is_not_taken_for_a_wait(
    slow_prefill_sim: str,
) -> None:
    """A framework's own threads (litellm starts logging threads on its first sync stream) can
    hold the GIL while the consumer's read returns data buffered long before: the read's thread
    sleeps, neither running nor queued for a CPU, and on its wall time and own CPU time alone
    looked like one that waited for its data, so the first content's stamp went 328 ms late and
    unflagged (CI). Here the consumer comes back from 80 ms away to read the first content, and
    another thread takes the GIL inside that read. The socket held the events when the read was
    asked for (`WireRecord.ready`): the call is flagged."""
    from openai import OpenAI

    sim = slow_prefill_sim
    http = httpx2.Client()
    backend = _GILTakenInRead(http._transport._pool._network_backend)  # type: ignore[attr-defined]
    http._transport._pool._network_backend = backend  # type: ignore[attr-defined]
    records: list[WireRecord] = []
    client = capture.instrument(
        OpenAI(base_url=f"{sim}/v1", api_key="k", http_client=http), sink=records.append
    )
    with http:
        record = _held_first_content(client, backend, records)
    measured = call_metrics(record)
    first = truth_of(record, truth_log(sim)).content_events[0]
    asked, arrived, _ = record.reads[1]  # the first content's
    # Its stamp is late: the case this test is about (the kernel's arrival time at the ask may
    # read the ttft back, session 23: the flag is the point here).
    assert (arrived - first.sent_span_ns[1]) / 1e6 > MAX_BOUND_MS
    held_ms = (arrived - asked) / 1e6
    assert held_ms > 20, held_ms  # the other thread held the read, or this tests nothing
    unread = dict(record.ready).get(1, 0)  # the events had come: the socket said so at the ask
    assert unread >= len(record.reads[1][2]), record.ready
    notes = (record.ready, record.read_cpu, record.queued, record.paused)
    # Flagged either way. Beside two busy loops the read's thread also waited for a CPU (99.7 ms
    # of a 618 ms hold, session 28), and cpu_starved then says so.
    queued_ms = sum(wait for _, wait in record.queued) / 1e6
    flags = {"consumer_bound", "cpu_starved"} if queued_ms > 20 else {"consumer_bound"}
    assert flags & set(measured.flagged), (measured.flagged, held_ms, notes)


def _held_first_content(
    client: Any, backend: _GILTakenInRead, records: list[WireRecord]
) -> WireRecord:
    """The record of a stream read as the test above needs it: the role event read alone, 80
    ms away, then the first content's read held off the GIL."""
    first = b""

    def arm() -> None:
        backend.armed = True

    for _ in range(3):
        record = away_after_the_role(client, 0.080, records, arm)
        first = record.reads[0][2]
        # A busy machine may hold the consumer off until the content came: then try again.
        if first.count(b"data:") == 1 and b'"content":""' in first:
            return record
    pytest.fail(f"the first read held more than the role event in 3 tries: {first!r}")


# ---- as a user's suite meets them ----------------------------------------------------------------

USER_SUITE = """
import asyncio
import json
import os

import litellm
import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI
from pytest_latency import instrument

set_tracing_disabled(True)


@pytest.mark.latency("ttft.p95 < 2s", "output_tokens.min >= 1", samples=3)
def test_langchain(llm_sim):
    llm = ChatOpenAI(model="gpt-4o-mini", base_url=llm_sim.openai_base_url, api_key="k",
                     stream_usage=True)
    for _ in llm.stream("Count."):
        pass


@pytest.mark.latency("ttft.p95 < 2s", "output_tokens.min >= 1", samples=3)
def test_litellm_async(llm_sim):
    async def run():
        stream = await litellm.acompletion(
            model="openai/gpt-4o-mini", api_base=llm_sim.openai_base_url, api_key="k",
            messages=[{"role": "user", "content": "Count."}], stream=True,
            stream_options={"include_usage": True})
        async for _ in stream:
            pass
    asyncio.run(run())


@pytest.mark.latency("calls.min >= 1", "tpot.p50 < 1s", samples=2)
def test_agent(llm_sim):
    async def run():
        client = instrument(AsyncOpenAI(base_url=llm_sim.openai_base_url, api_key="k"))
        agent = Agent(name="a", instructions="Be brief.",
                      model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
                      model_settings=ModelSettings(include_usage=True))
        result = Runner.run_streamed(agent, "Count.")
        async for _ in result.stream_events():
            pass
        await client.close()
    asyncio.run(run())
"""


def test_a_users_framework_suite_is_captured_and_judged(pytester: pytest.Pytester) -> None:
    """Auto-capture sees langchain's httpx2 and litellm's aiohttp; `instrument` an Agents SDK
    client (which auto-capture would also see: the client is recorded once either way)."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_user=USER_SUITE)
    out = pytester.path / "latency.json"
    result = pytester.runpytest(
        "--latency-sim=instant",
        "--latency-capture=auto",
        f"--latency-json={out}",
        # The frameworks' own warnings (pydantic schema notes, deprecations) are not this test's.
        "-W",
        "ignore",
    )
    result.assert_outcomes(passed=3)
    data = json.loads(out.read_text(encoding="utf-8"))
    calls = {t["nodeid"].rsplit("::", 1)[-1]: t["call_count"] for t in data["tests"]}
    assert calls == {"test_langchain": 3, "test_litellm_async": 3, "test_agent": 2}, calls
    # Without auto-capture only the instrumented client is seen; the others fail their budgets.
    result = pytester.runpytest("--latency-sim=instant", "-W", "ignore")
    result.assert_outcomes(passed=1, failed=2)
