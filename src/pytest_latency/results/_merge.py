"""Merging the result files of CI shards into the file of the whole run.

Owns `merge_results`: tests concatenated in shard order (a node id in several shards kept each
time, marked with its shard), group and session histograms added exactly (same bucket layout),
counters summed, the run partial if any shard was, the `[session]` budgets judged again over
every shard's evidence added up (`evidence`, `verdicts.judge_shards`), and each shard's findings
kept, marked with their shard (a file holds no calls to diagnose them again). May import
`catalogue`, `budgets`, `evidence`, `verdicts` and its siblings; never pytest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_latency.catalogue import ATTEMPT_METRICS, BLOCK_METRICS
from pytest_latency.pools import NO_COST
from pytest_latency.results._blocks import (
    HdrPool,
    Tally,
    attempt_blocks,
    cost_block,
    cost_of_block,
    metrics_info,
    rollup_dict,
    without_repeats,
)
from pytest_latency.results._budgets import session_budget_entry, verdict_counts
from pytest_latency.results._schema import SCHEMA, ResultError
from pytest_latency.results._validate import check_tag


def merge_results(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Merge the result files of CI shards into the file of the whole run.

    The files are as `load_result` returns them (validated once, at load) or as the builder
    made them. Tests are concatenated in shard order; a node id found in more than one shard is
    kept every time, each copy marked with its 0-based `shard`. Group and session histograms are
    added exactly (same bucket layout), counters summed; the run is partial if any shard was.
    Session budgets are judged again over the shards' evidence added up (`_session_budgets`).
    """
    if not results:
        raise ResultError("nothing to merge: no result files given")
    for index, result in enumerate(results):
        check_tag(result, f"shard {index}")  # load_result validated each file in full
    owners: Counter[str] = Counter()
    for result in results:
        owners.update({t["nodeid"] for t in result["tests"]})
    tests: list[dict[str, Any]] = []
    for index, result in enumerate(results):
        for test in result["tests"]:
            copy = dict(test)
            if owners[test["nodeid"]] > 1:
                copy["shard"] = index
            tests.append(copy)
    groups: dict[str, dict[str, Any]] = {}
    for key in sorted({k for r in results for k in r["groups"]}):
        parts = [(i, r["groups"][key]) for i, r in enumerate(results) if key in r["groups"]]
        fields = {f: parts[0][1][f] for f in ("model", "endpoint") if f in parts[0][1]}
        groups[key] = _merge_aggregates(parts, fields)
    session = _merge_aggregates([(i, r["session"]) for i, r in enumerate(results)], {})
    session["budgets"] = _session_budgets(
        [r["session"].get("budgets", []) for r in results], session["metrics"]
    )
    merged: dict[str, Any] = {
        "schema": SCHEMA,
        "run": _merge_runs([r["run"] for r in results]),
        "metrics_info": metrics_info(),
        "tests": tests,
        "groups": groups,
        "session": session,
    }
    baseline = _merge_baselines([r.get("baseline") for r in results])
    if baseline is not None:
        merged["baseline"] = baseline
    merged["summary"] = verdict_counts(merged)
    return merged


def _session_budgets(
    shards: Sequence[Sequence[Mapping[str, Any]]], metrics: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The run's `[session]` budgets: each one every shard judged, with its evidence, judged
    again over all the shards' evidence added up (`shards`: how many); any other (a file from
    before evidence, a budget some shard lacks, the flagged-calls judgement) kept once per
    shard, marked with its `shard`."""
    if len(shards) == 1:
        return [dict(b) for b in shards[0]]
    out: list[dict[str, Any]] = []
    for expr in dict.fromkeys(b["expr"] for budgets in shards for b in budgets):
        found = [[b for b in budgets if b["expr"] == expr] for budgets in shards]
        entry = _rejudged(expr, found, metrics)
        if entry is not None:
            out.append(entry)
            continue
        out.extend({**b, "shard": i} for i, entries in enumerate(found) for b in entries)
    return out


def _rejudged(
    expr: str,
    found: Sequence[Sequence[Mapping[str, Any]]],
    metrics: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any] | None:
    """One budget over every shard's evidence, or None when that cannot be done exactly."""
    from pytest_latency.budgets import BudgetError, parse_expectation
    from pytest_latency.evidence import Evidence
    from pytest_latency.verdicts import judge_shards

    if any(len(entries) != 1 or "evidence" not in entries[0] for entries in found):
        return None
    evidence = [entries[0]["evidence"] for entries in found]
    policies = {e.get("policy") for e in evidence}
    if len(policies) != 1:
        return None  # shards run under different policies: no one verdict is theirs
    policy = str(policies.pop())
    try:
        expectation = parse_expectation(expr, source="result file")
        parts = [Evidence.from_dict(e) for e in evidence]
        judgement = judge_shards(expectation, parts, policy=policy)
    except (BudgetError, KeyError, ValueError):
        return None
    entry = dict(session_budget_entry(judgement, policy, metrics))
    entry["shards"] = len(found)
    return entry


