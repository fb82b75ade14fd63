"""Verdict quality: does the latency gate flake on noise, and does it catch regressions?

The experiment of issue 4's "Done when". A simulated endpoint with jitter and tails (the `hosted`
preset scaled down 20×, so every call takes milliseconds) answers a budget `ttft.p95 < B`, where
B is set relative to the configuration's *true* p95, measured first from a large sample:

    under20   true p95 20 % under the budget (B = p95 / 0.8)   a gate must pass: 0 failures
    over20    true p95 20 % over the budget  (B = p95 / 1.2)   a gate must fail: every run
    under2    true p95 2 % under the budget  (B = p95 · 1.02)  never a confident "fail"
    over2     true p95 2 % over the budget   (B = p95 / 1.02)  never a confident "pass"

Each condition is run `--runs` times (20 by default) through two gates on the same data:

* the sound gate: the plugin's verdict (distribution-free order-statistic bounds at the per-look
  confidence `verdicts.confidence_for_looks`, sequential sampling up to max_samples) and what
  each inconclusive policy (`auto`, the default: `pass` when the plan samples sequentially,
  `estimate` when its size is fixed; `estimate`; `pass`; `fail`) makes of it;
* a point-estimate gate: pass iff the sample p95 < B, with no interval, as k6 thresholds and
  pytest-benchmark-style comparisons do, at n = samples (and at n = max_samples).

Two paths produce the latencies:

* **plugin** (real): each run is a fresh `pytest --latency-sim` invocation of a generated suite of
  four tests (one per condition), each streaming OpenAI chat completions through the real SDK
  from the plugin's `openai_client` fixture, captured at the wire; the verdicts are the plugin's
  own (read from the test reports). Plan: samples=20, warmup=1, max_samples=200. Wall-clock
  latency follows the machine's load, so the truth is measured during the experiment: a
  calibration process (`--calibration` calls) before the runs sets the budgets, and every run's
  process also runs a `--calibration-batch`-call calibration test before and after the four
  conditions; the pooled batches are the truth the runs are scored on, and the spread of the
  batches' p50/p95 (the drift, checked against `--max-drift`) says whether the run is valid
  evidence. Load averages are printed around every phase. The plugin's sequential sampling does
  not depend on the policy, so the other policy columns apply `_apply_policy`'s rule (with
  `auto` resolved by `policies.effective_policy`) to the plugin's verdicts; `--real-policy auto
  estimate ...` runs the invocations under each policy and asserts that the plugin agrees.
* **model** (direct, fast): the simulator's own latency model (`sim._schedule.build_plan`, the
  function the server plans every response with) sampled directly, first-token offsets only (no
  wire, no SDK), judged by the plugin's judging code (`verdicts.judge` on the values at the
  plugin's per-look confidence, with the sample loop of `plugin/_sampling.py` reproduced:
  doubling until no verdict is inconclusive or max_samples is reached, and each policy resolved
  with the plan's `sampled_sequentially` flag). True p95 from 200,000 draws.

    python benchmarks/bench_verdicts.py [--runs 20] [--model-runs N] [--no-plugin]

Takes about ten minutes on the 2-core development box (the model path with `--model-runs 1000`
about 90 s, the plugin path the rest); `--no-plugin` skips the plugin path.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_latency import stats
from pytest_latency.budgets import Expectation, parse_expectation
from pytest_latency.calls import ManualValue
from pytest_latency.plugin._state import SamplingPlan
from pytest_latency.policies import DEFAULT_POLICY, POLICIES, effective_policy
from pytest_latency.pools import Pool
from pytest_latency.sim import LatencyModel
from pytest_latency.sim._schedule import build_plan
from pytest_latency.verdicts import confidence_for_looks, judge

# The `hosted` preset (120 ms headers, 60 µs/token prefill, 15 ms/token, 3 tokens/chunk,
# jitter 0.25, 2 % tails of 1.5 s) with every time divided by 20, and a short answer.
MODEL_FIELDS: dict[str, Any] = {
    "ttfb_ms": 6.0,
    "prefill_us_per_token": 3.0,
    "decode_ms_per_token": 0.75,
    "tokens_per_chunk": 3,
    "output_tokens": 6,
    "jitter": 0.25,
    "tail_prob": 0.02,
    "tail_ms": 75.0,
}
PROMPT_TOKENS = 8  # what the simulator counts for the generated suite's prompt (4 chars/token)

CONDITIONS: tuple[tuple[str, float, str], ...] = (
    # name, budget / true p95, what a good gate does
    ("under20", 1 / 0.8, "pass"),
    ("over20", 1 / 1.2, "fail"),
    ("under2", 1.02, "pass"),
    ("over2", 1 / 1.02, "fail"),
)


@dataclass(frozen=True)
class Plan:
    samples: int
    max_samples: int

    @property
    def sequential(self) -> bool:
        """Whether sequential sampling can act (what `auto` resolves on)."""
        return self.max_samples > self.samples

    @property
    def label(self) -> str:
        if self.max_samples == self.samples:
            return f"samples={self.samples}"
        return f"samples={self.samples}, max_samples={self.max_samples}"


PLANS = (Plan(20, 20), Plan(20, 200), Plan(60, 60), Plan(60, 600))
PLUGIN_PLAN = Plan(20, 200)


@dataclass
class Run:
    """One run of one condition: the sound gate's verdict and every value it drew."""

    verdict: str
    passed: dict[str, bool]  # policy -> gate decision
    n: int
    values: list[float]  # µs, in draw order


