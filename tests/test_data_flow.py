"""Data flows once: each call is parsed once however often it is read, sequential sampling's
looks parse nothing twice, and a diagnosed test's report payload stays small with long prompts.
Counts and sizes, not times, so they hold on a busy machine (benchmarks/bench_data_flow.py has
the timings)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence

import anthropic
import pytest

import pytest_latency.metrics._call as metrics_call
from pytest_latency import diagnose, instrument
from pytest_latency.budgets import parse_expectation
from pytest_latency.calls import OUTSIDE, Call, ManualValue
from pytest_latency.pools import Pool
from pytest_latency.recording import LatencyRecorder, Recording, _Entry
from pytest_latency.sim import LatencyModel, SimServer
from pytest_latency.testdata import TestData
from pytest_latency.verdicts import judge
from pytest_latency.wire import LoopLag, WireRecord

pytest_plugins = ["pytester"]

# ~20k characters of text that does not repeat, as a real document's does not.
PROMPT = " ".join(f"item {i} costs {i * 7919 % 10007} units;" for i in range(760))


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    model = LatencyModel.preset("instant").replace(output_tokens=30)
    with SimServer(model, port=0) as server:
        yield server


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts `call_metrics` runs (one entry per parse)."""
    seen: list[int] = []
    real = metrics_call.call_metrics

    def counted(record: object) -> object:
        seen.append(1)
        return real(record)  # type: ignore[arg-type]

    monkeypatch.setattr(metrics_call, "call_metrics", counted)
    import pytest_latency.metrics as metrics

    monkeypatch.setattr(metrics, "call_metrics", counted)
    return seen


def _stream(client: anthropic.Anthropic, prompt: str) -> None:
    with client.messages.stream(
        model="claude-sim", max_tokens=30, messages=[{"role": "user", "content": prompt}]
    ) as s:
        for _ in s.text_stream:
            pass


def test_reading_calls_again_parses_nothing(sim: SimServer, parses: list[int]) -> None:
    recording = Recording("t")
    recording.begin_sample(warmup=False)
    latency = LatencyRecorder(recording)
    with instrument(
        anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k"), sink=recording.sink
    ) as client:
        for step in range(20):
            _stream(client, f"step {step}")
            # An agent loop reading its last call after every step parses only the new one.
            assert latency.calls[-1].final.output_tokens == 30
    assert len(parses) == 20
    for _ in range(20):
        assert len(latency.calls) == 20
    assert len(parses) == 20  # twenty more reads, nothing parsed again


