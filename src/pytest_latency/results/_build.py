"""Building the result file of one run from the plugin's per-test records.

Owns `ResultBuilder` (and `build_result`, the same over a finished list): each test's entry (its
metric blocks and counters read from its pool, its budget entries, its findings, what-ifs, time
split, prefill fit and overlap as `diagnose` computed them, its error kinds and its timeline), the
per-model/per-endpoint rollups and the session block (HDR histograms, so CI shards merge exactly;
the session's also holds every test's `turn`, which belongs to no model), each value counted into
its buckets once, when its test's record arrives. The report renders what this builds and never
recomputes a metric. May import `testdata`, `pools`, `calls`, `diagnose`,
`histogram`, `catalogue`, `metrics` and `load` (types) and its siblings; never pytest, never
jinja2.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pytest_latency import diagnose
from pytest_latency.catalogue import ATTEMPT_METRICS, BLOCK_METRICS, POOLED_METRICS
from pytest_latency.histogram import BucketCounts, record_values
from pytest_latency.policies import DEFAULT_POLICY
from pytest_latency.pools import NO_COST, CostTotals, cache_ratio, call_values, cost_totals
from pytest_latency.results._blocks import (
    FLAGS,
    HdrPool,
    Tally,
    cost_block,
    exact_block,
    flag_counts,
    flagged_count,
    json_safe,
    metrics_info,
    ratio_block,
    rollup_dict,
    without_repeats,
)
from pytest_latency.results._budgets import budget_entry, session_budget_entry, verdict_counts
from pytest_latency.results._compare import regressed_metrics
from pytest_latency.results._schema import SCHEMA, MetricBlock, PhaseBlock, PrefillBlock

if TYPE_CHECKING:
    from pytest_latency.calls import Call
    from pytest_latency.load import Load
    from pytest_latency.metrics import CallMetrics
    from pytest_latency.pools import Pool
    from pytest_latency.testdata import TestData
    from pytest_latency.verdicts import Judgement

# Bounds on the per-test lists, so the file grows with the number of tests, not with samples.
MAX_PREFILL_POINTS: Final = 500
MAX_TIMELINE_SAMPLES: Final = 50
MAX_TIMELINE_CALLS: Final = 100
MAX_ERROR_DETAIL: Final = 200

# The group keys of a call (`_group_keys`, keys only): calls with the same keys land in the same
# rollups, so their values are counted once per key set and each rollup adds up its key sets.
_Keys = tuple[str, ...]
# ttft → attempt_ttft, ...: the attempt metric counted with its call metric's values when no
# successful call of a batch came after a retry (they are the same values then).
_ATTEMPT_OF: Final = {base: metric for metric, base in ATTEMPT_METRICS.items()}


@dataclass(slots=True)
class _Part:
    """What the calls of one key set (one model on one endpoint) added up to over the run: the
    counters, errors and flags, and each metric's values counted per HDR bucket. Every call is
    added to exactly one part, once; a rollup adds up the parts it covers."""

    tally: Tally
    errors: Counter[str]
    retried_errors: Counter[str]
    flags: Counter[str]
    counts: dict[str, BucketCounts]
    phases: diagnose.PhaseColumns
    cost: CostTotals = NO_COST

    @classmethod
    def empty(cls) -> _Part:
        return cls(
            Tally(),
            Counter(),
            Counter(),
            Counter({f: 0 for f in FLAGS}),
            {},
            diagnose.PhaseColumns.empty(),
        )

    def add_calls(self, calls: Sequence[Call]) -> None:
        finals = [c.final for c in calls]
        ok = [f for f in finals if f.error is None]
        self.tally.call_count += len(calls)
        self.tally.error_count += len(finals) - len(ok)
        self.tally.flagged_count += flagged_count(finals)
        self.tally.retries += sum(c.retries for c in calls)
        self.errors.update(f.error for f in finals if f.error is not None)
        self.retried_errors.update(_retried_errors(calls))
        self.flags.update(flag_counts(finals))
        self.tally.add_ratio(cache_ratio(ok))
        self.cost = self.cost.plus(cost_totals(ok))
        self.phases.add(ok)
        # The values of the successful calls only (hand-recorded values carry no model). Unless
        # one of them came after a retry, an attempt metric's values are its call metric's:
        # counted with them, not read again.
        waited = any(f.waited_us for f in ok)
        for metric in POOLED_METRICS:
            if metric in ATTEMPT_METRICS and not waited:
                continue
            values = call_values(ok, metric)
            if values:
                into = [self.counts.setdefault(metric, BucketCounts())]
                twin = _ATTEMPT_OF.get(metric)
                if twin is not None and not waited:
                    into.append(self.counts.setdefault(twin, BucketCounts()))
                record_values(values, into)

    def add(self, other: _Part) -> None:
        """`other`'s counters, errors, flags and bucket counts added to these (the phase columns
        are added up only for a rollup that is diagnosed: `_phases`)."""
        self.tally.add(other.tally)
        self.errors.update(other.errors)
        self.retried_errors.update(other.retried_errors)
        self.flags.update(other.flags)
        self.cost = self.cost.plus(other.cost)
        for metric, counts in other.counts.items():
            self.counts.setdefault(metric, BucketCounts()).add(counts)


def _phases(parts: Sequence[_Part]) -> diagnose.PhaseColumns:
    """The phase-split columns of the calls `parts` cover. Each part's columns are sorted in
    place first (once: sorting them again is a pass), so their concatenation sorts in a few
    merges."""
    columns = diagnose.PhaseColumns.empty()
    for part in parts:
        part.phases.sort()
        columns.extend(part.phases)
    return columns


@dataclass(slots=True)
class _Group:
    """A rollup as the run goes: its key fields, how many tests had a call in it, and its
    calls' final attempts in the order they ran (its findings are diagnosed over them)."""

    fields: dict[str, str]
    tests: int = 0
    finals: list[CallMetrics] = field(default_factory=list)