@dataclass
class Cell:
    condition: str
    truth: str  # "pass" or "fail": which side of the budget the true p95 is on
    budget: float  # µs
    runs: list[Run] = field(default_factory=list)


def budget_expr(budget_us: float) -> str:
    return f"ttft.p95 < {budget_us:.1f}us"


# ---- the model path ------------------------------------------------------------------------------


def model_sampler(seed: int) -> Callable[[], float]:
    model = LatencyModel.preset("default").replace(**MODEL_FIELDS)
    rng = random.Random(seed)
    tokens = ["w"] * model.output_tokens

    def draw() -> float:
        plan = build_plan(model, rng, uncached_tokens=PROMPT_TOKENS, channels=[("content", tokens)])
        return plan.pieces[0].due_ns / 1000.0

    return draw


def data_of(values: Sequence[float]) -> Pool:
    """A test's pool of hand-recorded values, as `latency.record` would leave it."""
    manual = [ManualValue(i, False, "ttft", v) for i, v in enumerate(values)]
    return Pool.of((), manual, len(values), ())


def sound_run(
    expectation: Expectation, values: Sequence[float], plan: Plan, confidence: float | None
) -> Run:
    """The plugin's sample loop (plugin/_sampling.py) over pre-drawn values, then its verdict.

    `confidence=None` judges with the plugin's code (`verdicts.judge` at the plugin's per-look
    confidence: 95 % split over the plan's looks); a number is the what-if: the same loop and
    policies with `stats` bounds at that one-sided confidence.
    """
    plugin_confidence = confidence_for_looks(looks_of(plan))

    def verdict_of(n: int) -> tuple[str, float]:
        if confidence is None:
            (j,) = judge([expectation], data_of(values[:n]), confidence=plugin_confidence)
            assert j.estimate is not None
            return j.verdict, j.estimate
        est = stats.percentile_estimate(values[:n], 95, confidence)
        return stats.verdict("<", expectation.threshold, est.interval, est.value), est.value

    n = plan.samples
    while n < plan.max_samples and verdict_of(n)[0] == "inconclusive":
        n += min(n, plan.max_samples - n)
    verdict, estimate = verdict_of(n)
    if confidence is None:  # the plugin's own policy code, for every policy
        data = data_of(values[:n])
        # `auto` resolves the way plugin/_sampling.py resolves it, from the plan; `judge` alone
        # would resolve it as for a fixed sample size.
        passed = {
            p: judge(
                [expectation],
                data,
                policy=effective_policy(p, sampled_sequentially=plan.sequential),
                confidence=plugin_confidence,
            )[0].passed
            for p in POLICIES
        }
    else:
        passed = decisions(verdict, estimate < expectation.threshold, plan.sequential)
    return Run(verdict, passed, n, list(values[: plan.max_samples]))


