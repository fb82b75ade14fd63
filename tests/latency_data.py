"""Synthetic per-test data in the plain-data form a test report carries (`TestData.to_wire()`):
dicts built from real `CallMetrics` objects, with the budgets judged by the real
`verdicts.judge`; `records` rebuilds them as the controller does, and `build` hands them to
`results.build_result`."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from pytest_latency.budgets import parse_expectation
from pytest_latency.metrics import CallMetrics
from pytest_latency.results import build_result
from pytest_latency.testdata import TestData
from pytest_latency.verdicts import judge

MODEL = "claude-sonnet-4-5"


def call_metrics(
    *,
    t_start_ms: float,
    ttft_ms: float | None,
    e2e_ms: float,
    output_tokens: int | None = 50,
    input_tokens: int | None = 1000,
    cache_read: int | None = 0,
    cache_fields: bool = True,
    model: str | None = MODEL,
    api: str = "anthropic.messages",
    error: str | None = None,
    chunks: int = 10,
    attempt: int = 0,
    consumer_bound: bool = False,
    error_detail: str | None = None,
) -> CallMetrics:
    itl: tuple[float, ...] = ()
    tpot = None
    if ttft_ms is not None and chunks > 1:
        gap = (e2e_ms - ttft_ms) * 1000 / (chunks - 1)
        itl = tuple(gap * (0.5 + (i % 3) / 2) for i in range(chunks - 1))
    if ttft_ms is not None and output_tokens is not None and output_tokens > 1:
        tpot = (e2e_ms - ttft_ms) * 1000 / (output_tokens - 1)
    start_ns = int(t_start_ms * 1_000_000)
    return CallMetrics(
        api=api,
        model=model,
        endpoint="/v1/messages" if api.startswith("anthropic") else "/v1/chat/completions",
        host="127.0.0.1:8000",
        stream=True,
        status=200 if error is None else int(error[5:]) if error.startswith("http_") else 200,
        attempt=attempt,
        ttfb=None if ttft_ms is None else ttft_ms * 400,
        ttft=None if ttft_ms is None else ttft_ms * 1000,
        ttfo=None if ttft_ms is None else ttft_ms * 1000,
        e2e=None if error else e2e_ms * 1000,
        tpot=None if error else tpot,
        itl=() if error else itl,
        input_tokens=None if error else input_tokens,
        output_tokens=None if error else output_tokens,
        cache_read_tokens=(cache_read if cache_fields else None) if not error else None,
        cache_write_tokens=(0 if cache_fields else None) if not error else None,
        reasoning_tokens=None,
        cache_fields_reported=cache_fields and not error,
        content_events=0 if error else chunks,
        content_chunks=0 if error else chunks,
        channels=() if error else ("text",),
        error=error,
        error_detail=error_detail,
        incomplete=False,
        opaque=False,
        consumer_bound=consumer_bound,
        consumer_bound_chunks=3 if consumer_bound else 0,
        t_start_ns=start_ns,
        t_end_ns=start_ns + int(e2e_ms * 1_000_000),
    )


def call_dict(sample: int, *attempts: CallMetrics, warmup: bool = False) -> dict[str, Any]:
    return {"sample": sample, "warmup": warmup, "attempts": [a.to_dict() for a in attempts]}


def make_test(
    nodeid: str,
    *,
    seed: int = 0,
    samples: int = 10,
    calls_per_sample: int = 1,
    serial: bool = True,
    ttft_ms: float = 300.0,
    e2e_ms: float = 1500.0,
    model: str = MODEL,
    api: str = "anthropic.messages",
    cache_every: int = 2,
    cache_fields: bool = True,
    errors: int = 0,
    budgets: tuple[str, ...] = (),
    warmup: int = 0,
    outcome: str | None = None,
) -> dict[str, Any]:
    """One test's data: `samples` kept samples of `calls_per_sample` calls each (serial or
    overlapping), lognormal-ish TTFTs around `ttft_ms` that grow with uncached input tokens, and
    `errors` failed calls (HTTP 429) at the end. Warmup samples come first. Each sample's span
    (its `turn`) starts 2 ms before its first call and ends 1 ms after its last."""
    rng = random.Random(seed)
    calls: list[dict[str, Any]] = []
    spans: list[list[Any]] = []
    clock = 1_000.0
    for index in range(-warmup, samples):
        sample = index if index >= 0 else -2 - (index + warmup)
        t = clock
        end = clock
        for k in range(calls_per_sample):
            prompt = rng.randint(500, 4000)
            cached = prompt - 200 if cache_every and (index + k) % cache_every == 0 else 0
            ttft = ttft_ms * rng.lognormvariate(0, 0.25) * (0.4 + (prompt - cached) / 2500)
            e2e = ttft + (e2e_ms - ttft_ms) * rng.lognormvariate(0, 0.2)
            metrics = call_metrics(
                t_start_ms=t,
                ttft_ms=ttft,
                e2e_ms=e2e,
                input_tokens=prompt,
                cache_read=cached,
                cache_fields=cache_fields,
                model=model,
                api=api,
                output_tokens=rng.randint(40, 80),
            )
            calls.append(call_dict(sample, metrics, warmup=index < 0))
            end = max(end, t + e2e)
            t = t + e2e + 5 if serial else t + 3
        spans.append([sample, index < 0, int((clock - 2) * 1e6), int((end + 1) * 1e6)])
        clock = t + 10_000
    for k in range(errors):
        failed = call_metrics(
            t_start_ms=clock + k, ttft_ms=None, e2e_ms=20, model=model, api=api, error="http_429"
        )
        calls.append(call_dict(samples - 1, failed))
    data: dict[str, Any] = {
        "nodeid": nodeid,
        "samples": samples,
        "warmup": warmup,
        "calls": calls,
        "manual": [],
        "spans": spans,
        "location": [nodeid.split("::")[0], 10 + seed],
        "policy": "gate",
    }
    if budgets:
        expectations = [parse_expectation(b, source=nodeid) for b in budgets]
        data["budgets"] = [j.to_dict() for j in judge(expectations, pool_of(data))]
    failed_budget = any(b["verdict"] == "fail" for b in data.get("budgets", []))
    data["outcome"] = outcome or ("failed" if failed_budget else "passed")
    return data


def pool_of(data: dict[str, Any]) -> Any:
    """The pool of a test's plain data, as the plugin judges it."""
    return TestData.from_wire(data).pool