def _rollup_dict(
    group: _Group,
    parts: Iterable[_Part],
    scope: str,
    diagnosed: dict[tuple[int, ...], list[diagnose.Finding]],
    samples: Mapping[str, BucketCounts] | None = None,
) -> dict[str, Any]:
    """A group's (or the session's) block from the parts it covers, and (the session's) the
    per-sample times `samples` counted. `diagnosed` remembers findings by call set: a model
    served by one endpoint has the same calls in its `model=` and its `model=,endpoint=`
    rollups, diagnosed once."""
    parts = list(parts)
    total = _Part.empty()
    for part in parts:
        total.add(part)
    total.tally.tests = group.tests
    counted = {**total.counts, **(samples or {})}
    metrics: dict[str, MetricBlock] = {}
    for metric in BLOCK_METRICS:
        counts = counted.get(metric)
        if counts is not None and counts.count:
            metrics[metric] = HdrPool.of((counts,)).block(metric)
    metrics = without_repeats(metrics)
    out = rollup_dict(
        group.fields, total.tally, total.errors, total.retried_errors, total.flags, metrics
    )
    out["cost"] = cost_block(total.cost)
    # Findings over the pooled calls (prefill/decode, cache health, consumer-bound); the
    # per-sample checks (serial calls, budgets) stay per test.
    signature = tuple(id(f) for f in group.finals)  # the calls outlive the build
    found = diagnosed.get(signature)
    if found is None:
        found = diagnosed[signature] = diagnose.diagnose_calls(group.finals, phases=_phases(parts))
    out["findings"] = json_safe(
        [diagnose.Finding(f.kind, f.message, f.evidence, scope=scope).to_dict() for f in found]
    )
    return out


def _retried_errors(calls: Sequence[Call]) -> Counter[str]:
    """Errors of attempts the SDK retried (every attempt but the last), by kind."""
    return Counter(a.error for c in calls for a in c.attempts[:-1] if a.error is not None)


def test_blocks(test: TestData) -> dict[str, Any]:
    """The costly parts of a test's entry, which depend on nothing but the test: its metric
    blocks (exact percentiles of its sorted values and their HDR blob), timeline, error kinds,
    usage fields and prefill points. The plugin computes them where the test ran, when a result
    file will be written (`TestData.blocks`), so the end of a session only assembles them."""
    pool = test.pool
    metrics: dict[str, MetricBlock] = {}
    for metric in BLOCK_METRICS:
        data = pool.values(metric)  # the calls' (or samples') values and hand-recorded ones
        base = ATTEMPT_METRICS.get(metric)
        if base is not None and data == pool.values(base):
            continue  # no retry made them differ: `without_repeats`' rule, before the block
        if data:
            counts = BucketCounts()
            record_values(data, (counts,))
            metrics[metric] = exact_block(metric, data, counts)
    figures = test.figures if test.figures is not None else diagnose.test_figures(pool)
    return {
        "metrics": metrics,
        "usage_fields": _usage_fields(pool.ok),
        "error_kinds": _error_kinds(pool.calls),
        "timeline": _timeline(pool.calls),
        "prefill": _prefill(pool.ok, figures["prefill_fit"]),
    }


