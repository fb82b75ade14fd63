"""Diagnosis on constructed data: the what-if mathematics against Monte Carlo, the fingerprints,
and each finding's trigger, its silence and its too-few-samples answer."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_latency import diagnose, stats
from pytest_latency.calls import Call
from pytest_latency.metrics import CallMetrics, contains_output
from pytest_latency.metrics._fingerprint import output_print, request_print
from pytest_latency.pools import Pool
from pytest_latency.testdata import TestData
from pytest_latency.verdicts import Judgement

RNG_SEED = 20240611


def lognormal(n: int, seed: int = RNG_SEED) -> list[float]:
    rng = random.Random(seed)
    return [1000 * rng.lognormvariate(5.0, 0.6) for _ in range(n)]


def draw(xs: Sequence[float], u: float) -> float:
    """An independent implementation of the smoothed empirical inverse CDF."""
    h = (len(xs) - 1) * u
    lo = min(int(h), len(xs) - 2)
    return xs[lo] + (h - lo) * (xs[lo + 1] - xs[lo])


def mc_quantile(samples: list[float], q: float) -> float:
    samples.sort()
    return samples[min(int(q * len(samples)), len(samples) - 1)]


def test_fan_out_matches_monte_carlo() -> None:
    values = lognormal(400)
    xs = sorted(values)
    rng = random.Random(1)
    rows = {r.k: r for r in diagnose.fan_out(values)}
    assert rows[1].p50 == pytest.approx(diagnose.SmoothCdf(values).quantile(0.5))
    for k in diagnose.FAN_OUT_KS:
        maxima = [draw(xs, max(rng.random() for _ in range(k))) for _ in range(20_000)]
        assert rows[k].p50 == pytest.approx(mc_quantile(maxima, 0.50), rel=0.02), k
        assert rows[k].p99 == pytest.approx(mc_quantile(maxima, 0.99), rel=0.02), k
        assert rows[k].p_any_over_p99 == pytest.approx(1 - 0.99**k)
    # 400 values support the p99 of the slowest of 1..2 calls only (needs n ≥ 1/(1 − 0.99^(1/k))).
    assert [r.supported for r in rows.values()] == [True, False, False, False, False, False]


@pytest.mark.parametrize("percentile", diagnose.HEDGE_PERCENTILES)
def test_hedge_matches_monte_carlo(percentile: float) -> None:
    values = lognormal(300, seed=7)
    xs = sorted(values)
    result = diagnose.hedge(values, percentile)
    rng = random.Random(2)
    hedged = []
    duplicates = 0
    for _ in range(200_000):
        first = draw(xs, rng.random())
        duplicates += first > result.delay
        hedged.append(min(first, result.delay + draw(xs, rng.random())))
    for q, exact in ((0.50, result.p50), (0.95, result.p95), (0.99, result.p99)):
        assert exact == pytest.approx(mc_quantile(hedged, q), rel=0.02), q
    assert result.extra_load == pytest.approx(1 - percentile / 100, abs=1e-9)
    assert result.extra_load == pytest.approx(duplicates / 200_000, abs=0.005)
    assert result.p99 < result.baseline_p99  # hedging cuts the tail…
    assert result.p50 == pytest.approx(result.baseline_p50, rel=0.01)  # …not the median


def test_what_ifs_say_too_few_below_the_minimum() -> None:
    calls = [make_call(e2e=1000.0 * (i + 1)) for i in range(3)]
    assert diagnose.what_ifs(data_of(calls))["e2e"] == {"n": 3, "too_few": True, "needed": 5}
    more = diagnose.what_ifs(data_of([make_call(e2e=1000.0 * (i + 1)) for i in range(11)]))
    assert [row["k"] for row in more["e2e"]["fan_out"]] == list(diagnose.FAN_OUT_KS)
    # K = 1 is the measured distribution itself: its p99 is the pool's p99.
    assert more["e2e"]["fan_out"][0]["p99"] == pytest.approx(
        stats.percentile([1000.0 * (i + 1) for i in range(11)], 99)
    )
    assert [h["delay_percentile"] for h in more["e2e"]["hedge"]] == [90.0, 95.0]
    assert more["calls_per_sample"]["max"] == 1


# --- fingerprints ----------------------------------------------------------------------------


def body(system: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "system": system, "messages": list(messages), **extra}


def test_prefix_hashes_locate_the_first_difference_without_text() -> None:
    stable = "x" * 2000
    a = request_print(body(stable + "tail one"))
    b = request_print(body(stable[:1000] + "CHANGED" + stable[1007:] + "tail two"))
    call_a, call_b = make_call(prefix=a.prefix_hashes), make_call(prefix=b.prefix_hashes)
    # "system: " is 8 characters, so the change at 1000 sits in block 3 (768–1024).
    assert diagnose.first_divergence(call_a, call_b) == 3
    assert diagnose.first_divergence(call_a, call_a) is None
    assert stable[:32] not in json.dumps(dataclasses.asdict(a))  # hashes and sizes only


def test_breakpoint_position_and_estimated_tokens() -> None:
    system = [{"type": "text", "text": "s" * 400, "cache_control": {"type": "ephemeral"}}]
    printed = request_print(body(system, {"role": "user", "content": "q" * 100}))  # type: ignore[arg-type]
    assert printed.breakpoint_chars == len("system: ") + 400
    assert request_print(body("plain")).breakpoint_chars is None


def test_contains_output_tells_dependent_from_independent_requests() -> None:
    answer = "The weather in Paris is mild today, with light rain expected in the evening hours."
    shingles, digests = output_print([answer])
    assert shingles  # long enough to shingle
    sent_back = request_print(
        body("s", {"role": "assistant", "content": answer}, {"role": "user", "content": "ok"})
    )
    quoted = request_print(body("s", {"role": "user", "content": f"Check: «{answer}» please"}))
    unrelated = request_print(body("s", {"role": "user", "content": "What is the news?"}))
    assert contains_output(sent_back.shingles, shingles, digests) is True
    assert contains_output(quoted.shingles, shingles, digests) is True
    assert contains_output(unrelated.shingles, shingles, digests) is False
    assert contains_output(unrelated.shingles, (), ()) is None  # no output: cannot tell


def test_new_fields_round_trip_and_old_data_still_reads() -> None:
    call = make_call(prefix=("ab", "cd"), breakpoint=1200, shingles=(1, 2), out=(3,))
    assert CallMetrics.from_dict(json.loads(json.dumps(call.to_dict()))) == call
    old = {k: v for k, v in call.to_dict().items() if k not in NEW_FIELDS}
    assert CallMetrics.from_dict(old).prefix_hashes == ()


# --- findings on constructed calls -----------------------------------------------------------

NEW_FIELDS = (
    "prompt_chars",
    "prefix_hashes",
    "cache_breakpoint_chars",
    "cache_breakpoint_tokens",
    "request_shingles",
    "output_shingles",
    "output_digests",
)


def make_call(
    *,
    ttft: float | None = 1000.0,
    e2e: float = 10_000.0,
    inp: int | None = 100,
    out: tuple[int, ...] = (),
    read: int | None = 0,
    write: int | None = 0,
    reported: bool = True,
    prefix: tuple[str, ...] = (),
    breakpoint: int | None = None,
    shingles: tuple[int, ...] = (),
    consumer_bound: bool = False,
    start: int = 0,
) -> CallMetrics:
    return CallMetrics(
        api="anthropic.messages",
        model="m",
        endpoint="/v1/messages",
        host="h",
        stream=True,
        status=200,
        attempt=0,
        ttfb=100.0,
        ttft=ttft,
        ttfo=ttft,
        e2e=e2e,
        tpot=None if ttft is None else (e2e - ttft) / 15,
        itl=(),
        input_tokens=inp,
        output_tokens=16,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=None,
        cache_fields_reported=reported,
        content_events=16,
        content_chunks=16,
        channels=("text",),
        error=None,
        error_detail=None,
        incomplete=False,
        opaque=False,
        consumer_bound=consumer_bound,
        consumer_bound_chunks=5 * consumer_bound,
        t_start_ns=start,
        t_end_ns=start + int(e2e * 1000),
        prompt_chars=None,
        prefix_hashes=prefix,
        cache_breakpoint_chars=breakpoint,
        cache_breakpoint_tokens=None if breakpoint is None else breakpoint // 4,
        request_shingles=shingles,
        output_shingles=out,
    )


def data_of(calls: Sequence[CallMetrics]) -> Pool:
    """The pool of a test that made one of `calls` per sample, rebuilt from its report data."""
    rows = [{"sample": i, "warmup": False, "attempts": [c.to_dict()]} for i, c in enumerate(calls)]
    return TestData.from_wire({"nodeid": "t", "samples": len(calls), "calls": rows}).pool


def test_two_calls_are_too_few_to_call_prefill_bound() -> None:
    calls = [make_call(ttft=9000.0, inp=20_000) for _ in range(2)]
    found = diagnose.diagnose_test(data_of(calls))
    assert [(f.kind, f.evidence["n"]) for f in found] == [("too_few_samples", 2)]
    assert "too few to say" in found[0].message
    many = [make_call(ttft=9000.0 + i, inp=20_000 + 100 * i) for i in range(5)]
    assert [f.kind for f in diagnose.diagnose_test(data_of(many))] == ["prefill_bound"]


def test_narrow_prompt_range_is_not_fitted() -> None:
    fit = diagnose.fit_prefill([make_call(inp=5000 + i) for i in range(10)])
    assert fit.slope is None and fit.n == 10 and "span 9 tokens" in fit.note


def test_cache_fields_absent_names_the_server_flags() -> None:
    calls = [make_call(read=None, write=None, reported=False) for _ in range(5)]
    (finding,) = diagnose.diagnose_test(data_of(calls))
    assert finding.kind == "cache_fields_absent"
    assert "--enable-prompt-tokens-details" in finding.message
    assert "--enable-cache-report" in finding.message


def test_below_cache_minimum_uses_the_per_api_default_or_a_parameter() -> None:
    calls = [make_call(breakpoint=3000) for _ in range(5)]  # ~750 tokens
    (finding,) = diagnose.diagnose_test(data_of(calls))
    assert finding.kind == "below_cache_minimum"
    assert finding.evidence["min_tokens"] == 1024 and "2,048 or 4,096" in finding.message
    assert diagnose.diagnose_test(data_of(calls), diagnose.Thresholds(cache_min_tokens=512)) == []
    haiku = diagnose.Thresholds(cache_min_tokens={"anthropic.messages": 2048})
    big = [make_call(breakpoint=6000) for _ in range(5)]  # ~1,500 tokens
    assert diagnose.diagnose_test(data_of(big)) == []
    assert [f.kind for f in diagnose.diagnose_test(data_of(big), haiku)] == ["below_cache_minimum"]


def test_unstable_prefix_needs_prompts_that_differ_inside_the_cached_part() -> None:
    same = ("h1", "h2", "h3", "h4", "h5", "h6")
    writes = [
        make_call(write=1500, inp=1600, breakpoint=6000, prefix=same, start=i) for i in range(5)
    ]
    # Identical prefixes that still miss: TTL or concurrency, not an unstable prefix.
    assert diagnose.diagnose_test(data_of(writes)) == []
    varied = [
        dataclasses.replace(c, prefix_hashes=(f"x{i}", *same[1:])) for i, c in enumerate(writes)
    ]
    (finding,) = diagnose.diagnose_test(data_of(varied))
    assert finding.kind == "unstable_prefix"
    assert finding.evidence["diverge_char_start"] == 0 and finding.evidence["calls"] == 5


def test_consumer_bound_and_summary_lines() -> None:
    calls = [make_call(consumer_bound=i < 2) for i in range(5)]
    found = diagnose.diagnose_test(data_of(calls))
    assert [f.kind for f in found] == ["consumer_bound"]
    assert found[0].evidence == {"calls": 2, "of": 5, "chunks": 10}
    (line,) = diagnose.summary_lines(found)
    assert line.startswith("consumer_bound: 2 of 5 calls were consumer-bound")
    group = [dataclasses.replace(f, scope="model=m") for f in diagnose.diagnose_calls(calls)]
    assert diagnose.summary_lines(group)[0].startswith("[model=m] consumer_bound:")


def test_the_saturated_finding_says_the_figure_its_data_holds() -> None:
    """Rounded to whole ms in the text, a call 5.3 ms late read "up to 5 ms late (over 5 ms)";
    the text and the data now carry one figure."""
    calls = [
        dataclasses.replace(make_call(), client_saturated=True, stamp_error_max_ms=late)
        for late in (5.26, 3.0)
    ] + [make_call()]
    (found,) = [f for f in diagnose.diagnose_calls(calls) if f.kind == "client_saturated"]
    assert found.evidence == {"calls": 2, "of": 3, "stamps_late_ms": 5.3}
    assert "up to 5.3 ms late (over 5 ms)" in found.message, found.message


def test_too_few_samples_for_a_percentile_budget() -> None:
    # Twenty values cannot bound a p99 from above: the verdict stayed inconclusive.
    budgets = [
        Judgement.from_dict(
            {"expr": expr, "n": 20, "verdict": "inconclusive", "passed": True, "message": ""}
        )
        for expr in ("ttft.p99 < 2s", "ttft.p50 < 2s")
    ]
    pool = data_of([make_call() for _ in range(5)])
    found = diagnose.diagnose_test(pool, judgements=budgets, policy="pass")
    assert [(f.kind, f.evidence.get("expr")) for f in found] == [
        ("too_few_samples", "ttft.p99 < 2s")
    ]
    assert found[0].evidence["needed"] == 299
    assert "so it stayed inconclusive and policy 'pass' passed it" in found[0].message
    # At the confidence the test was judged at (sequential sampling's per-look one), it needs
    # more: the number is the verdict's (`verdicts.values_needed`), not a fixed 95%.
    (strict,) = diagnose.diagnose_test(pool, judgements=budgets, confidence=0.99)
    assert strict.evidence["needed"] == 459 and "(99%)" in strict.message


def test_serial_pairs_and_the_saving() -> None:
    ms = 1_000_000
    a = make_call(e2e=100_000.0, start=0, out=(11, 12))
    b = make_call(e2e=100_000.0, start=110 * ms, out=(21, 22), shingles=(99,))
    c = make_call(e2e=100_000.0, start=220 * ms, out=(31,), shingles=(11, 12))  # carries a's
    sched = diagnose.schedule(0, [Call(0, False, (x,)) for x in (a, b, c)])
    assert [p[:2] for p in sched.pairs] == [(0, 1), (1, 2)]
    assert sched.busy_us == pytest.approx(300_000)
    # a → c is a real dependency; b could run beside a: the critical path is a + c.
    assert sched.critical_us == pytest.approx(200_000)
    assert sched.saving_us == pytest.approx(100_000)
    assert math.isclose(sched.pairs[0][2], 100_000)