def decisions(verdict: str, estimate_passes: bool, sampled_sequentially: bool) -> dict[str, bool]:
    """What each inconclusive policy does with a verdict (verdicts._apply_policy's rule, with
    `auto` resolved by policies.effective_policy for the plan)."""
    if verdict != "inconclusive":
        return dict.fromkeys(POLICIES, verdict == "pass")
    resolved = {"estimate": estimate_passes, "pass": True, "fail": False}
    return {
        p: resolved[effective_policy(p, sampled_sequentially=sampled_sequentially)]
        for p in POLICIES
    }


def model_path(
    runs: int, seed: int, plans: Sequence[Plan], confidence: float | None = None
) -> tuple[float, dict[Plan, list[Cell]]]:
    draw = model_sampler(seed)
    truth = stats.percentile([draw() for _ in range(200_000)], 95)
    results: dict[Plan, list[Cell]] = {}
    for plan in plans:
        cells = []
        for name, ratio, side in CONDITIONS:
            expectation = parse_expectation(budget_expr(truth * ratio), source="bench")
            cell = Cell(name, side, expectation.threshold)
            for _ in range(runs):
                values = [draw() for _ in range(plan.max_samples)]
                cell.runs.append(sound_run(expectation, values, plan, confidence))
            cells.append(cell)
        results[plan] = cells
    return truth, results


# ---- the plugin path -----------------------------------------------------------------------------

INNER_INI = """\
[pytest]
asyncio_default_fixture_loop_scope = function
"""

# Sets the run's latency model and seed on the plugin's simulator, and dumps each test's
# captured ttft values (in call order) and the plugin's judgements to $BENCH_OUT at the end.
INNER_CONFTEST = """\
import json, os
import pytest
from pytest_latency.testdata import TestData

MODEL = json.loads(os.environ["BENCH_MODEL"])
SEED = int(os.environ["BENCH_SEED"])
OUT = {}

@pytest.fixture(autouse=True)
def _model(request, llm_sim):
    index = int(request.node.name.rsplit("_", 1)[1])
    llm_sim.set_model(llm_sim.model.replace(**MODEL, seed=SEED * 10 + index))

def pytest_runtest_logreport(report):
    test = getattr(report, "pytest_latency", None)
    if report.when == "call" and test is not None:
        if isinstance(test, dict):  # a pytest-xdist worker's report
            test = TestData.from_wire(test)
        pool = test.pool
        OUT[report.nodeid] = {
            "ttft": [c.ttft for c in pool.ok if c.ttft is not None],
            "budgets": [j.to_dict() for j in test.judgements],
            "policy": test.policy,
            "errors": pool.errors,
        }

def pytest_sessionfinish(session):
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump(OUT, f)
"""

INNER_TEST = """\
import pytest

MESSAGES = [{{"role": "user", "content": "Say something."}}]

def ask(client):
    stream = client.chat.completions.create(model="sim", messages=MESSAGES, stream=True)
    for _ in stream:
        pass
{tests}
"""

INNER_CASE = """
@pytest.mark.latency({expr!r}, samples={samples}, warmup=1, max_samples={max_samples})
def test_{index}(openai_client, llm_sim):
    ask(openai_client)
"""


CALIBRATION_EXPR = "ttft.p95 < 1000s"  # never missed: the calibration tests only measure


def write_suite(where: Path, exprs: Sequence[str], plan: Plan, calibration_batch: int = 0) -> None:
    """One test per expression (indexes 0..), plus, with `calibration_batch`, a calibration test
    of that many calls first in the file and another last, so that every run's process measures
    the machine right before and right after it judges the conditions."""
    cases = [
        INNER_CASE.format(expr=e, samples=plan.samples, max_samples=plan.max_samples, index=i)
        for i, e in enumerate(exprs)
    ]
    if calibration_batch:
        n = len(exprs)
        cal = {"expr": CALIBRATION_EXPR, "samples": calibration_batch}
        cases.insert(0, INNER_CASE.format(**cal, max_samples=calibration_batch, index=n))
        cases.append(INNER_CASE.format(**cal, max_samples=calibration_batch, index=n + 1))
    (where / "pytest.ini").write_text(INNER_INI)
    (where / "conftest.py").write_text(INNER_CONFTEST)
    (where / "test_gate.py").write_text(INNER_TEST.format(tests="".join(cases)))