def _test_entry(test: TestData) -> dict[str, Any]:
    """The test's entry in the result file."""
    pool = test.pool
    blocks = test.blocks if test.blocks is not None else test_blocks(test)
    findings = test.findings
    if findings is None:  # a record no one diagnosed (a tool's data): diagnosed here, the same way
        findings = tuple(diagnose.diagnose_test(pool, judgements=test.judgements))
    figures = test.figures if test.figures is not None else diagnose.test_figures(pool)
    entry: dict[str, Any] = {
        "nodeid": test.nodeid,
        "outcome": test.outcome,
        "location": list(test.location) if test.location else None,
        "policy": test.policy,
        "samples": test.samples,
        "warmup": test.warmup,
        "call_count": len(pool.calls),
        # Calls outside any sample (fixtures' setup and teardown): counted here, never pooled.
        "unsampled_call_count": test.unsampled_calls,
        "error_count": pool.errors,
        "retries": pool.retries,
        "calls_per_sample": list(pool.calls_per_sample()),
        "metrics": blocks["metrics"],
        "cache_read_ratio": ratio_block(pool.cache_ratio()),
        "cost": cost_block(pool.cost_totals()),
        "usage_fields": blocks["usage_fields"],
        "phase": _phase(figures["phase"]),
        "concurrency": json_safe(figures["concurrency"]),
        "budgets": [budget_entry(j) for j in test.judgements],
        "flags": flag_counts(pool.finals),
        "flagged_count": flagged_count(pool.finals),
        "errors": dict(sorted(pool.error_counts().items())),
        "retried_errors": dict(sorted(_retried_errors(pool.calls).items())),
        "error_kinds": blocks["error_kinds"],
        "timeline": blocks["timeline"],
        "prefill": blocks["prefill"],
        "findings": json_safe([f.to_dict() for f in findings]),
        "what_ifs": json_safe(figures["what_ifs"], digits=7),
    }
    if test.load is not None:
        entry["load"] = _load_entry(test.load, figures.get("load"))
        if test.sweep is not None:
            entry["load"]["sweep"] = test.sweep
        if test.shards:  # split across pytest-xdist workers, and whether they ran together
            entry["load"]["split"] = {"shards": test.shards, "together": not test.apart}
    recorded = pool.manual_counts()
    if recorded:  # values recorded by hand (kept samples), by metric, in the order recorded
        entry["recorded"] = dict(recorded)
    return entry


def _load_entry(load: Load, measured: dict[str, Any] | None) -> dict[str, Any]:
    """The test's load shape, and its figures as `diagnose.LoadFigures` measured them."""
    opened = load.rate is not None
    entry: dict[str, Any] = {
        "concurrency": load.concurrency,
        "rate_per_s": load.rate,
        "arrival": load.arrival if opened else None,
        "burstiness": load.burstiness if opened else None,
        "seed": load.seed if opened else None,
        "in_flight_max": None if measured is None else measured["in_flight_max"],
    }
    if measured is not None and "schedule" in measured:
        entry["schedule"] = json_safe(measured["schedule"])
    return entry


def _error_kinds(calls: Sequence[Call]) -> dict[str, dict[str, Any]]:
    """Per error kind seen on any attempt: `failed` calls (their final attempt had it),
    `attempts` (every attempt with it, retried or final), `retried` (attempts with it that the
    SDK retried), `recovered` (calls that had it on an attempt and still succeeded), and
    `detail`, the first error message seen (cut to 200 characters; never request data)."""
    kinds: dict[str, dict[str, Any]] = {}
    for call in calls:
        seen: set[str] = set()
        for index, attempt in enumerate(call.attempts):
            if attempt.error is None:
                continue
            entry = kinds.setdefault(
                attempt.error,
                {"failed": 0, "attempts": 0, "retried": 0, "recovered": 0, "detail": None},
            )
            entry["attempts"] += 1
            if index < len(call.attempts) - 1:
                entry["retried"] += 1
            else:
                entry["failed"] += 1
            if entry["detail"] is None and attempt.error_detail:
                entry["detail"] = attempt.error_detail[:MAX_ERROR_DETAIL]
            seen.add(attempt.error)
        if not call.failed:
            for kind in seen:
                kinds[kind]["recovered"] += 1
    return dict(sorted(kinds.items()))