def _merge_baselines(blocks: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Each shard's regressions and improvements against its baseline, kept and marked with
    their shard, like session budgets: Holm's adjustment ran over each shard's comparisons, so
    `pytest-latency compare` on the merged file is the run-wide comparison."""
    present = [(i, b) for i, b in enumerate(blocks) if b is not None]
    if not present:
        return None
    mark = len(blocks) > 1
    first = present[0][1]
    return {
        **{k: first[k] for k in ("path", "tolerance", "significance", "correction") if k in first},
        "compared": sum(int(b.get("compared", 0)) for _, b in present),
        **{
            key: [
                {**e, "shard": i} if mark else dict(e) for i, b in present for e in b.get(key, [])
            ]
            for key in ("regressions", "improvements")
        },
    }


def _merge_aggregates(
    shards: Sequence[tuple[int, Mapping[str, Any]]], fields: Mapping[str, str]
) -> dict[str, Any]:
    """Add up one rollup over the shard files that have it (`(shard index, rollup)` pairs)."""
    parts = [part for _, part in shards]
    tally = Tally()
    errors: Counter[str] = Counter()
    retried: Counter[str] = Counter()
    flags: Counter[str] = Counter()
    pools: dict[str, HdrPool] = {}
    cost = NO_COST
    # The attempt metrics some shard wrote: a shard that left one out had it equal its call
    # metric's block, and adds that.
    attempts = {m for part in parts for m in part["metrics"] if m in ATTEMPT_METRICS}
    for part in parts:
        tally.tests += int(part["tests"])
        tally.call_count += int(part["call_count"])
        tally.error_count += int(part["error_count"])
        tally.flagged_count += int(part.get("flagged_count", 0))  # absent in older files
        tally.retries += int(part["retries"])
        ratio = part["cache_read_ratio"]
        tally.calls_reporting_cache += int(ratio["calls_reporting"])
        tally.cache_read += int(ratio["read_tokens"])
        tally.cache_input += int(ratio["input_tokens"])
        errors.update(part.get("errors", {}))
        retried.update(part.get("retried_errors", {}))
        flags.update(part.get("flags", {}))
        cost = cost.plus(cost_of_block(part.get("cost")))
        for metric, block in attempt_blocks(part["metrics"], attempts).items():
            pool = HdrPool.from_block(block)
            if metric in pools:
                pools[metric].add(pool)
            else:
                pools[metric] = pool
    order: list[str] = [m for m in BLOCK_METRICS if m in pools]
    metrics = without_repeats({m: pools[m].block(m) for m in order})
    out = rollup_dict(fields, tally, errors, retried, flags, metrics)
    out["cost"] = cost_block(cost)
    # Findings need the calls, which a file does not keep: a merged rollup carries each shard's
    # own findings, marked with its `shard` (0-based index among the merged files), and none
    # recomputed. A single file passes through unchanged.
    # A shard without calls has nothing to say, so with one shard that has calls its findings
    # are exactly the run's and pass through unchanged.
    speaking = [(i, part) for i, part in shards if int(part.get("call_count", 0))]
    if len(speaking) <= 1:
        out["findings"] = [dict(f) for _, part in speaking for f in part.get("findings", [])]
    else:
        out["findings"] = [
            {**f, "shard": index} for index, part in speaking for f in part.get("findings", [])
        ]
    return out


def _merge_runs(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    starts = [r["started"] for r in runs if r.get("started")]
    # ISO timestamps of one timezone sort as strings; the run spans its shards' earliest start.
    ends = []
    for r in runs:
        ends.append(float(r.get("duration_s") or 0.0))
    first = runs[0]
    return {
        "started": min(starts) if starts else None,
        "duration_s": max(ends) if ends else None,
        "partial": any(bool(r.get("partial")) for r in runs),
        "versions": dict(first.get("versions", {})),
        "git": first.get("git"),
        "shards": sum(int(r.get("shards", 1)) for r in runs),
        "prices": _merge_prices([r.get("prices") for r in runs]),
    }


def _merge_prices(stamps: Sequence[Any]) -> dict[str, Any] | None:
    """The shards' price stamps as one: every snapshot kind any shard priced with (in order of
    first appearance), the latest fetch, every override; the first shard's source and version."""
    present = [p for p in stamps if isinstance(p, Mapping)]
    if not present:
        return None
    kinds = dict.fromkeys(k for p in present for k in str(p.get("snapshot", "")).split("+") if k)
    fetched = [str(p["fetched"]) for p in present if p.get("fetched")]
    overrides: dict[str, Any] = {}
    for p in present:
        overrides.update(p.get("overrides") or {})
    return {
        **present[0],
        "snapshot": "+".join(kinds),
        "fetched": max(fetched) if fetched else None,
        "overrides": overrides,
    }


__all__ = ["merge_results"]
