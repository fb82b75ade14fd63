"""The end of a session at scale: 1,000 tests holding about 1,200,000 recorded values.

Builds the per-test records the plugin's collector holds at the end of a run (`TestData`: calls,
judgements and findings, rebuilt from the plain data a pytest-xdist worker's report carries),
synthetically but from real shapes: each call is a `CallMetrics.to_dict()` of a real streamed
call through the simulator (anthropic messages and openai chat, fingerprints included) with its
times replaced by seeded lognormal draws. Default: 1,000 tests × 20 samples × 2 calls × 25 ITL
gaps = 1,000,000 ITL values plus 40,000 calls' per-call metrics (~1.2 M values). Budgets are
judged and findings computed per test with the plugin's own functions, as it does during a run.

Then it measures, each stage ``--reps`` times (median and spread, load average printed), the whole
end-of-session work the controller does after the last test (session budgets judged over every call,
the result file finished from the `ResultBuilder` the records were added to as they arrived, with
the group and session diagnosis, the terminal summary, and the JSON, HTML and Markdown files
rendered and written as the plugin writes them) and each part of it (and `build_result` from
scratch, as a tool without a builder pays it); the per-test cost of adding a record to the builder
is reported beside the per-test cost of its blocks; peak memory of each stage with tracemalloc (a
separate pass), and, if Debian's chromium is installed, ``chromium --headless --dump-dom`` on the
1,000-test report vs a trivial page, interleaved. Absolute times on a shared 2-core machine drift,
so each stage is also given as a ratio to a yardstick timed in the same interleaving: ``sorted()``
over the same ~1.2 M values. Targets (issue #13): the end of the session ≤ 2 s here and ≤ 8× the
yardstick.

    python benchmarks/bench_scale.py            # ~3 min
    python benchmarks/bench_scale.py --quick    # 200 tests, 1 rep, ~20 s
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
from _common import load

from pytest_latency import diagnose, instrument
from pytest_latency.budgets import parse_expectation
from pytest_latency.metrics import call_metrics
from pytest_latency.plugin._outputs import Outputs, write_outputs
from pytest_latency.pools import Pool
from pytest_latency.results import (
    ResultBuilder,
    build_result,
    dumps,
    test_blocks,
    write_result,
)
from pytest_latency.sim import LatencyModel, SimServer
from pytest_latency.terminal import summary_lines
from pytest_latency.testdata import TestData
from pytest_latency.verdicts import judge
from pytest_latency.wire import WireRecord

COMMAND = "python benchmarks/bench_scale.py"
CHROMIUM = Path(os.environ.get("PYTEST_LATENCY_CHROMIUM", "/usr/bin/chromium"))
MODELS = ("claude-sim-large", "claude-sim-small", "gpt-sim-large", "gpt-sim-small")
EXPECT = ("ttft.p95 < 400ms", "tpot.p50 < 40ms", "e2e.p99 < 3s")
SESSION_EXPECT = ("error_rate < 1%", "ttft.p99 < 2s", "itl.p99 < 100ms")
TIME_FIELDS = ("ttfb", "ttft", "ttfo", "e2e", "tpot")


def spread(values: list[float], fmt: str) -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}..{format(max(values), fmt)}]"  # noqa: E501


# ---- synthetic data from real shapes ---------------------------------------------------------


def templates(itl_values: int) -> dict[str, dict[str, Any]]:
    """One real `CallMetrics.to_dict()` per API, from streamed calls through the simulator."""
    records: list[WireRecord] = []
    model = LatencyModel.preset("instant").replace(output_tokens=itl_values + 1)
    prompt = [{"role": "user", "content": "Summarise the release notes in one paragraph. " * 8}]
    with SimServer(model, port=0) as server:
        with instrument(
            anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="k"),
            sink=records.append,
        ) as claude:
            for _ in claude.messages.create(
                model=MODELS[0], max_tokens=1024, messages=prompt, stream=True
            ):
                pass
        with instrument(
            openai.OpenAI(base_url=server.openai_base_url, api_key="k"), sink=records.append
        ) as gpt:
            for _ in gpt.chat.completions.create(
                model=MODELS[2],
                messages=prompt,
                stream=True,
                stream_options={"include_usage": True},
            ):
                pass
    out = {}
    for record in records:
        data = call_metrics(record).to_dict()
        assert len(data["itl"]) == itl_values, (data["api"], len(data["itl"]))
        out[data["api"]] = data
    return out


def synthetic_call(
    rng: random.Random, template: dict[str, Any], model: str, t0: int, itl_values: int
) -> dict[str, Any]:
    call = copy.copy(template)  # shallow: the fingerprint lists are shared, never mutated
    ttfb = rng.lognormvariate(4.0, 0.3) * 1000  # ~55 ms, in µs
    ttft = ttfb + rng.lognormvariate(4.8, 0.4) * 1000  # + ~120 ms
    itl = [rng.lognormvariate(2.7, 0.35) * 1000 for _ in range(itl_values)]  # ~15 ms each
    e2e = ttft + sum(itl)
    call.update(
        model=model,
        ttfb=round(ttfb, 3),
        ttft=round(ttft, 3),
        ttfo=round(ttft, 3),
        e2e=round(e2e, 3),
        tpot=round((e2e - ttft) / itl_values, 3),
        itl=[round(v, 3) for v in itl],
        input_tokens=rng.randint(200, 4000),
        t_start_ns=t0,
        t_end_ns=t0 + int(e2e * 1000),
    )
    return call


def synthetic_tests(
    tests: int, samples: int, calls_per_sample: int, itl_values: int, seed: int = 7
) -> list[TestData]:
    rng = random.Random(seed)
    shapes = templates(itl_values)
    by_api = [shapes["anthropic.messages"], shapes["openai.chat"]]
    expectations = [parse_expectation(e, source="bench") for e in EXPECT]
    out = []
    t0 = 10**12
    for i in range(tests):
        module = f"tests/test_suite_{i // 50:02}.py"
        nodeid = f"{module}::test_case[{i}]"
        calls = []
        for s in range(samples):
            for c in range(calls_per_sample):
                model = MODELS[(i + c) % len(MODELS)]
                template = by_api[0] if model.startswith("claude") else by_api[1]
                attempt = synthetic_call(rng, template, model, t0, itl_values)
                t0 = attempt["t_end_ns"] + 1_000_000
                calls.append({"sample": s, "warmup": False, "attempts": [attempt]})
        data: dict[str, Any] = {
            "nodeid": nodeid,
            "samples": samples,
            "warmup": 0,
            "calls": calls,
            "manual": [],
            "location": [module, 10 + i % 50 * 12],
        }
        # What the worker does: judge and diagnose, then the record crosses as plain data.
        test = TestData.from_wire(data)
        test.judgements = tuple(judge(expectations, test.pool, policy="estimate"))
        test.policy = "estimate"
        test.outcome = "passed" if all(j.passed for j in test.judgements) else "failed"
        found = diagnose.diagnose_test(test.pool, judgements=test.judgements)
        test = test.diagnosed(found, diagnose.test_figures(test.pool))
        start = time.perf_counter()
        test.blocks = test_blocks(test)  # a worker does this when a result file is wanted
        BLOCK_SECONDS.append(time.perf_counter() - start)
        out.append(TestData.from_wire(test.to_wire()))
    return out


def count_values(tests: list[TestData]) -> tuple[int, int, list[float]]:
    """(recorded values, calls, every time value as one list for the yardstick)."""
    values: list[float] = []
    calls = 0
    for test in tests:
        for call in test.calls:
            for attempt in call.attempts:
                calls += 1
                values.extend(attempt.itl)
                values.extend(v for f in TIME_FIELDS if (v := getattr(attempt, f)) is not None)
    return len(values), calls, values


def end_of_session(
    tests: list[TestData], builder: ResultBuilder, run: dict[str, Any], root: Path
) -> dict[str, Any]:
    """What the controller does after the last test: the session budgets over every call, the
    result file (finishing the rollups the builder counted as records arrived, with the group
    and session diagnosis), the terminal summary, HTML and Markdown, each file written as the
    plugin writes it (`write_outputs`)."""
    expectations = [parse_expectation(e, source="bench") for e in SESSION_EXPECT]
    session = judge(expectations, Pool.merged(t.pool for t in tests))
    result = builder.result(run=run, session_budgets=session)
    summary_lines(tests)
    outputs = Outputs(json=root / "eos.json", report=root / "eos.html", markdown=root / "eos.md")
    write_outputs(outputs, result)
    return result


def fill_builder(tests: list[TestData]) -> ResultBuilder:
    """The controller's builder, each record added as its report arrives (timed per test)."""
    builder = ResultBuilder()
    for test in tests:
        start = time.perf_counter()
        builder.add(test)
        ADD_SECONDS.append(time.perf_counter() - start)
    return builder