def _usage_fields(calls: Sequence[CallMetrics]) -> dict[str, int]:
    """How many successful calls reported each usage field (absent ≠ 0, so say which)."""
    return {
        "input_tokens": sum(c.input_tokens is not None for c in calls),
        "output_tokens": sum(c.output_tokens is not None for c in calls),
        "cache_fields": sum(c.cache_fields_reported for c in calls),
        "reasoning_tokens": sum(c.reasoning_tokens is not None for c in calls),
        "calls": len(calls),
    }


def _phase(split: Mapping[str, Any] | None) -> PhaseBlock:
    """Where a streamed call's time goes, as `diagnose` split it (the median call's share of
    e2e before its first token, and which side of the thresholds that leans to)."""
    if split is None:
        return {"prefill_share": None, "decode_share": None, "n": 0, "leaning": None}
    share = float(split["prefill_share"])
    return {
        "prefill_share": share,
        "decode_share": 1.0 - share,
        "n": int(split["n"]),
        "leaning": split["leaning"],
    }


def _timeline(calls: Sequence[Call]) -> dict[str, Any]:
    """Per kept sample, its calls as [start, first token, end, api, error] in µs from the
    sample's first request: enough to draw overlap (fan-out) against serial chains."""
    by_sample: dict[int, list[Call]] = {}
    for call in calls:
        by_sample.setdefault(call.sample, []).append(call)
    samples = []
    truncated = len(by_sample) > MAX_TIMELINE_SAMPLES
    for sample in sorted(by_sample)[:MAX_TIMELINE_SAMPLES]:
        group = sorted(by_sample[sample], key=lambda c: c.attempts[0].t_start_ns)
        truncated = truncated or len(group) > MAX_TIMELINE_CALLS
        origin = group[0].attempts[0].t_start_ns
        rows = []
        for call in group[:MAX_TIMELINE_CALLS]:
            final = call.final
            start = (call.attempts[0].t_start_ns - origin) / 1000
            # The call's own ttft and e2e, from its first attempt: its row spans the back-off.
            ttft, e2e = call.value("ttft"), call.value("e2e")
            end = start + e2e if e2e is not None else (final.t_end_ns - origin) / 1000
            token = None if ttft is None else round(start + ttft)
            rows.append([round(start), token, round(end), final.api, final.error])
        samples.append({"sample": sample, "calls": rows})
    return {"samples": samples, "truncated": truncated}


def _prefill(calls: Sequence[CallMetrics], fit: Mapping[str, Any]) -> PrefillBlock | None:
    """TTFT against uncached input tokens for the chart, with the line `diagnose` fitted (its
    slope is the prefill cost per uncached token, its intercept the fixed overhead), or its
    reason for not fitting one. The attempt's own ttft, as the fit's (no back-off in it)."""
    points = [
        (c.input_tokens - (c.cache_read_tokens or 0), c.ttft, bool(c.cache_read_tokens))
        for c in calls
        if c.ttft is not None and c.input_tokens is not None
    ]
    if not points:
        return None
    # An even stride keeps the kept points spread over the run rather than its first calls.
    stride = max(1, math.ceil(len(points) / MAX_PREFILL_POINTS))
    kept = points[::stride][:MAX_PREFILL_POINTS]
    return {
        "points": [[x, round(y), cached] for x, y, cached in kept],
        "n": len(points),
        "slope_us_per_token": fit["ms_per_1k_uncached_tokens"],
        "intercept_us": fit["intercept_us"],
        "note": fit["note"],
    }


def _group_keys(call: CallMetrics) -> tuple[tuple[str, dict[str, str]], ...]:
    model = call.model if call.model is not None else "(unknown)"
    return (
        (f"model={model}", {"model": model}),
        (f"endpoint={call.api}", {"endpoint": call.api}),
        (f"model={model},endpoint={call.api}", {"model": model, "endpoint": call.api}),
    )


