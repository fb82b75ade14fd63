"""The result file: per-test blocks, rollups, the OTel mapping, merging shards, reading and
writing, and the comparison of two runs."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from latency_data import (
    MODEL,
    RUN,
    build,
    call_dict,
    call_metrics,
    diagnosis_tests,
    make_test,
    pool_of,
    records,
    sample_tests,
)

from pytest_latency import stats
from pytest_latency.catalogue import OTEL
from pytest_latency.histogram import LatencyHistogram
from pytest_latency.metrics import CallMetrics
from pytest_latency.results import (
    SCHEMA,
    Comparison,
    ResultBuilder,
    ResultError,
    baseline_block,
    budget_status,
    build_result,
    changes_of,
    compare_results,
    dumps,
    load_result,
    merge_results,
    verdict_counts,
    write_result,
)
from pytest_latency.results import test_status as row_status


def _strict_loads(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def tests_data() -> list[dict[str, Any]]:
    return sample_tests()


@pytest.fixture(scope="module")
def result(tests_data: list[dict[str, Any]]) -> dict[str, Any]:
    return build(tests_data)


def _test(result: dict[str, Any], fragment: str) -> dict[str, Any]:
    found: dict[str, Any] = next(t for t in result["tests"] if fragment in t["nodeid"])
    return found


def test_the_file_is_versioned_strict_json(result: dict[str, Any]) -> None:
    assert result["schema"] == SCHEMA == "pytest-latency/1"
    back = _strict_loads(dumps(result))
    assert back == _strict_loads(json.dumps(result))  # nothing lost in the compact form
    assert [t["nodeid"] for t in back["tests"]] == [t["nodeid"] for t in result["tests"]]


def test_per_test_percentiles_are_the_budget_estimator_on_kept_successful_calls(
    tests_data: list[dict[str, Any]], result: dict[str, Any]
) -> None:
    data = tests_data[0]  # 1 warmup sample + 20 kept
    entry = result["tests"][0]
    pool = pool_of(data)
    values = [c.final.ttft for c in pool.calls if not c.failed and c.final.ttft is not None]
    assert len(values) == 20 and len(data["calls"]) == 21  # the warmup call is left out
    block = entry["metrics"]["ttft"]
    assert block["unit"] == "us" and block["count"] == 20
    assert block["p95"] == stats.percentile(values, 95)
    assert block["p50"] == stats.percentile(values, 50)
    assert (block["min"], block["max"]) == (min(values), max(values))
    assert block["mean"] == pytest.approx(sum(values) / 20)
    # The figure the budget was judged on is the figure in the block.
    budget = next(b for b in entry["budgets"] if b["expr"] == "ttft.p95 < 400ms")
    assert budget["estimate"] == block["p95"]
    assert entry["metrics"]["itl"]["count"] == 20 * 9  # every gap of every kept call
    assert entry["metrics"]["input_tokens"]["unit"] == "tok"


def test_hdr_blobs_decode_to_the_same_values(result: dict[str, Any]) -> None:
    block = result["tests"][0]["metrics"]["e2e"]
    hist = LatencyHistogram.decode(block["hdr"])
    assert hist.count == block["count"]
    assert block["max"] <= hist.max <= block["max"] * 1.001 + 1
    assert hist.percentile(50) == pytest.approx(block["p50"], rel=0.1)


def test_absent_metrics_are_omitted_not_zero_filled() -> None:
    data = make_test("t.py::test_plain", samples=3)
    # A non-streaming call: no token timings, no usage.
    plain = call_metrics(t_start_ms=0, ttft_ms=None, e2e_ms=800, output_tokens=None)
    data["calls"] = [call_dict(0, plain)]
    entry = build([data])["tests"][0]
    assert set(entry["metrics"]) >= {"e2e"}
    for absent in ("ttft", "ttfo", "tpot", "itl", "output_tokens"):
        assert absent not in entry["metrics"]
    assert entry["phase"]["prefill_share"] is None
    assert entry["prefill"] is None


def test_errors_retries_flags_and_cache_fields(result: dict[str, Any]) -> None:
    oai = _test(result, "test_chat")
    assert oai["errors"] == {"http_429": 2}
    assert oai["error_count"] == 2 and oai["call_count"] == 14
    assert oai["metrics"]["ttft"]["count"] == 12  # failed calls have no latency
    assert oai["cache_read_ratio"] == {
        "value": None,
        "cache_fields": "absent",
        "calls_reporting": 0,
        "read_tokens": 0,
        "input_tokens": 0,
    }
    assert oai["usage_fields"]["cache_fields"] == 0
    chat = result["tests"][0]
    ratio = chat["cache_read_ratio"]
    assert ratio["cache_fields"] == "reported"
    assert ratio["value"] == pytest.approx(ratio["read_tokens"] / ratio["input_tokens"])
    assert set(chat["flags"]) == {
        "consumer_bound",
        "client_saturated",
        "incomplete",
        "opaque",
        "capped",
        "cpu_starved",
        "gc_paused",
    }


def test_retried_attempts_count_as_one_call() -> None:
    data = make_test("t.py::test_retry", samples=1)
    failed = call_metrics(t_start_ms=0, ttft_ms=None, e2e_ms=10, error="http_429")
    ok = call_metrics(t_start_ms=500, ttft_ms=200, e2e_ms=900, attempt=1)
    data["calls"] = [call_dict(0, failed, ok)]
    entry = build([data])["tests"][0]
    assert (entry["call_count"], entry["retries"], entry["error_count"]) == (1, 1, 0)
    assert entry["retried_errors"] == {"http_429": 1}
    [row] = entry["timeline"]["samples"][0]["calls"]
    assert row[0] == 0 and row[1] == 700_000 and row[2] == 1_400_000  # from the first attempt
    # The call's times are what the application waited, the attempt's own apart.
    metrics = entry["metrics"]
    assert metrics["ttft"]["max"] == 700_000 and metrics["attempt_ttft"]["max"] == 200_000
    assert metrics["e2e"]["max"] == 1_400_000 and metrics["attempt_e2e"]["max"] == 900_000


def _retry_first_call(data: dict[str, Any], back_off_ms: float = 300.0) -> dict[str, Any]:
    """`data` with its first call answered by an SDK retry: a 429 handed off `back_off_ms`
    before the attempt that answered."""
    answered = CallMetrics.from_dict(data["calls"][0]["attempts"][0])
    refused = call_metrics(
        t_start_ms=answered.t_start_ns / 1e6 - back_off_ms,
        ttft_ms=None,
        e2e_ms=2,
        model=answered.model,
        error="http_429",
    )
    data["calls"][0] = call_dict(0, refused, dataclasses.replace(answered, attempt=1))
    return data


def _attempt_blocks(metrics: dict[str, Any]) -> set[str]:
    return {m for m in metrics if m.startswith("attempt_")}


def test_attempt_blocks_are_written_only_where_a_call_was_retried() -> None:
    plain = make_test("t.py::test_plain", samples=4)
    retried = _retry_first_call(make_test("t.py::test_retried", seed=1, samples=4, model="m2"))
    result = build([plain, retried])
    assert result["metrics_info"]["attempt_ttft"] == {"unit": "us", "otel": None}
    entry_plain, entry_retried = result["tests"]
    assert not _attempt_blocks(entry_plain["metrics"])  # absent: the same as ttft, ...
    assert not _attempt_blocks(result["groups"][f"model={MODEL}"]["metrics"])
    for scope in (entry_retried, result["groups"]["model=m2"], result["session"]):
        metrics = scope["metrics"]
        assert _attempt_blocks(metrics) == {f"attempt_{m}" for m in ("ttfb", "ttft", "ttfo", "e2e")}
        for name in ("ttfb", "ttft", "ttfo", "e2e"):
            call, attempt = metrics[name], metrics[f"attempt_{name}"]
            assert call["count"] == attempt["count"] == (8 if scope is result["session"] else 4)
            # One call of them waited 300 ms more than its own attempt took.
            gap = (call["mean"] - attempt["mean"]) * call["count"]
            assert gap == pytest.approx(300_000, abs=call["count"])  # rollups' integer sums
            assert attempt["otel"] is None
    assert "attempt_ttft" not in OTEL


def test_merging_a_shard_without_retries_equals_the_unsharded_run() -> None:
    # The same model in both: a rollup's attempt blocks add up the plain shard's call blocks.
    plain = make_test("t.py::test_plain", samples=4)
    retried = _retry_first_call(make_test("t.py::test_retried", seed=1, samples=4))
    whole = build([plain, retried])
    assert _attempt_blocks(whole["session"]["metrics"])
    merged = merge_results([build([plain]), build([retried])])
    assert dumps(_without_volatile(merged)) == dumps(_without_volatile(whole))
    # Shards without a retry leave the attempt blocks out, merged too.
    alone = merge_results([build([plain]), build([make_test("t.py::test_b", seed=2)])])
    assert not _attempt_blocks(alone["session"]["metrics"])


def test_timeline_tells_fan_out_from_a_serial_chain(result: dict[str, Any]) -> None:
    fan = _test(result, "test_fan_out")["timeline"]["samples"][0]["calls"]
    serial = _test(result, "test_serial_chain")["timeline"]["samples"][0]["calls"]
    assert len(fan) == 4 and len(serial) == 3
    assert fan[0][0] == 0 and serial[0][0] == 0
    assert all(b[0] < a[2] for a, b in itertools.pairwise(fan))  # overlapping
    assert all(b[0] >= a[2] for a, b in itertools.pairwise(serial))  # one by one
    assert all(row[1] is not None and row[0] < row[1] < row[2] for row in fan)


def test_prefill_fit_recovers_a_linear_cost() -> None:
    data = make_test("t.py::test_prefill", samples=6)
    calls = []
    for i, tokens in enumerate((500, 1000, 1500, 2000, 3000, 4000)):
        ttft = 120 + 0.25 * tokens  # ms: 250 µs per uncached token, 120 ms fixed
        calls.append(
            call_dict(
                i,
                call_metrics(
                    t_start_ms=0,
                    ttft_ms=ttft,
                    e2e_ms=ttft + 500,
                    input_tokens=tokens + 1000,
                    cache_read=1000,
                ),
            )
        )
    data["calls"] = calls
    prefill = build([data])["tests"][0]["prefill"]
    assert prefill["slope_us_per_token"] == pytest.approx(250)
    assert prefill["intercept_us"] == pytest.approx(120_000)
    assert prefill["points"][0] == [500, 245_000, True]
    assert prefill["n"] == 6


def test_budgets_carry_what_a_reader_needs(result: dict[str, Any]) -> None:
    budget = result["tests"][0]["budgets"][0]
    assert budget["verdict"] == "fail" and budget["confident"] is True
    assert budget["threshold"] == 400_000 and budget["threshold_text"] == "400 ms"
    assert budget["excess"] == pytest.approx(budget["estimate"] / 400_000 - 1)
    assert budget["interval"][1] is None  # an infinite upper bound, written as null
    fan = _test(result, "test_fan_out")["budgets"][0]
    # p95 at n=20 has no upper bound: not confident, whether the gate decided it or not.
    assert fan["verdict"] in ("pass", "inconclusive") and fan["confident"] is False
    assert budget_status(fan) == "inconclusive"
    assert verdict_counts(result) == result["summary"] == {"pass": 3, "fail": 1, "inconclusive": 1}


def test_groups_and_session_roll_up_every_call(result: dict[str, Any]) -> None:
    groups = result["groups"]
    assert set(groups) == {
        "model=claude-sonnet-4-5",
        "model=gpt-4.1",
        "endpoint=anthropic.messages",
        "endpoint=openai.chat",
        "model=claude-sonnet-4-5,endpoint=anthropic.messages",
        "model=gpt-4.1,endpoint=openai.chat",
    }
    session = result["session"]
    assert session["call_count"] == sum(t["call_count"] for t in result["tests"])
    assert session["call_count"] == sum(
        g["call_count"] for k, g in groups.items() if k.startswith("model=") and "," not in k
    )
    assert groups["model=gpt-4.1"]["tests"] == 1
    assert groups["model=claude-sonnet-4-5"]["tests"] == 4
    ttft = session["metrics"]["ttft"]
    assert ttft["count"] == sum(t["metrics"]["ttft"]["count"] for t in result["tests"])
    hist = LatencyHistogram.decode(ttft["hdr"])
    assert hist.percentile(95) == ttft["p95"]  # group/session percentiles are HDR's
    assert ttft["mean"] == ttft["sum"] / ttft["count"]


def test_every_metric_block_names_its_otel_counterpart(result: dict[str, Any]) -> None:
    blocks = result["tests"][0]["metrics"]
    assert blocks["ttft"]["otel"] == {
        "name": "gen_ai.client.operation.time_to_first_chunk",
        "unit": "s",
        "scale": 1e-6,
    }
    assert blocks["e2e"]["otel"]["name"] == "gen_ai.client.operation.duration"
    assert blocks["tpot"]["otel"]["name"] == "gen_ai.server.time_per_output_token"
    assert blocks["itl"]["otel"]["name"] == "gen_ai.client.operation.time_per_output_chunk"
    assert blocks["output_tokens"]["otel"] == {
        "name": "gen_ai.client.token.usage",
        "unit": "{token}",
        "scale": 1.0,
        "attributes": {"gen_ai.token.type": "output"},
    }
    assert blocks["ttfb"]["otel"] is None
    assert result["metrics_info"]["ttft"]["otel"] == OTEL["ttft"].to_dict()


def _without_volatile(result: dict[str, Any]) -> dict[str, Any]:
    """What a merge must reproduce exactly: all but run info, session budgets and the rollups'
    findings (judged and diagnosed per shard: calls are not in the file to redo them)."""
    out = copy.deepcopy(result)
    del out["run"]
    out["session"].pop("budgets")
    out["session"].pop("findings")
    for group in out["groups"].values():
        group.pop("findings")
    out.pop("summary")
    return out


def test_merging_shards_equals_the_unsharded_run(tests_data: list[dict[str, Any]]) -> None:
    whole = build(tests_data)
    first = build(tests_data[:2])
    second = build(tests_data[2:], partial=True)
    merged = merge_results([first, second])
    assert _without_volatile(merged) == _without_volatile(whole)
    # Byte for byte, histograms included, once the run info is set aside.
    assert dumps(_without_volatile(merged)) == dumps(_without_volatile(whole))
    assert merged["run"]["partial"] is True and merged["run"]["shards"] == 2
    # And merging is associative with a third, empty shard.
    empty = build([])
    assert _without_volatile(merge_results([merged, empty])) == _without_volatile(whole)


def test_a_test_in_two_shards_is_kept_twice_and_marked(tests_data: list[dict[str, Any]]) -> None:
    a = build(tests_data[:2])
    b = build(tests_data[1:3])
    merged = merge_results([a, b])
    twice = [t for t in merged["tests"] if t["nodeid"] == tests_data[1]["nodeid"]]
    assert [t["shard"] for t in twice] == [0, 1]
    assert "shard" not in merged["tests"][0]
    assert merged["groups"]["model=claude-sonnet-4-5"]["tests"] == 4


def test_write_is_atomic_and_load_validates(tmp_path: Path, result: dict[str, Any]) -> None:
    path = tmp_path / "latency.json"
    write_result(path, result)
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind
    assert load_result(path) == _strict_loads(json.dumps(result))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{", "not valid JSON"),
        ('{"schema": "pytest-latency/1", "x": NaN}', "not valid JSON"),
        ("[1, 2]", "not a pytest-latency result file"),
        ('{"schema": "something/1"}', "not a pytest-latency result file"),
        ('{"schema": "pytest-latency/9"}', "not supported by this version"),
        ('{"schema": "pytest-latency/1", "run": {}}', "'tests' missing"),
    ],
)
def test_load_names_the_file_and_the_problem(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ResultError, match=message) as info:
        load_result(path)
    assert str(path) in str(info.value)


def test_compare_flags_a_significant_slowdown_only() -> None:
    base = build([make_test("t.py::test_a", seed=1, samples=40, ttft_ms=300)])
    slower = build([make_test("t.py::test_a", seed=2, samples=40, ttft_ms=600)])
    noise = build([make_test("t.py::test_a", seed=3, samples=40, ttft_ms=300)])
    flagged = compare_results(base, slower, tolerance=0.10)
    ttft = next(c for c in flagged.changes if c.nodeid == "t.py::test_a" and c.metric == "ttft")
    assert ttft.regression and ttft.p_value is not None and ttft.p_value < 0.01
    assert ttft.change_p50 is not None and ttft.change_p50 > 0.5
    assert not next(c for c in flagged.changes if c.metric == "tpot").regression
    assert compare_results(base, noise, tolerance=0.10).regressions == ()
    # A huge tolerance silences even a real slowdown: both conditions are needed.
    assert compare_results(base, slower, tolerance=5.0).regressions == ()
    assert compare_results(slower, base, tolerance=0.10).changes[0].improvement


def test_empty_run_is_valid() -> None:
    result = build([])
    assert result["tests"] == [] and result["groups"] == {}
    assert result["session"]["metrics"] == {}
    assert result["session"]["cache_read_ratio"]["cache_fields"] == "absent"
    assert not math.isnan(_strict_loads(dumps(result))["session"]["call_count"])


def test_histogram_buckets_regenerate_the_distribution() -> None:
    hist = LatencyHistogram()
    hist.record_many([0, 0, 7, 1005, 250_000, 250_010])
    back = LatencyHistogram.decode(hist.encode())
    buckets = back.buckets()
    assert [c for _, c in buckets] == [2, 1, 1, 2]  # 250,000 and 250,010 share a bucket
    assert buckets[0] == (0.0, 2) and buckets[1] == (7.0, 1)
    assert buckets[-1][0] == back.percentile(100)
    assert sum(c for _, c in buckets) == back.count


# --- diagnosis and errors in the file ----------------------------------------------------------


@pytest.fixture(scope="module")
def diag_data() -> list[dict[str, Any]]:
    return diagnosis_tests()


@pytest.fixture(scope="module")
def diag_result(diag_data: list[dict[str, Any]]) -> dict[str, Any]:
    return build(diag_data)


def test_findings_and_what_ifs_reach_the_file_as_strict_json(diag_result: dict[str, Any]) -> None:
    back = _strict_loads(dumps(diag_result))
    prefill = _test(back, "test_summarise")
    kinds = [f["kind"] for f in prefill["findings"]]
    assert kinds == ["prefill_bound", "too_few_samples"]
    evidence = prefill["findings"][0]["evidence"]
    assert evidence["n"] == 12 and evidence["share_before_first_token"] > 0.5
    assert evidence["prefill_fit"]["ms_per_1k_uncached_tokens"] == pytest.approx(80, rel=0.01)
    what = prefill["what_ifs"]
    assert [r["k"] for r in what["e2e"]["fan_out"]] == [1, 5, 10, 20, 50, 100]
    assert [h["delay_percentile"] for h in what["ttft"]["hedge"]] == [90.0, 95.0]
    # K = 1 is the test's own percentile (to the 7 significant digits the file keeps).
    assert what["e2e"]["fan_out"][0]["p50"] == pytest.approx(prefill["metrics"]["e2e"]["p50"])
    assert what["calls_per_sample"]["n"] == 12
    serial = _test(back, "test_three_tools")
    assert [f["kind"] for f in serial["findings"]] == ["serial_independent_calls"]
    assert serial["findings"][0]["evidence"]["example_pairs"][0][:2] == [0, 1]


def test_findings_the_plugin_attached_are_copied_and_made_strict(
    diag_data: list[dict[str, Any]],
) -> None:
    data = copy.deepcopy(diag_data[3])  # carries its own (hostile) findings
    data["findings"].append(
        {"kind": "prefill_bound", "message": "m", "evidence": {"share": math.nan, "x": math.inf}}
    )
    entry = build([data])["tests"][0]
    assert entry["findings"][0] == diag_data[3]["findings"][0]  # unchanged
    assert entry["findings"][1]["evidence"] == {"share": None, "x": None}
    _strict_loads(dumps(entry))
    # Without findings in the data they are computed here, by the diagnosis itself.
    plain = make_test("t.py::test_plain", samples=3)
    assert build([plain])["tests"][0]["findings"] == [
        {
            "kind": "too_few_samples",
            "message": "prefill/decode split: 3 calls, too few to say (needs 5)",
            "evidence": {"check": "prefill/decode split", "n": 3, "needed": 5, "unit": "calls"},
        }
    ]


def test_groups_and_session_carry_findings_over_their_pooled_calls(
    result: dict[str, Any], diag_result: dict[str, Any]
) -> None:
    absent = result["groups"]["model=gpt-4.1"]["findings"]
    assert [f["kind"] for f in absent] == ["cache_fields_absent"]
    assert absent[0]["scope"] == "model=gpt-4.1"
    assert result["groups"]["model=claude-sonnet-4-5"]["findings"] == []
    session = diag_result["session"]["findings"]
    assert [(f["kind"], f["scope"]) for f in session] == [("consumer_bound", "session")]
    assert session[0]["evidence"]["of"] == diag_result["session"]["call_count"]


def test_errors_by_kind_with_attempts_retries_and_recoveries(diag_result: dict[str, Any]) -> None:
    faults = _test(diag_result, "test_flaky_provider")
    assert faults["errors"] == {
        "ReadTimeout": 1,
        "RemoteProtocolError": 1,
        "http_429": 1,
        "http_529": 1,
        "sse_error:overloaded_error": 1,
    }
    assert faults["retries"] == 3 and faults["retried_errors"] == {"http_429": 3}
    assert faults["error_kinds"]["http_429"] == {
        "failed": 1,  # the call that gave up after three attempts
        "attempts": 4,
        "retried": 3,
        "recovered": 1,  # the call whose retry succeeded
        "detail": "rate_limit_error: slow down",
    }
    assert faults["error_kinds"]["ReadTimeout"]["detail"] is None
    assert faults["flags"]["consumer_bound"] == 2
    session = diag_result["session"]
    assert session["retried_errors"] == {"http_429": 3}
    assert session["flags"] == {
        "consumer_bound": 2,
        "client_saturated": 0,
        "cpu_starved": 0,
        "gc_paused": 0,
        "incomplete": 0,
        "opaque": 0,
        "capped": 0,
    }
    assert diag_result["groups"]["model=claude-sonnet-4-5"]["retried_errors"] == {"http_429": 3}


def test_merged_rollup_findings_are_kept_per_shard(diag_data: list[dict[str, Any]]) -> None:
    whole = build(diag_data)
    first = build(diag_data[:3])
    second = build(diag_data[3:])
    merged = merge_results([first, second])
    assert _without_volatile(merged) == _without_volatile(whole)
    assert merged["session"]["flagged_count"] == 2  # the faulty test's consumer-bound calls
    # Per-test findings and what-ifs travel with their test, unchanged.
    assert [t["findings"] for t in merged["tests"]] == [t["findings"] for t in whole["tests"]]
    assert [t["what_ifs"] for t in merged["tests"]] == [t["what_ifs"] for t in whole["tests"]]
    # Rollup findings are each shard's own, marked; none is recomputed.
    assert merged["session"]["findings"] == [
        {**f, "shard": 0} for f in first["session"]["findings"]
    ] + [{**f, "shard": 1} for f in second["session"]["findings"]]
    # With one shard that has calls, they are the run's own, unmarked.
    empty = build([])
    alone = merge_results([whole, empty])
    assert alone["session"]["findings"] == whole["session"]["findings"]
    assert alone["groups"] == whole["groups"]
    _strict_loads(dumps(merged))


def test_the_result_file_is_written_with_ordinary_permissions(tmp_path: Path) -> None:
    import os
    import stat

    target = tmp_path / "r.json"
    write_result(target, {"schema": "pytest-latency/1"})
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_blocks_built_where_the_test_ran_give_the_same_file() -> None:
    """A worker builds each test's blocks (`results.test_blocks`) when a file will be written;
    the file is the same, byte for byte, as when `build_result` builds them itself."""
    from latency_data import RUN, records

    from pytest_latency.results import build_result, test_blocks

    plain = records(sample_tests() + diagnosis_tests())
    ahead = records(sample_tests() + diagnosis_tests())
    for test in ahead:
        test.blocks = test_blocks(test)
    rebuilt = [type(t).from_wire(json.loads(json.dumps(t.to_wire()))) for t in ahead]
    assert dumps(build_result(plain, run=RUN)) == dumps(build_result(rebuilt, run=RUN))


def test_the_builder_fed_test_by_test_writes_the_file_build_result_writes() -> None:
    """The plugin adds each record as its report arrives; the file it finishes is the one
    `build_result` makes from the finished list, asked twice it is the same, and a record
    replaced with its teardown's calls changes that test's counts, not the rollups."""
    from latency_data import records

    from pytest_latency.calls import Call
    from pytest_latency.results import ResultBuilder, build_result

    tests = records(diagnosis_tests() + sample_tests())
    run = {"started": "2026-01-01T00:00:00+00:00", "duration_s": 1.0, "versions": {}}
    builder = ResultBuilder()
    for test in tests:
        builder.add(test)
    assert len(builder) == len(tests)
    first = builder.result(run=run)
    assert dumps(first) == dumps(build_result(tests, run=run))
    assert dumps(builder.result(run=run)) == dumps(first)
    assert first["session"]["findings"], "the suite has run-wide findings to compare"

    late = tests[0].calls[0]
    teardown = type(tests[0])(nodeid=tests[0].nodeid, calls=(Call(-1, False, late.attempts),))
    builder.replace(0, tests[0].with_late(teardown))
    again = builder.result(run=run)
    assert (
        again["tests"][0]["unsampled_call_count"] == first["tests"][0]["unsampled_call_count"] + 1
    )
    assert again["session"] == first["session"] and again["groups"] == first["groups"]
    with pytest.raises(ValueError, match="must keep its pool"):
        builder.replace(0, tests[1])


def test_compare_covers_groups_and_the_session_and_adjusts_for_many_comparisons() -> None:
    base = build([make_test("t.py::test_a", seed=1, samples=40, ttft_ms=300)])
    slower = build([make_test("t.py::test_a", seed=2, samples=40, ttft_ms=600)])
    scopes = {(c.scope, c.nodeid) for c in compare_results(base, slower).regressions}
    assert ("test", "t.py::test_a") in scopes and ("session", "(session)") in scopes
    assert any(scope == "group" for scope, _ in scopes)
    for change in compare_results(base, slower).changes:
        if change.p_value is not None:
            assert change.p_adjusted is not None and change.p_adjusted >= change.p_value


def test_a_marginal_difference_among_many_tests_is_not_a_regression() -> None:
    # One test 20 % slower at p ≈ 0.01 on its own, among 30 unchanged tests: 120 comparisons,
    # so Holm asks p < 0.05 / 120 of the smallest and the marginal one does not pass.
    rng_tests = [make_test(f"t.py::test_{i}", seed=i, samples=12, ttft_ms=300) for i in range(30)]
    base = build([*rng_tests, make_test("t.py::test_x", seed=100, samples=12, ttft_ms=300)])
    head_tests = [make_test(f"t.py::test_{i}", seed=i, samples=12, ttft_ms=300) for i in range(30)]
    head = build([*head_tests, make_test("t.py::test_x", seed=101, samples=12, ttft_ms=340)])
    comparison = compare_results(base, head)
    x = next(c for c in comparison.changes if c.nodeid == "t.py::test_x" and c.metric == "ttft")
    assert x.p_value is not None and x.p_adjusted is not None
    assert x.p_adjusted > x.p_value
    if x.p_value < 0.05:  # the raw test would have called it; the adjusted one must not
        assert not x.regression


def test_too_few_values_get_no_p_value_and_no_verdict() -> None:
    base = build([make_test("t.py::test_a", seed=1, samples=3, ttft_ms=300)])
    slower = build([make_test("t.py::test_a", seed=2, samples=3, ttft_ms=900)])
    ttft = next(
        c for c in compare_results(base, slower).changes if c.scope == "test" and c.metric == "ttft"
    )
    assert ttft.n_base == ttft.n_head == 3
    assert ttft.p_value is None and not ttft.regression


def test_a_p_value_past_double_precision_reads_as_a_bound_in_every_output() -> None:
    # One formatter (results.p_text) owns every p-value shown: the terminal and annotation
    # line (describe), the rollup line, and the Markdown's p column all read the same.
    from pytest_latency.report import render_comparison
    from pytest_latency.results import MetricChange, describe, describe_rollup, p_text

    assert p_text(3e-08, "p") == "p = 3e-08" and p_text(3e-08) == "3e-08"
    assert p_text(1.2e-06, "Holm-adjusted", "") == "Holm-adjusted 1.2e-06"
    assert p_text(0.0, "p") == "p < 1e-15" and p_text(1e-300) == "< 1e-15"
    assert p_text(None) == "–"
    tiny = MetricChange(
        nodeid="t.py::test_a",
        metric="tpot",
        base_p50=4000.0,
        head_p50=5000.0,
        base_p95=4200.0,
        head_p95=5300.0,
        change_p50=0.25,
        change_p95=0.26,
        p_value=0.0,
        p_adjusted=2e-16,
        regression=True,
        improvement=False,
        n_base=200,
        n_head=200,
    )
    assert describe(tiny).endswith("n 200 → 200; p < 1e-15, Holm-adjusted < 1e-15)")
    assert describe_rollup([tiny]) == "t.py::test_a: slower tpot +26% (Holm-adjusted p < 1e-15)"
    table = render_comparison(Comparison(0.1, (tiny,), (), ()), base="b", head="h")
    assert "| +26% | < 1e-15 (< 1e-15) | 🔴 regression |" in table
    assert "<1e-15" not in describe(tiny) + describe_rollup([tiny]) + table


def test_the_baseline_block_round_trips_through_the_file(tmp_path: Path) -> None:
    base = build([make_test("t.py::test_a", seed=1, samples=40, ttft_ms=300)])
    tests = [make_test("t.py::test_a", seed=2, samples=40, ttft_ms=600)]
    head = build(tests)
    comparison = compare_results(base, head)
    block = baseline_block(comparison, "base.json")
    builder = ResultBuilder()
    for test in records(tests):
        builder.add(test)
    result = builder.result(run=RUN, baseline=block)
    path = tmp_path / "r.json"
    write_result(path, result)
    loaded = load_result(path)
    assert changes_of(loaded["baseline"]["regressions"]) == comparison.regressions
    assert loaded["tests"][0]["regressions"] == [
        c.metric for c in comparison.regressions if c.scope == "test"
    ]
    assert row_status(loaded["tests"][0]) == "regressed"
    merged = merge_results([loaded, loaded])
    assert [e["shard"] for e in merged["baseline"]["regressions"]] == [0] * len(
        comparison.regressions
    ) + [1] * len(comparison.regressions)


SESSION_EXPECT = (
    "ttft.p95 < 600ms",
    "ttft.p50 < 150ms",
    "e2e.mean < 2s",
    "e2e.max < 30s",
    "ttft.min > 1ms",
    "error_rate < 10%",
    "good(ttft < 400ms) >= 50%",
    "cache_read_ratio > 10%",
    "retries <= 5",
    "calls.max <= 3",
    "ttft{model=claude-sonnet-4-5}.p90 < 1s",
)


def _judged_build(tests: list[dict[str, Any]]) -> dict[str, Any]:
    """The result file with the session budgets judged over these tests' calls."""
    from pytest_latency.budgets import parse_expectation
    from pytest_latency.pools import Pool
    from pytest_latency.verdicts import judge

    recs = records(tests)
    expectations = [parse_expectation(e, source="t") for e in SESSION_EXPECT]
    judged = judge(expectations, Pool.merged(t.pool for t in recs), policy="estimate")
    return build_result(recs, run=RUN, session_budgets=judged, session_policy="estimate")