# ---- measuring -------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def peak_mib(fn: Callable[[], Any]) -> float:
    """Peak memory allocated while `fn` runs, above what was allocated before (MiB)."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return (peak - before) / 2**20


PAINTS: list[int] = []  # first-contentful-paint (ms) the report writes into <body>
BLOCK_SECONDS: list[float] = []  # per test, building its result-file blocks (worker side)
ADD_SECONDS: list[float] = []  # per test, adding its record to the builder (controller side)


def chromium(profile: Path, url: str) -> float:
    command = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", f"--user-data-dir={profile}", "--dump-dom", url,
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or "</html>" not in done.stdout.lower():
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-500:]}")
    paint = re.search(r'<body[^>]*data-first-contentful-paint="(\d+)"', done.stdout)
    if paint:
        PAINTS.append(int(paint.group(1)))
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--calls-per-sample", type=int, default=2)
    ap.add_argument("--itl-values", type=int, default=25, help="ITL gaps per call")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--browser-reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200 tests, one rep each")
    args = ap.parse_args()
    if args.quick:
        args.tests, args.reps, args.browser_reps = 200, 1, 1
    argv = " ".join(sys.argv[1:])
    print(f"command: {COMMAND}{' ' + argv if argv else ''}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  cores: {os.cpu_count()}  "
          f"load average {load()}")  # fmt: skip

    try:
        from pytest_latency.report import render_html
    except ImportError as exc:  # the report is being finished by someone else
        print(f"render_html is not importable yet ({exc!r}): HTML figures skipped")
        render_html = None  # type: ignore[assignment]

    build_s, tests = timed(
        lambda: synthetic_tests(args.tests, args.samples, args.calls_per_sample, args.itl_values)
    )
    n_values, n_calls, values = count_values(tests)
    blocks_ms = statistics.median(BLOCK_SECONDS) * 1000
    print(f"per test, where it ran: result-file blocks built in {blocks_ms:.2f} ms (median), "
          f"{sum(BLOCK_SECONDS):.2f} s over the {len(BLOCK_SECONDS)} tests")  # fmt: skip
    builder = fill_builder(tests)
    add_ms = statistics.median(ADD_SECONDS) * 1000
    print(f"per test, as its report arrives: added to the result builder (entry, rollup counts) "
          f"in {add_ms:.2f} ms (median), {sum(ADD_SECONDS):.2f} s over the "
          f"{len(ADD_SECONDS)} tests")  # fmt: skip
    print(f"data: {len(tests)} tests, {n_calls} calls, {n_values:,} recorded values "
          f"(built, judged and diagnosed in {build_s:.1f} s)")  # fmt: skip
    run = {"started": "2026-01-01T00:00:00+00:00", "duration_s": 1.0, "versions": {}, "git": None}
    rows: dict[str, list[float]] = {
        "yardstick": [],
        "session": [],
        "build": [],
        "dumps": [],
        "write": [],
    }
    if render_html is not None:
        rows["html"] = []
    result: dict[str, Any] = {}
    text = html = ""
    with tempfile.TemporaryDirectory(prefix="latency-scale-") as tmp:
        root = Path(tmp)
        json_path = root / "latency.json"
        for _ in range(args.reps):
            rows["yardstick"].append(timed(lambda: sorted(values))[0])
            rows["session"].append(timed(lambda: end_of_session(tests, builder, run, root))[0])
            seconds, result = timed(lambda: build_result(tests, run=run))
            rows["build"].append(seconds)
            seconds, text = timed(functools.partial(dumps, result))
            rows["dumps"].append(seconds)
            rows["write"].append(timed(functools.partial(write_result, json_path, result))[0])
            if render_html is not None:
                seconds, html = timed(functools.partial(render_html, result))
                rows["html"].append(seconds)
        json_mb = json_path.stat().st_size / 1e6
        print(f"\nstage times, {args.reps} rep(s) interleaved (median [min..max]); "
              f"load average {load()}")  # fmt: skip
        print(f"{'stage':42} {'seconds':>24} {'÷ yardstick':>12}  output")
        yard = statistics.median(rows["yardstick"])
        labels = {
            "yardstick": (f"yardstick: sorted() of {len(values):,} floats", ""),
            "session": ("end of session (judge, finish, write all)", ""),
            "build": ("build_result from scratch (no builder)", ""),
            "dumps": ("results.dumps (strict JSON text)", f"{len(text) / 1e6:.2f} MB"),
            "write": ("write_result (dumps + atomic write)", f"{json_mb:.2f} MB JSON"),
            "html": ("render_html", f"{len(html.encode()) / 1e6:.2f} MB HTML"),
        }
        for key, secs in rows.items():
            label, note = labels[key]
            ratio = statistics.median(secs) / yard
            print(f"{label:42} {spread(secs, '.3f'):>24} {ratio:12.1f}  {note}")
        end = statistics.median(rows["session"])
        verdict = "met" if end <= 2.0 and end / yard <= 8 else "NOT met"
        print(f"target: end of session <= 2 s and <= 8x the yardstick: {end:.2f} s, "
              f"{end / yard:.1f}x ({verdict})")  # fmt: skip

        print(f"\npeak memory above the input (tracemalloc, separate pass; load {load()}):")
        values.clear()
        size_probe = peak_mib(
            lambda: synthetic_tests(
                max(1, args.tests // 10), args.samples, args.calls_per_sample, args.itl_values
            )
        )
        data_mib = size_probe * 10 if args.tests >= 10 else size_probe
        print(f"  per-test input data (estimated from a tenth of the tests): ~{data_mib:.0f} MiB")
        build_mib = peak_mib(lambda: build_result(tests, run=run))
        print(f"  build_result: {build_mib:.0f} MiB")
        print(f"  dumps:        {peak_mib(lambda: dumps(result)):.0f} MiB")
        if render_html is not None:
            print(f"  render_html:  {peak_mib(lambda: render_html(result)):.0f} MiB")

        if render_html is not None:
            html_mb = len(html.encode()) / 1e6
            verdict = "met" if html_mb <= 2.0 else "NOT met"
            print(f"\ntarget: HTML report <= 2 MB: {html_mb:.2f} MB ({verdict})")
            if CHROMIUM.exists():
                big = root / "report.html"
                big.write_text(html, encoding="utf-8")
                tiny = root / "tiny.html"
                tiny.write_text("<!doctype html><html><body><p>hello</p></body></html>")
                for page in (tiny, big):  # warm the browser's files in the page cache
                    chromium(root / "profile-warm", page.as_uri())
                pairs = []
                for i in range(args.browser_reps):
                    order = (tiny, big) if i % 2 == 0 else (big, tiny)
                    got = {p: chromium(root / f"profile-{i}-{p.stem}", p.as_uri()) for p in order}
                    pairs.append((got[tiny], got[big]))
                diffs = [b - a for a, b in pairs]
                print(f"chromium --headless --dump-dom ({args.browser_reps} pairs, load {load()}):"
                      f" trivial page {spread([a for a, _ in pairs], '.2f')} s, "
                      f"{len(tests)}-test report {spread([b for _, b in pairs], '.2f')} s; "
                      f"difference {spread(diffs, '+.2f')} s")  # fmt: skip
                if PAINTS:
                    paints = spread([float(v) for v in PAINTS], ".0f")
                    print(f"first contentful paint of the report (Chromium's paint timing, "
                          f"{len(PAINTS)} loads): {paints} ms")  # fmt: skip
            else:
                print(f"{CHROMIUM} not installed: browser load time not measured")
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