class ResultBuilder:
    """The result file, built as the run goes: each test's entry and its calls' share of the
    group and session rollups are made when its record arrives (`add`), so what is left for the
    end of a session (`result`) is adding up a few parts per rollup and diagnosing the groups.

    Every call is added once, to the part of its key set (its model on its endpoint); a group
    and the session add up the parts they cover."""

    def __init__(self) -> None:
        self._entries: list[dict[str, Any]] = []
        self._pools: list[Pool] = []  # each entry's pool: a record replaced must keep it
        self._parts: dict[_Keys, _Part] = {}
        self._groups: dict[str, _Group] = {}
        self._session = _Group({})
        # The session's per-sample times (a sample's wall time belongs to no model or endpoint,
        # so to no part): measured ones only, as the parts hold no hand-recorded values.
        self._samples = {"turn": BucketCounts()}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, test: TestData) -> None:
        """A test's entry, and its kept calls counted into the rollups."""
        self._entries.append(_test_entry(test))
        self._pools.append(test.pool)
        calls = test.pool.calls
        turns = test.pool.turns()
        if turns:
            record_values(turns, (self._samples["turn"],))
        self._session.tests += 1
        self._session.finals.extend(c.final for c in calls)
        by_keys: dict[_Keys, list[Call]] = {}
        touched: set[str] = set()
        for call in calls:
            final = call.final
            group_keys = _group_keys(final)
            keys = tuple(k for k, _ in group_keys)
            by_keys.setdefault(keys, []).append(call)
            for key, fields in group_keys:
                group = self._groups.get(key)
                if group is None:
                    group = self._groups[key] = _Group(fields)
                group.finals.append(final)
                touched.add(key)
        for key in touched:
            self._groups[key].tests += 1
        for keys, subset in by_keys.items():
            part = self._parts.get(keys)
            if part is None:
                part = self._parts[keys] = _Part.empty()
            part.add_calls(subset)

    def replace(self, index: int, test: TestData) -> None:
        """The record at `index` again, with what its teardown added: calls outside any
        sample, which change its entry's counts but not its pool, so not the rollups."""
        if test.pool is not self._pools[index]:
            raise ValueError(f"{test.nodeid}: a replaced record must keep its pool")
        self._entries[index] = _test_entry(test)

    def result(
        self,
        *,
        run: Mapping[str, Any],
        session_budgets: Sequence[Judgement] = (),
        partial: bool = False,
        baseline: Mapping[str, Any] | None = None,
        session_policy: str = DEFAULT_POLICY,
        escaped: diagnose.Finding | None = None,
    ) -> dict[str, Any]:
        """The result file of what was added so far (docs/result-schema.md); the builder is
        left as it was, so it can be asked again (`partial` after an interrupt). `baseline` is
        the comparison with a saved run (`baseline_block`): the file carries it, and each
        regressed test's entry names its regressed metrics. `session_policy` is the inconclusive
        policy the session budgets were judged under (their entries carry it). `escaped` is the
        capture audit's finding (`diagnose.escaped_finding`), one of the session's."""
        diagnosed: dict[tuple[int, ...], list[diagnose.Finding]] = {}
        result: dict[str, Any] = {
            "schema": SCHEMA,
            "run": {
                "started": run.get("started"),
                "duration_s": run.get("duration_s"),
                "partial": partial,
                "versions": dict(run.get("versions", {})),
                "git": run.get("git"),
                "shards": 1,
                "prices": run.get("prices"),
            },
            "metrics_info": metrics_info(),
            "tests": list(self._entries),
            "groups": {
                key: _rollup_dict(
                    group, (p for ks, p in self._parts.items() if key in ks), key, diagnosed
                )
                for key, group in sorted(self._groups.items())
            },
            "session": _rollup_dict(
                self._session, self._parts.values(), "session", diagnosed, self._samples
            ),
        }
        session = result["session"]
        if escaped is not None:  # the capture audit's: what no figure holds
            session["findings"] = [
                *session["findings"],
                json_safe(
                    diagnose.Finding(
                        escaped.kind, escaped.message, escaped.evidence, scope="session"
                    ).to_dict()
                ),
            ]
        session["budgets"] = [
            session_budget_entry(j, session_policy, session["metrics"]) for j in session_budgets
        ]
        if baseline is not None:
            result["baseline"] = dict(baseline)
            regressed = regressed_metrics(baseline)
            result["tests"] = [
                {**e, "regressions": regressed[e["nodeid"]]} if e["nodeid"] in regressed else e
                for e in result["tests"]
            ]
        result["summary"] = verdict_counts(result)
        return result


def build_result(
    tests: Sequence[TestData],
    *,
    run: Mapping[str, Any],
    session_budgets: Sequence[Judgement] = (),
    partial: bool = False,
    session_policy: str = DEFAULT_POLICY,
) -> dict[str, Any]:
    """The result file of one run from the plugin's per-test records (docs/result-schema.md).

    `run` is `{"started", "duration_s", "versions", "git"}`. Metric scope follows the pools:
    kept samples, successful calls. Each test keeps its findings and gets its what-ifs; each
    group and the session get findings over their pooled calls. The plugin builds the same
    thing test by test (`ResultBuilder`)."""
    builder = ResultBuilder()
    for test in tests:
        builder.add(test)
    return builder.result(
        run=run, session_budgets=session_budgets, partial=partial, session_policy=session_policy
    )
