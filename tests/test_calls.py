"""A logical call and its attempts: the public times are what the application waited, from the
call's first hand-off (an SDK's back-off and the attempts it retried count), `attempt_*` the final
attempt's own, and every reader of a call's metric (pools, `good(...)`, recording) reads them the
same way. Synthetic values, no clock: the simulator test is in test_plugin_faults.py."""

from __future__ import annotations

import pytest
from latency_data import call_metrics

from pytest_latency import diagnose
from pytest_latency.budgets import parse_expectation
from pytest_latency.calls import Call, metric_value
from pytest_latency.catalogue import ATTEMPT_METRICS, METRICS, POOLED_METRICS, Scope
from pytest_latency.evidence import gather
from pytest_latency.metrics import CallMetrics
from pytest_latency.pools import Pool
from pytest_latency.recording import Recording
from pytest_latency.verdicts import judge
from pytest_latency.wire import WireRecord

# A 429 at 0 ms (headers after 2 ms), the SDK's back-off, and the retry handed off at 250 ms that
# answered: first token 40 ms and last 400 ms after its own hand-off.
REFUSED = call_metrics(t_start_ms=0, ttft_ms=None, e2e_ms=2, error="http_429")
ANSWERED = call_metrics(t_start_ms=250, ttft_ms=40, e2e_ms=400, attempt=1)


def _retried(sample: int = 0) -> Call:
    return Call.of(sample, False, [REFUSED, ANSWERED])


def test_each_attempt_is_stamped_with_its_wait_since_the_first_hand_off() -> None:
    call = _retried()
    assert [a.waited_us for a in call.attempts] == [0.0, 250_000.0]
    assert call.retries == 1 and not call.failed
    # The attempt's own figures are kept as measured.
    assert call.final.ttft == 40_000 and call.final.e2e == 400_000


def test_the_public_times_are_the_applications_and_attempt_names_the_final_attempts() -> None:
    call = _retried()
    final = call.final
    for name in ("ttfb", "ttft", "ttfo", "e2e"):
        own = getattr(final, name)
        assert call.value(name) == own + 250_000, name
        assert call.value(f"attempt_{name}") == own, name
    # Within the final attempt, unchanged: decode pace, gaps, usage.
    assert call.value("tpot") == final.tpot
    assert call.value("output_tokens") == final.output_tokens
    # A call without retries reads the same either way.
    single = Call.of(0, False, [ANSWERED])
    for name, base in ATTEMPT_METRICS.items():
        assert single.value(name) == single.value(base) == getattr(ANSWERED, base)


def test_absent_stays_absent_with_or_without_the_wait() -> None:
    unstreamed = call_metrics(t_start_ms=250, ttft_ms=None, e2e_ms=30, attempt=1)
    call = Call.of(0, False, [REFUSED, unstreamed])
    assert call.value("ttft") is None and call.value("attempt_ttft") is None
    assert call.value("e2e") == 280_000 and call.value("attempt_e2e") == 30_000


def test_the_wire_form_round_trips_and_data_without_the_field_reads_the_same() -> None:
    call = _retried()
    assert Call.from_wire(call.to_wire()) == call
    # Written before waited_us existed: the wait is the attempts' own starts.
    old = call.to_wire()
    for attempt in old["attempts"]:  # type: ignore[attr-defined]
        attempt.pop("waited_us", None)
    assert Call.from_wire(old) == call
    # A first attempt leaves the field out (its empty value).
    assert "waited_us" not in REFUSED.to_dict()
    assert CallMetrics.from_dict(ANSWERED.to_dict()).waited_us == 0.0


def test_attempt_metrics_are_per_call_times_in_the_catalogue() -> None:
    for name, base in ATTEMPT_METRICS.items():
        spec = METRICS[name]
        assert spec.scope is Scope.CALL and spec.dimension is METRICS[base].dimension
        assert spec.otel is None  # OTel times the operation, not one try of it
        assert name in POOLED_METRICS
        parse_expectation(f"{name}.p95 < 400ms", source="t")  # budgetable