def test_merge_judges_the_session_budgets_again_over_every_shard() -> None:
    # Issue #16, item 3: each shard's entries carry their evidence; the merge adds it up and
    # judges as one run over all the calls would have, not once per shard.
    tests = [
        make_test(f"t.py::test_{i}", seed=i, samples=12, ttft_ms=200 + 40 * i, calls_per_sample=2)
        for i in range(6)
    ]
    whole = _judged_build(tests)
    merged = merge_results(
        [load_back(_judged_build(tests[:2])), load_back(_judged_build(tests[2:]))]
    )
    expected = {b["expr"]: b for b in whole["session"]["budgets"]}
    got = {b["expr"]: b for b in merged["session"]["budgets"]}
    assert list(got) == list(SESSION_EXPECT)  # one row per budget, none per shard
    for expr, want in expected.items():
        have = got[expr]
        assert have["shards"] == 2 and "shard" not in have
        assert have["n"] == want["n"], expr
        assert have["status"] == want["status"], (expr, have["message"], want["message"])
        if "p" in str(want.get("stat")) or want.get("stat") is None:
            # Percentiles come back from HDR buckets (3 significant digits); the rest exactly.
            assert have["estimate"] == pytest.approx(want["estimate"], rel=2e-3), expr
        else:
            assert have["estimate"] == pytest.approx(want["estimate"], rel=1e-9), expr
    # A missed session budget fails the merged run.
    assert got["ttft.p50 < 150ms"]["status"] == "fail"
    assert merged["summary"]["fail"] >= 1


def load_back(result: dict[str, Any]) -> dict[str, Any]:
    """A result as a shard's file is read back (through JSON and the validator)."""
    from pytest_latency.results._validate import validate

    return validate(json.loads(dumps(result)), "shard")  # type: ignore[return-value]


def test_budgets_a_shard_lacks_are_kept_per_shard_and_labelled() -> None:
    a = _judged_build([make_test("t.py::a", seed=1, samples=10)])
    b = build([make_test("t.py::b", seed=2, samples=10)])  # no session budgets
    merged = merge_results([a, b])
    shards = {e.get("shard") for e in merged["session"]["budgets"]}
    assert shards == {0}
    from pytest_latency.report import render_markdown

    # The first shard's calls (seeded, ttft p50 ≈ 260 ms) miss ttft.p50 < 150ms: a row is shown.
    statuses = {e["expr"]: budget_status(e) for e in merged["session"]["budgets"]}
    assert statuses["ttft.p50 < 150ms"] == "fail"
    markdown = render_markdown(merged)
    assert "| \\(session, shard 1\\) | ttft.p50 &lt; 150ms |" in markdown
    assert "| \\(session\\) |" not in markdown  # no unlabelled session row beside it