def run_pytest(where: Path, seed: int, policy: str | None) -> dict[int, dict[str, Any]]:
    """One inner pytest process; each test's dump by its index."""
    out = where / "out.json"
    env = dict(os.environ, BENCH_MODEL=json.dumps(MODEL_FIELDS), BENCH_SEED=str(seed))
    env["BENCH_OUT"] = str(out)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--latency-sim"]
    command += ["-p", "no:randomly", "-o", "addopts="]
    if policy is not None:
        command.append(f"--latency-inconclusive={policy}")
    proc = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1) or not out.exists():
        raise RuntimeError(f"inner pytest exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return {int(nodeid.rsplit("_", 1)[1]): test for nodeid, test in result.items()}


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass
class Calibration:
    """The plugin path's truth, measured in batches spread over the experiment."""

    pre: list[float]  # the calibration process before the runs: sets the budgets
    batches: list[tuple[str, list[float]]] = field(default_factory=list)  # (label, values)
    loads: list[tuple[str, str]] = field(default_factory=list)  # (phase, load averages)

    @property
    def pooled(self) -> list[float]:
        """Every interleaved batch: the truth the runs were actually judged against."""
        return [v for _, values in self.batches for v in values]

    def groups(self, count: int) -> list[tuple[str, list[float]]]:
        """The pre-run calibration, then the interleaved batches in `count` consecutive groups."""
        out = [("before the runs", self.pre)]
        size = max(1, -(-len(self.batches) // count))
        for i in range(0, len(self.batches), size):
            chunk = self.batches[i : i + size]
            label = chunk[0][0] if len(chunk) == 1 else f"{chunk[0][0]} .. {chunk[-1][0]}"
            out.append((label, [v for _, values in chunk for v in values]))
        return out


def plugin_path(
    runs: int, seed: int, policies: Sequence[str], calibration: int, batch: int
) -> tuple[Calibration, dict[str, list[Cell]]]:
    with tempfile.TemporaryDirectory(prefix="bench_verdicts_") as tmp:
        where = Path(tmp)
        # Pre-calibration: one process, one test, `calibration` captured calls; sets the budgets.
        # The truth the verdicts are scored against is measured again in every run's process.
        cal = Calibration([])
        cal.loads.append(("before the pre-calibration", load()))
        write_suite(where, [CALIBRATION_EXPR], Plan(calibration, calibration))
        cal.pre = run_pytest(where, seed, None)[0]["ttft"]
        cal.loads.append(("after the pre-calibration", load()))
        pre_p95 = stats.percentile(cal.pre, 95)
        exprs = [budget_expr(pre_p95 * ratio) for _, ratio, _ in CONDITIONS]
        budgets = [parse_expectation(e, source="bench").threshold for e in exprs]
        write_suite(where, exprs, PLUGIN_PLAN, batch)
        first_cal, last_cal = len(CONDITIONS), len(CONDITIONS) + 1
        cells = {
            p: [Cell(name, side, b) for (name, _, side), b in zip(CONDITIONS, budgets, strict=True)]
            for p in policies
        }
        for run in range(runs):
            for policy in policies:
                out = run_pytest(where, seed + 1 + run, policy)
                cal.loads.append((f"after run {run + 1} ({policy})", load()))
                cal.batches.append((f"run {run + 1} before", out[first_cal]["ttft"]))
                cal.batches.append((f"run {run + 1} after", out[last_cal]["ttft"]))
                for i, cell in enumerate(cells[policy]):
                    test = out[i]
                    (judgement,) = test["budgets"]
                    verdict = judgement["verdict"]
                    passed = decisions(
                        verdict, float(judgement["estimate"]) < cell.budget, PLUGIN_PLAN.sequential
                    )
                    # The policy the plugin ran with must agree with the rule applied here.
                    resolved = effective_policy(policy, sampled_sequentially=PLUGIN_PLAN.sequential)
                    assert test["policy"] == resolved, (policy, test["policy"])
                    assert judgement["passed"] == passed[policy], (policy, judgement)
                    cell.runs.append(Run(verdict, passed, int(judgement["n"]), test["ttft"]))
        return cal, cells


def drift_report(cal: Calibration, groups: int, max_drift: tuple[float, float]) -> bool:
    """Print the calibration batches' p50/p95 and say whether the machine held still; True when
    the drift is within `max_drift` (p50, p95 spread relative to the pooled truth)."""
    pooled = cal.pooled
    truth50, truth95 = stats.percentile(pooled, 50), stats.percentile(pooled, 95)
    print("\ncalibration batches (p50 / p95 of the captured ttft; load averages 1/5/15 min):")
    for phase, avg in cal.loads:
        print(f"  load {avg:>17}  {phase}")
    rows = cal.groups(groups)
    p50s, p95s = [], []
    for label, values in rows:
        p50, p95 = stats.percentile(values, 50), stats.percentile(values, 95)
        p50s.append(p50)
        p95s.append(p95)
        print(
            f"  {label:<28} n={len(values):>5}  p50 {p50 / 1000:6.2f} ms ({p50 / truth50 - 1:+.1%})"
            f"  p95 {p95 / 1000:6.2f} ms ({p95 / truth95 - 1:+.1%})"
        )
    drift50 = (max(p50s) - min(p50s)) / truth50
    drift95 = (max(p95s) - min(p95s)) / truth95
    valid = drift50 <= max_drift[0] and drift95 <= max_drift[1]
    print(
        f"  pooled interleaved truth: p50 {truth50 / 1000:.2f} ms, p95 {truth95 / 1000:.2f} ms "
        f"from {len(pooled)} calls; drift between batches: p50 {drift50:.1%} (limit "
        f"{max_drift[0]:.0%}), p95 {drift95:.1%} (limit {max_drift[1]:.0%})"
    )
    if valid:
        print("  the machine held still: the plugin-path table is valid evidence for the ±20% rows")
    else:
        print(
            "  NOT VALID EVIDENCE: the machine's speed drifted between calibration batches more "
            "than sampling noise explains; the plugin-path verdicts were judged against a moving "
            "truth"
        )
    return valid


# ---- the table -----------------------------------------------------------------------------------


def point_failures(cell: Cell, n: int) -> int:
    """Failures of the point-estimate gate (sample p95 < budget) on each run's first n values."""
    return sum(1 for run in cell.runs if not stats.percentile(run.values[:n], 95) < cell.budget)


def confident_wrong(cell: Cell) -> int:
    wrong = "fail" if cell.truth == "pass" else "pass"
    return sum(1 for run in cell.runs if run.verdict == wrong)


TABLE_POLICIES = ("auto", "estimate", "pass", "fail")
assert set(TABLE_POLICIES) == set(POLICIES), "a policy was added: add its column"


def table(title: str, cells: Sequence[Cell], plan: Plan, truth: float) -> str:
    runs = len(cells[0].runs)
    point_ns = sorted({plan.samples, plan.max_samples})
    auto = effective_policy("auto", sampled_sequentially=plan.sequential)
    head = (
        "| condition | budget | true p95 vs budget | verdicts pass/inc/fail | mean n "
        "| confident wrong "
        + "".join(f"| fails: {p}{f' (= {auto})' if p == 'auto' else ''} " for p in TABLE_POLICIES)
        + "".join(f"| point n={n} fails " for n in point_ns)
        + "|"
    )
    lines = [
        f"### {title} — {plan.label}, {runs} runs, true p95 {truth / 1000:.2f} ms, "
        f"per-look confidence {confidence_for_looks(looks_of(plan)):.0%}",
        "",
        head,
    ]
    lines.append("|" + "---|" * (head.count("|") - 1))
    for cell in cells:
        v = [sum(r.verdict == k for r in cell.runs) for k in ("pass", "inconclusive", "fail")]
        fails = [sum(not r.passed[p] for r in cell.runs) for p in TABLE_POLICIES]
        mean_n = sum(r.n for r in cell.runs) / runs
        want = "0" if cell.truth == "pass" else str(runs)
        row = (
            f"| {cell.condition} (want {want} fails) | {cell.budget / 1000:.2f} ms "
            f"| {truth / cell.budget - 1:+.1%} "
            f"| {v[0]}/{v[1]}/{v[2]} | {mean_n:.0f} | {confident_wrong(cell)} "
            + "".join(f"| {f} " for f in fails)
            + "".join(f"| {point_failures(cell, n)} " for n in point_ns)
            + "|"
        )
        lines.append(row)
    return "\n".join(lines)


def looks_of(plan: Plan) -> int:
    return SamplingPlan((), plan.samples, 0, plan.max_samples).looks


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per condition (default 20)")
    parser.add_argument("--model-runs", type=int, help="runs on the model path (default: --runs)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--calibration",
        type=int,
        default=1000,
        help="plugin path: calls of the calibration process that sets the budgets (default 1000)",
    )
    parser.add_argument(
        "--calibration-batch",
        type=int,
        default=150,
        help="plugin path: calls of the calibration tests before and after the conditions in "
        "every run's process (default 150; pooled, they are the truth the runs are scored on)",
    )
    parser.add_argument(
        "--max-drift",
        type=float,
        nargs=2,
        default=(0.05, 0.10),
        metavar=("P50", "P95"),
        help="plugin path: the largest spread of the calibration groups' p50 and p95, relative "
        "to the pooled truth, for the run to count as evidence (default 0.05 0.10: about twice "
        "the spread sampling noise alone gives in 99%% of experiments)",
    )
    parser.add_argument("--no-plugin", action="store_true", help="skip the plugin path")
    parser.add_argument(
        "--real-policy",
        nargs="+",
        default=[DEFAULT_POLICY],
        choices=POLICIES,
        help=f"policies to run the plugin processes with (default: {DEFAULT_POLICY})",
    )
    parser.add_argument(
        "--what-if",
        type=float,
        nargs="*",
        default=[],
        metavar="CONFIDENCE",
        help="also run the model path with one-sided bounds at these confidences (e.g. 0.99)",
    )
    args = parser.parse_args(argv)
    model_runs = args.model_runs or args.runs
    print(f"latency model: hosted ÷ 20: {json.dumps(MODEL_FIELDS)}")
    print(f"load average (1/5/15 min) at start: {load()} on {os.cpu_count()} CPUs")
    started = time.perf_counter()
    truth, model_results = model_path(model_runs, args.seed, PLANS)
    print(
        f"\nmodel path ({time.perf_counter() - started:.1f} s, load now {load()}): "
        f"true p95 from 200,000 draws"
    )
    for plan, cells in model_results.items():
        print()
        print(table("model path", cells, plan, truth))
    for confidence in args.what_if:
        truth, model_results = model_path(model_runs, args.seed, PLANS, confidence)
        for plan, cells in model_results.items():
            print()
            print(table(f"model path, what if bounds were {confidence:.3%}", cells, plan, truth))
    if args.no_plugin:
        return
    started = time.perf_counter()
    cal, plugin_results = plugin_path(
        args.runs, args.seed, args.real_policy, args.calibration, args.calibration_batch
    )
    took = time.perf_counter() - started
    pre = stats.percentile_estimate(cal.pre, 95)
    print(
        f"\nplugin path ({took:.0f} s, load now {load()}): budgets set from a p95 of "
        f"{pre.value / 1000:.3f} ms ({args.calibration} calls before the runs; 90% interval "
        f"{pre.low / 1000:.3f} .. {pre.high / 1000:.3f} ms)"
    )
    valid = drift_report(cal, 4, args.max_drift)
    truth = stats.percentile(cal.pooled, 95)
    runs_p95 = stats.percentile(
        [v for cells in plugin_results.values() for c in cells for r in c.runs for v in r.values],
        95,
    )
    print(
        f"  cross-check: p95 of every value the runs drew {runs_p95 / 1000:.2f} ms "
        f"({runs_p95 / truth - 1:+.1%} vs the pooled calibration)"
    )
    for policy, cells in plugin_results.items():
        print()
        note = "" if valid else " (NOT VALID EVIDENCE: drift)"
        title = f"plugin path, run with policy {policy!r}{note}"
        print(table(title, cells, PLUGIN_PLAN, truth))


if __name__ == "__main__":
    main()