def records(tests: list[dict[str, Any]]) -> list[TestData]:
    """Plain per-test data rebuilt as the controller rebuilds a worker's reports."""
    return [TestData.from_wire(t) for t in tests]


def build(tests: list[dict[str, Any]], *, partial: bool = False) -> dict[str, Any]:
    """The result file of these tests, as the plugin builds it at the end of a run."""
    return build_result(records(tests), run=RUN, partial=partial)


RUN: dict[str, Any] = {
    "started": "2025-01-01T12:00:00+00:00",
    "duration_s": 12.5,
    "versions": {"pytest-latency": "0.1.0", "python": "3.11.2", "anthropic": "2.1.0"},
    "git": {"commit": "0123456789abcdef", "branch": "main", "dirty": False},
}


def sample_tests() -> list[dict[str, Any]]:
    """A small, varied run: a failing TTFT budget, an agent fan-out, an OpenAI test without
    cache fields, errors, a warmup, and a node id that tries to inject HTML."""
    return [
        make_test(
            "tests/chat/test_answer.py::test_short_answer",
            seed=1,
            samples=20,
            ttft_ms=350,
            budgets=("ttft.p95 < 400ms", "tpot.p50 < 40ms", "cache_read_ratio > 0.2"),
            warmup=1,
        ),
        make_test(
            "tests/agent/test_agent.py::test_fan_out",
            seed=2,
            samples=5,
            calls_per_sample=4,
            serial=False,
            budgets=("e2e.p95 < 5s",),
        ),
        make_test(
            "tests/agent/test_agent.py::test_serial_chain",
            seed=3,
            samples=5,
            calls_per_sample=3,
            serial=True,
        ),
        make_test(
            "tests/oai/test_chat.py::test_chat[gpt-4.1]",
            seed=4,
            samples=12,
            model="gpt-4.1",
            api="openai.chat",
            cache_fields=False,
            errors=2,
            budgets=("error_rate < 50%",),
        ),
        make_test(
            "tests/test_x.py::test_inject[<script>alert(1)</script>|*_`]",
            seed=5,
            samples=8,
        ),
    ]


def prefill_bound_test(nodeid: str, *, samples: int = 12, seed: int = 11) -> dict[str, Any]:
    """Long uncached prompts (3,000–9,000 tokens) and short answers: ~80% of e2e before the
    first token, with a linear prefill cost of 80 ms per 1k tokens over a 150 ms fixed part."""
    rng = random.Random(seed)
    data = make_test(nodeid, seed=seed, samples=samples)
    calls = []
    for sample in range(samples):
        tokens = rng.randint(3000, 9000)
        ttft = 150 + 0.08 * tokens
        e2e = ttft + rng.uniform(250, 400)
        metrics = call_metrics(
            t_start_ms=1000.0 + 20_000 * sample,
            ttft_ms=ttft,
            e2e_ms=e2e,
            input_tokens=tokens,
            cache_read=0,
            output_tokens=rng.randint(40, 80),
        )
        calls.append(call_dict(sample, metrics))
    data["calls"] = calls
    return data