def test_sequential_sampling_parses_each_call_once(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest
        import pytest_latency.metrics as metrics
        import pytest_latency.metrics._call as call

        PARSED = []
        real = call.call_metrics

        def counted(record):
            PARSED.append(id(record))
            return real(record)

        call.call_metrics = metrics.call_metrics = counted

        def pytest_sessionfinish(session):
            print(f"\\nPARSES {len(PARSED)} DISTINCT {len(set(PARSED))}")
        """
    )
    pytester.makepyfile(
        test_seq="""
        import pytest

        # p99 bounds need hundreds of values: every look is inconclusive, so the loop draws
        # 10 → 20 → 40 → 80 samples and judges four times.
        @pytest.mark.latency("e2e.p99 < 10s", samples=10, max_samples=80)
        def test_many_looks(anthropic_client):
            anthropic_client.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "q"}])
        """
    )
    result = pytester.runpytest_subprocess("--latency-sim=instant", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PARSES 80 DISTINCT 80*"])


def test_diagnosed_payload_stays_small_with_long_prompts(sim: SimServer) -> None:
    recording = Recording("t")
    with instrument(
        anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k"), sink=recording.sink
    ) as client:
        for sample in range(20):
            recording.begin_sample(warmup=False)
            for step in range(3):
                _stream(client, f"{PROMPT} sample {sample} step {step}")
            recording.end_sample()
    test = TestData.of(recording.measured(), ("t.py", 1))
    assert len(test.calls) == 60
    assert all(c.final.request_shingles for c in test.calls)  # fingerprinted, before diagnosis
    before = len(json.dumps(test.to_wire()))
    pool = test.pool
    test = test.diagnosed(diagnose.diagnose_test(pool), diagnose.test_figures(pool))
    wire = json.dumps(test.to_wire())
    per_call = len(wire) / 60
    assert per_call <= 1500, per_call  # issue #13: ≤ 1.5 KB per call with a 20k prompt
    assert len(wire) < before / 4
    # What the controller rebuilds is what the worker had: the pool reads the same.
    back = TestData.from_wire(json.loads(wire))
    assert back.pool.values("ttft") == test.pool.values("ttft")
    assert back.findings == test.findings and back.figures == test.figures


# ---- what a review of the redesign found, each pinned ------------------------------------------


def _record(i: int) -> WireRecord:
    record = WireRecord("POST", "http://h/v1/chat/completions", b'{"n":%d}' % i, t_start_ns=0)
    record.t_headers_ns, record.status, record.content_type = 1_000_000, 200, "application/json"
    record.reads.append((1_000_000, 2_000_000, b'{"choices":[]}'))
    return record


def test_kept_metrics_wait_for_the_loop_lag_log_to_pass_the_call() -> None:
    record = _record(0)
    log = LoopLag(10_000_000)
    record.loop_lag = log
    log.add(5_000_000, 1_000_000)  # a small lag while in flight
    record.t_eof_ns = 50_000_000  # the call ends at 50 ms
    recording = Recording("t")
    recording.sink(record)
    assert recording.calls()[0].final.client_saturated is False  # a look, mid-test
    # The loop was blocked from 20 ms to 150 ms: the monitor logs that wake-up after the EOF.
    log.add(150_000_000, 130_000_000)
    final = recording.calls()[0].final
    assert final.client_saturated is True and final.loop_lag_max_ms == 130.0
    assert recording.report().calls[0].final.client_saturated is True


def test_a_report_never_carries_an_attempt_twice() -> None:
    recording = Recording("t")
    recording.sink(_record(0))
    assert len(recording.calls()) == 1  # grouped and kept
    late = _record(1)

    def append_then_group(entries: Sequence[_Entry]) -> tuple[tuple[Call, ...], bool]:
        recording.entries.append(_Entry(OUTSIDE, False, late))  # another thread, mid-report
        return real_group(entries)

    import pytest_latency.recording as module

    real_group = module._group
    module._group = append_then_group
    try:
        first = recording.report()
    finally:
        module._group = real_group
    second = recording.report()
    assert len(first.calls) + len(second.calls) == 2 == len(recording.entries)


def test_hand_recorded_calls_join_the_calls_budget() -> None:
    pool = Pool.of((), [ManualValue(0, False, "calls", 5.0)], 2, ())
    (judgement,) = judge([parse_expectation("calls.max <= 1", source="t")], pool)
    assert not judgement.passed and judgement.estimate == 5.0 and judgement.n == 3


def test_a_falling_ttft_is_no_prefill_cost() -> None:
    from latency_data import call_metrics as synthetic

    base = synthetic(t_start_ms=0, ttft_ms=9.0, e2e_ms=20.0, cache_read=0)
    calls = [
        dataclasses.replace(base, ttft=float(9000 - i), input_tokens=1000 * (i + 1))
        for i in range(6)
    ]
    fit = diagnose.fit_prefill(calls)
    assert fit.slope is None and "does not grow" in fit.note


def test_reports_carry_plain_data_that_report_writers_can_serialise(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(
        """
        import json

        CONFIG = []

        def pytest_configure(config):
            CONFIG.append(config)

        def pytest_runtest_logreport(report):
            config = CONFIG[0]
            data = config.hook.pytest_report_to_serializable(config=config, report=report)
            json.dumps(data)  # pytest-reportlog does this with every report
            if report.when == "call":
                assert isinstance(data["pytest_latency"], dict)
        """
    )
    pytester.makepyfile(
        test_one="""
        import pytest

        @pytest.mark.latency("e2e.p50 < 10s", samples=2)
        def test_budgeted(anthropic_client):
            anthropic_client.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "q"}])

        def test_plain(anthropic_client):
            anthropic_client.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "q"}])
        """
    )
    result = pytester.runpytest("--latency-sim=instant")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