def _pool() -> Pool:
    quick = Call.of(1, False, [call_metrics(t_start_ms=1000, ttft_ms=40, e2e_ms=400)])
    gave_up = call_metrics(t_start_ms=3000, ttft_ms=None, e2e_ms=2, error="http_429", attempt=1)
    failed = Call.of(2, False, [REFUSED, gave_up])
    return Pool.of([_retried(0), quick, failed], (), 3)


def test_the_pool_holds_the_applications_times_and_the_attempts_apart() -> None:
    pool = _pool()
    assert list(pool.values("ttft")) == [40_000, 290_000]
    assert list(pool.values("attempt_ttft")) == [40_000, 40_000]
    assert list(pool.values("e2e")) == [400_000, 650_000]
    assert list(pool.values("tpot")) == [f.tpot for f in pool.ok]  # the attempt's own pace
    assert pool.retries == 2 and pool.errors == 1
    for name in ("ttft", "attempt_ttft"):
        assert sorted(metric_value(f, name) or 0 for f in pool.ok) == list(pool.values(name))


def test_budgets_choose_which_view_they_hold() -> None:
    pool = _pool()
    budgets = [
        parse_expectation(text, source="t")
        for text in ("ttft.max < 100ms", "attempt_ttft.max < 100ms")
    ]
    call_view, attempt_view = judge(budgets, pool)
    assert not call_view.passed and call_view.estimate == 290_000
    assert attempt_view.passed and attempt_view.estimate == 40_000


def test_good_reads_the_view_each_condition_names() -> None:
    pool = _pool()
    call_view = gather(parse_expectation("good(ttft < 100ms) >= 90%", source="t"), pool)
    attempt_view = gather(parse_expectation("good(attempt_ttft < 100ms) >= 90%", source="t"), pool)
    # 3 calls in scope: the failed one is never good.
    assert (call_view.hits, call_view.n) == (1, 3)
    assert (attempt_view.hits, attempt_view.n) == (2, 3)


def _wire(attempt: int, start_ms: int, status: int) -> WireRecord:
    """A non-streamed attempt of the same request: headers 1 ms and body 2 ms after hand-off."""
    start = start_ms * 1_000_000
    record = WireRecord(
        "POST", "http://h/v1/chat/completions", b'{"q":1}', t_start_ns=start, attempt=attempt
    )
    record.t_headers_ns, record.status = start + 1_000_000, status
    record.content_type = "application/json"
    record.reads.append((start + 1_000_000, start + 2_000_000, b'{"choices":[]}'))
    record.t_eof_ns = start + 2_000_000
    return record


def test_the_recording_groups_retries_and_stamps_the_wait() -> None:
    recording = Recording("t")
    recording.begin_sample(warmup=False)
    for attempt, start, status in ((0, 0, 429), (1, 300, 429), (2, 900, 200)):
        recording.sink(_wire(attempt, start, status))
    recording.end_sample()
    (call,) = recording.calls()
    assert [a.waited_us for a in call.attempts] == [0.0, 300_000.0, 900_000.0]
    assert call.value("e2e") == pytest.approx(902_000) and call.value("attempt_e2e") == 2_000
    (reported,) = recording.report().calls
    assert reported == call


def test_diagnosis_reads_what_the_server_did_and_the_what_ifs_what_the_user_waited() -> None:
    pool = _pool()
    split = diagnose.phase_split(pool.ok)
    assert split is not None and split.share == pytest.approx(0.1)  # 40 of 400 ms, both calls
    assert sorted(diagnose.PhaseColumns.of(pool.ok).ttfts) == [40_000, 40_000]
    # The what-ifs' single call (K = 1) is the pool's ttft: the back-off in it.
    retried = [
        Call.of(
            i,
            False,
            [
                call_metrics(t_start_ms=i * 1000, ttft_ms=None, e2e_ms=2, error="http_429"),
                call_metrics(t_start_ms=i * 1000 + 250, ttft_ms=40 + i, e2e_ms=400, attempt=1),
            ],
        )
        for i in range(5)
    ]
    (single, *_) = diagnose.what_ifs(Pool.of(retried, (), 5))["ttft"]["fan_out"]
    assert single["k"] == 1 and single["p50"] == pytest.approx(292_000)