def serial_independent_test(nodeid: str, *, samples: int = 6, seed: int = 12) -> dict[str, Any]:
    """Three calls per sample, one after another, none of whose requests carries an earlier
    call's output (disjoint fingerprints): parallel would have saved two thirds of the time."""
    rng = random.Random(seed)
    data = make_test(nodeid, seed=seed, samples=samples)
    calls = []
    for sample in range(samples):
        t = 1000.0 + 30_000 * sample
        for step in range(3):
            e2e = rng.uniform(700, 1100)
            metrics = call_metrics(
                t_start_ms=t, ttft_ms=e2e * 0.3, e2e_ms=e2e, input_tokens=400, cache_read=0
            )
            marker = 1000 * (sample * 3 + step)
            metrics = dataclasses.replace(
                metrics,
                request_shingles=tuple(range(marker + 500, marker + 520)),
                output_shingles=tuple(range(marker, marker + 20)),
            )
            calls.append(call_dict(sample, metrics))
            t += e2e + 2
    data["calls"] = calls
    return data


def faulty_test(nodeid: str, *, samples: int = 10, seed: int = 13) -> dict[str, Any]:
    """A test that met every fault: 429s the SDK retried (recovered, and one that gave up),
    an SSE overloaded error, a dropped connection, a client timeout, and consumer-bound calls."""
    data = make_test(nodeid, seed=seed, samples=samples, budgets=())
    kept = data["calls"][:]

    def fail(kind: str, t: float, detail: str | None = None) -> CallMetrics:
        return call_metrics(t_start_ms=t, ttft_ms=None, e2e_ms=30, error=kind, error_detail=detail)

    ok = call_metrics(t_start_ms=900_000, ttft_ms=250, e2e_ms=1200, attempt=1)
    bound = call_metrics(t_start_ms=950_000, ttft_ms=260, e2e_ms=1900, consumer_bound=True)
    kept += [
        call_dict(0, fail("http_429", 800_000, "rate_limit_error: slow down"), ok),
        call_dict(
            1,
            fail("http_429", 810_000, "rate_limit_error: slow down"),
            fail("http_429", 811_000),
            fail("http_429", 812_000),
        ),
        call_dict(2, fail("http_529", 820_000, "overloaded_error: Overloaded")),
        call_dict(3, fail("sse_error:overloaded_error", 830_000, "Overloaded")),
        call_dict(4, fail("RemoteProtocolError", 840_000, "peer closed connection")),
        call_dict(5, fail("ReadTimeout", 850_000)),
        call_dict(6, bound),
        call_dict(7, dataclasses.replace(bound, t_start_ns=bound.t_start_ns + 10**9)),
    ]
    data["calls"] = kept
    return data


def diagnosis_tests() -> list[dict[str, Any]]:
    """Tests built to trip the diagnosis and the error reporting: prefill-bound (with a failing
    TTFT budget), serial-but-independent calls, every fault, and a finding whose message tries
    to inject HTML."""
    prefill = prefill_bound_test("tests/diag/test_long_prompt.py::test_summarise")
    expectations = [parse_expectation("ttft.p95 < 1s", source="diag")]
    prefill["budgets"] = [j.to_dict() for j in judge(expectations, pool_of(prefill))]
    prefill["outcome"] = "failed"
    hostile = make_test("tests/diag/test_hostile.py::test_message", seed=14, samples=6)
    hostile["findings"] = [
        {
            "kind": "unstable_prefix",
            "message": "unstable prefix: <script>alert(1)</script> | *x* differs",
            "evidence": {"calls": 3, "of": 6, "note": "<img src=x onerror=alert(1)>"},
        }
    ]
    return [
        prefill,
        serial_independent_test("tests/diag/test_agent.py::test_three_tools"),
        faulty_test("tests/diag/test_faults.py::test_flaky_provider"),
        hostile,
    ]


GOODPUT_BUDGET = "good(ttft < 600ms) >= 80%"


def sweep_tests(name: str = "tests/load/test_users.py::test_chat") -> list[dict[str, Any]]:
    """A sweep of concurrency 1, 4 and 16 (`concurrency=[1, 4, 16]`): TTFT 300 ms, 330 ms and
    900 ms, so its knee is at concurrency 4 (the last level within 1.5× the lowest's), each level
    judged on `GOODPUT_BUDGET` (met at 1 and 4, not at 16)."""
    levels = []
    for index, (level, ttft) in enumerate(((1, 300.0), (4, 330.0), (16, 900.0))):
        data = make_test(
            f"{name}[concurrency={level}]",
            seed=40 + index,
            ttft_ms=ttft,
            budgets=(GOODPUT_BUDGET,),
        )
        data["load"] = {"concurrency": level, "rate": None}
        data["sweep"] = f"{name}[concurrency=*]"
        levels.append(data)
    return levels
