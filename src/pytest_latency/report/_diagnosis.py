"""The diagnosis, errors and what-ifs of a result file as report rows: readable titles for the
finding kinds, the evidence formatted in its units, the fan-out and hedging tables, and the
failed calls by error kind.

Owns how a finding reads (which `css` tone it gets; its title and the order kinds come in are
`diagnose`'s) and how evidence numbers are shown (µs as durations, shares as %, token counts as
tokens). It reads what `results` wrote (`findings`, `what_ifs`, `error_kinds`, `errors`,
`retried_errors`, `flags`) and computes nothing but counts and formatting. Plain text only:
the template escapes everything. May import `units`, `diagnose` (titles and order of the kinds)
and `catalogue` (how each call flag reads); never jinja2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_latency import units as fmt
from pytest_latency.catalogue import FLAG_SPECS
from pytest_latency.diagnose import rank, title

TONES = {
    "prefill_bound": "prefill",
    "decode_bound": "decode",
    "serial_independent_calls": "info",
    "too_few_samples": "muted",
}
# Per kind, at most this many tests are listed in the run's diagnosis section (the test table
# and the details hold the rest), and at most this many evidence items per finding.
TESTS_PER_KIND = 5
MAX_EVIDENCE = 12
MAX_TEXT = 160


@dataclass(frozen=True, slots=True)
class Evidence:
    label: str
    value: str


@dataclass(frozen=True, slots=True)
class FindingView:
    kind: str
    title: str
    tone: str  # css: prefill | decode | info | warn | muted
    message: str
    scope: str  # "" for a test's finding; "session", "model=…" … for a rollup's
    test: str
    anchor: str | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True, slots=True)
class KindGroup:
    """One kind across the run's tests: how many tests have it, the first few of them."""

    kind: str
    title: str
    tone: str
    tests: int
    items: tuple[FindingView, ...]
    more: int


@dataclass(frozen=True, slots=True)
class FanOutRow:
    k: int
    cells: tuple[str, ...]  # p50, p99 per metric, "*" marks an unsupported p99
    any_over: str


@dataclass(frozen=True, slots=True)
class HedgeRow:
    label: str
    delay: str
    p50: str
    p95: str
    p99: str
    extra_load: str


@dataclass(frozen=True, slots=True)
class WhatIfView:
    metrics: tuple[str, ...]  # the column heads: "e2e (n=20)"
    fan_out: tuple[FanOutRow, ...]
    unsupported: bool
    hedge: tuple[HedgeRow, ...]
    notes: tuple[str, ...]  # too few values, calls per sample


@dataclass(frozen=True, slots=True)
class ErrorRow:
    kind: str
    failed: int
    attempts: str
    retried: str
    recovered: str
    detail: str
    tests: tuple[tuple[str, str | None, str], ...] = ()  # (nodeid, anchor, "×2 failed"), run level
    more_tests: int = 0


def _short(text: str, limit: int = MAX_TEXT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _message(kind: str, heading: str, message: str) -> str:
    """The message without a lead-in that repeats the title ("prefill-bound: …")."""
    head, sep, rest = message.partition(": ")

    def norm(s: str) -> str:
        return s.lower().replace("-", " ").replace("_", " ").strip()

    if sep and rest and norm(head) in (norm(kind), norm(heading)):
        return rest[0].upper() + rest[1:]
    return message


_LABELS = {
    "n": "n",
    "share_before_first_token": "before 1st token",
    "median_uncached_input_tokens": "median uncached prompt",
    "decode_us_per_token": "decode per token",
    "ms_per_1k_uncached_tokens": "prefill cost",
    "intercept_us": "fixed part",
    "r2": "R²",
    "range_tokens": "prompt size range",
    "median_saving_us": "median saving per sample",
    "max_saving_us": "max saving",
    "median_busy_us": "median time in calls",
    "median_critical_path_us": "median critical path",
    "calls_with_usage": "calls with usage",
    "min_tokens": "provider minimum",
}


def _label(key: str, prefix: str) -> str:
    name = _LABELS.get(key)
    if name is None:
        name = key.removesuffix("_us").replace("_", " ")
    return f"{prefix}{name}"


def _number(key: str, value: float) -> str:
    if key.endswith("_us_per_token"):
        return f"{fmt.duration(value)}/token"
    if key == "ms_per_1k_uncached_tokens":
        return f"{value:.3g} ms per 1k tokens"
    if key.endswith("_us") or key in ("delay",):
        return fmt.duration(value)
    if "share" in key or key.endswith("_ratio") or key == "extra_load":
        return fmt.ratio(value)
    if key == "r2":
        return f"{value:.2f}"
    if "tokens" in key:
        return fmt.tokens(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.3g}"


def _pairs(value: Sequence[Any]) -> str:
    shown = []
    for pair in value[:5]:
        if isinstance(pair, list | tuple) and len(pair) >= 3:
            shown.append(f"{pair[0]}→{pair[1]} ({fmt.duration(float(pair[2]))} overlap)")
        else:
            shown.append(str(pair))
    return ", ".join(shown) + (", …" if len(value) > 5 else "")


def _steps(value: Mapping[str, Any]) -> str:
    if not value.get("n"):
        return fmt.ABSENT
    return (
        f"median {value.get('p50', 0):g}, p95 {value.get('p95', 0):g}, "
        f"max {value.get('max', 0)} over {value['n']} samples"
    )


def evidence(items: Mapping[str, Any], prefix: str = "") -> list[Evidence]:
    """The numbers a finding rests on, each in its unit; nested blocks are flattened."""
    out: list[Evidence] = []
    keys = list(items)
    for key in keys:
        value = items[key]
        if value is None or value == "" or key == "of":
            continue
        if key == "calls" and "of" in items and isinstance(value, int):
            out.append(Evidence(f"{prefix}calls", f"{value:,} of {int(items['of']):,}"))
        elif key == "calls_per_sample" and isinstance(value, Mapping):
            out.append(Evidence("calls per sample", _steps(value)))
        elif isinstance(value, Mapping):
            nested = "fit " if key == "prefill_fit" else f"{key.replace('_', ' ')} "
            out.extend(evidence(value, nested))
        elif isinstance(value, bool):
            out.append(Evidence(_label(key, prefix), "yes" if value else "no"))
        elif isinstance(value, int | float):
            out.append(Evidence(_label(key, prefix), _number(key, value)))
        elif isinstance(value, list | tuple):
            if value:
                text = _pairs(value) if "pairs" in key else ", ".join(map(str, value[:8]))
                out.append(Evidence(_label(key, prefix), _short(text)))
        else:
            out.append(Evidence(_label(key, prefix), _short(str(value))))
    return out[:MAX_EVIDENCE]


def finding_kind(finding: Mapping[str, Any]) -> str:
    """A finding's kind as the views name it (a file's finding without one is a "finding")."""
    return str(finding.get("kind", "finding"))


def finding_view(
    finding: Mapping[str, Any], *, test: str = "", anchor: str | None = None, scope: str = ""
) -> FindingView:
    kind = finding_kind(finding)
    proof = finding.get("evidence") or {}
    heading = title(kind, proof)
    where = scope or str(finding.get("scope", ""))
    if "shard" in finding:
        where = f"{where} (shard {finding['shard']})".strip()
    return FindingView(
        kind=kind,
        title=heading,
        tone=TONES.get(kind, "warn"),
        message=_message(kind, heading, str(finding.get("message", ""))),
        scope=where,
        test=test,
        anchor=anchor,
        evidence=tuple(evidence(proof)) if isinstance(proof, Mapping) else (),
    )


def findings_of_test(test: Mapping[str, Any], anchor: str | None) -> tuple[FindingView, ...]:
    found = [
        finding_view(f, test=str(test["nodeid"]), anchor=anchor)
        for f in test.get("findings", [])
        if isinstance(f, Mapping)
    ]
    return tuple(sorted(found, key=lambda f: rank(f.kind)))


def by_kind(
    tests: Sequence[Mapping[str, Any]],
    anchors: Sequence[str | None],
    priority: Sequence[int],
) -> tuple[KindGroup, ...]:
    """Every test finding of the run, by kind; tests listed in `priority` order (failing
    budgets first), at most TESTS_PER_KIND per kind."""
    grouped: dict[str, list[FindingView]] = {}
    seen: dict[str, set[int]] = {}
    for index in priority:
        test = tests[index]
        for finding in test.get("findings", []):
            if not isinstance(finding, Mapping):
                continue
            kind = str(finding.get("kind", "finding"))
            seen.setdefault(kind, set()).add(index)
            items = grouped.setdefault(kind, [])
            if len(items) < TESTS_PER_KIND:
                items.append(finding_view(finding, test=str(test["nodeid"]), anchor=anchors[index]))
    groups = []
    for kind in sorted(grouped, key=rank):
        first = grouped[kind][0]
        count = len(seen[kind])
        # A too-few-samples kind mixes budget and check findings: one title for both.
        heading = title(kind)
        groups.append(
            KindGroup(
                kind,
                heading,
                first.tone,
                count,
                tuple(grouped[kind]),
                max(count - len({(f.test) for f in grouped[kind]}), 0),
            )
        )
    return tuple(groups)


def rollup_findings(
    session: Mapping[str, Any], groups: Mapping[str, Mapping[str, Any]]
) -> tuple[FindingView, ...]:
    """Session and group findings, the same finding over several groups (a model with one
    endpoint has identical model, endpoint and model × endpoint rollups) listed once."""
    found: dict[tuple[str, str], list[tuple[str, Mapping[str, Any]]]] = {}
    sources: list[tuple[str, Mapping[str, Any]]] = [("session", session)]
    sources += list(groups.items())
    for name, rollup in sources:
        for finding in rollup.get("findings", []):
            if not isinstance(finding, Mapping):
                continue
            key = (str(finding.get("kind")), str(finding.get("message")))
            found.setdefault(key, []).append((name, finding))
    out = []
    for places in found.values():
        scopes = " · ".join(dict.fromkeys(name for name, _ in places))
        out.append(finding_view(places[0][1], scope=scopes))
    return tuple(sorted(out, key=lambda f: rank(f.kind)))


def _cell(value: Any) -> str:
    return fmt.duration(float(value)) if isinstance(value, int | float) else fmt.ABSENT


def _gain(hedge: Mapping[str, Any]) -> str:
    """ " (no gain)" when hedging leaves the p99 where it was: the duplicate, sent at the delay,
    cannot finish before the first request's slowest answers."""
    before, after = hedge.get("baseline_p99"), hedge.get("p99")
    if not isinstance(before, int | float) or not isinstance(after, int | float):
        return ""
    return " (no gain)" if before > 0 and after >= before * 0.995 else ""


def what_ifs(test: Mapping[str, Any]) -> WhatIfView | None:
    what = test.get("what_ifs")
    if not isinstance(what, Mapping):
        return None
    notes: list[str] = []
    heads: list[str] = []
    columns: list[dict[int, Mapping[str, Any]]] = []
    hedges: list[HedgeRow] = []
    for metric in ("e2e", "ttft"):
        entry = what.get(metric)
        if not isinstance(entry, Mapping):
            continue
        if entry.get("too_few") or not entry.get("fan_out"):
            notes.append(
                f"{metric}: {entry.get('n', 0)} successful calls, too few for what-ifs "
                f"(needs {entry.get('needed', '?')})."
            )
            continue
        heads.append(f"{metric} (n={entry.get('n', 0)})")
        columns.append({int(r["k"]): r for r in entry["fan_out"]})
        for h in entry.get("hedge", []):
            gain = _gain(h)
            hedges.append(
                HedgeRow(
                    label=f"{metric}: duplicate at p{float(h['delay_percentile']):g}",
                    delay=_cell(h.get("delay")),
                    p50=f"{_cell(h.get('baseline_p50'))} → {_cell(h.get('p50'))}",
                    p95=f"{_cell(h.get('baseline_p95'))} → {_cell(h.get('p95'))}",
                    p99=f"{_cell(h.get('baseline_p99'))} → {_cell(h.get('p99'))}",
                    extra_load=f"+{fmt.ratio(h.get('extra_load'))}{gain}",
                )
            )
    rows: list[FanOutRow] = []
    unsupported = False
    ks = sorted({k for column in columns for k in column})
    for k in ks:
        cells: list[str] = []
        any_over = fmt.ABSENT
        for column in columns:
            row = column.get(k)
            if row is None:
                cells += [fmt.ABSENT, fmt.ABSENT]
                continue
            mark = "" if row.get("supported", True) else " *"
            unsupported = unsupported or bool(mark)
            cells += [_cell(row.get("p50")), _cell(row.get("p99")) + mark]
            any_over = fmt.ratio(row.get("p_any_over_p99"))
        rows.append(FanOutRow(k, tuple(cells), any_over))
    steps = what.get("calls_per_sample")
    if isinstance(steps, Mapping) and steps.get("n") and float(steps.get("max", 0)) > 1:
        notes.append(f"Calls per sample (agent steps): {_steps(steps)}.")
    if not rows and not notes:
        return None
    return WhatIfView(tuple(heads), tuple(rows), unsupported, tuple(hedges), tuple(notes))


def _count(value: Any) -> str:
    return f"{int(value):,}" if isinstance(value, int | float) and value else "–"


def errors_of_test(test: Mapping[str, Any]) -> tuple[ErrorRow, ...]:
    """A test's failed and retried calls by error kind (`error_kinds`, or the plain counters of
    an older file)."""
    kinds = test.get("error_kinds")
    if isinstance(kinds, Mapping) and kinds:
        rows = (
            ErrorRow(
                kind=str(kind),
                failed=int(entry.get("failed", 0)),
                attempts=_count(entry.get("attempts")),
                retried=_count(entry.get("retried")),
                recovered=_count(entry.get("recovered")),
                detail=_short(str(entry.get("detail") or "")),
            )
            for kind, entry in kinds.items()
        )
        return tuple(sorted(rows, key=lambda r: (-r.failed, r.kind)))
    failed: Mapping[str, int] = test.get("errors", {})
    retried: Mapping[str, int] = test.get("retried_errors", {})
    return tuple(
        ErrorRow(
            kind=str(kind),
            failed=int(failed.get(kind, 0)),
            attempts=fmt.ABSENT,
            retried=_count(retried.get(kind)),
            recovered=fmt.ABSENT,
            detail="",
        )
        for kind in sorted(set(failed) | set(retried), key=lambda k: (-failed.get(k, 0), k))
    )


def run_errors(
    session: Mapping[str, Any],
    tests: Sequence[Mapping[str, Any]],
    anchors: Sequence[str | None],
) -> tuple[ErrorRow, ...]:
    """The run's failed calls by kind with the tests they happened in (most first)."""
    failed: dict[str, int] = dict(session.get("errors", {}))
    retried: dict[str, int] = dict(session.get("retried_errors", {}))
    where: dict[str, list[tuple[int, str, str | None, str]]] = {}
    details: dict[str, str] = {}
    for index, test in enumerate(tests):
        test_failed: Mapping[str, int] = test.get("errors", {})
        test_retried: Mapping[str, int] = test.get("retried_errors", {})
        for kind, entry in (test.get("error_kinds") or {}).items():
            if isinstance(entry, Mapping) and entry.get("detail") and kind not in details:
                details[kind] = _short(str(entry["detail"]))
        for kind in set(test_failed) | set(test_retried):
            lost, again = int(test_failed.get(kind, 0)), int(test_retried.get(kind, 0))
            parts = [f"{lost} failed"] if lost else []
            parts += [f"{again} retried"] if again else []
            where.setdefault(kind, []).append(
                (lost + again, str(test["nodeid"]), anchors[index], ", ".join(parts))
            )
    if "retried_errors" not in session:  # an older file: add up the tests
        for test in tests:
            for kind, count in test.get("retried_errors", {}).items():
                retried[kind] = retried.get(kind, 0) + int(count)
    rows = []
    for kind in sorted(set(failed) | set(retried), key=lambda k: (-failed.get(k, 0), k)):
        listed = [(n, a, t) for _, n, a, t in sorted(where.get(kind, []), key=lambda w: -w[0])]
        rows.append(
            ErrorRow(
                kind=kind,
                failed=int(failed.get(kind, 0)),
                attempts=fmt.ABSENT,
                retried=_count(retried.get(kind)),
                recovered=fmt.ABSENT,
                detail=details.get(kind, ""),
                tests=tuple(listed[:TESTS_PER_KIND]),
                more_tests=max(len(listed) - TESTS_PER_KIND, 0),
            )
        )
    return tuple(rows)


# What the outputs say beside a flag that does not make a call flagged (`FlagRow.distorting`).
NOT_FLAGGED = "not flagged: what was read is timed right"


@dataclass(frozen=True, slots=True)
class FlagRow:
    """One flag the run's calls carry: its text, how many calls and in how many tests.
    `distorting` flags (`catalogue.DISTORTING_FLAGS`) make a call flagged; the others say what a
    call is (read in part, undecodable) and are shown apart, never counted as flagged."""

    text: str
    calls: int
    tests: int
    distorting: bool

    @property
    def note(self) -> str:
        """What the report says beside the flag: nothing for a distorting one."""
        return "" if self.distorting else NOT_FLAGGED


def run_flags(
    session: Mapping[str, Any], tests: Iterable[Mapping[str, Any]]
) -> tuple[FlagRow, ...]:
    """A row for each flag any call of the run carries, distorting flags first."""
    calls: dict[str, int] = {}
    in_tests: dict[str, int] = {}
    for test in tests:
        for name, count in (test.get("flags") or {}).items():
            if count:
                calls[name] = calls.get(name, 0) + int(count)
                in_tests[name] = in_tests.get(name, 0) + 1
    totals = session.get("flags") or calls
    rows = [
        FlagRow(
            spec.text, int(totals.get(spec.name, 0)), in_tests.get(spec.name, 0), spec.distorting
        )
        for spec in FLAG_SPECS
        if totals.get(spec.name)
    ]
    return tuple(sorted(rows, key=lambda r: not r.distorting))


def flagged_calls(entry: Mapping[str, Any]) -> int:
    """The calls of a test or the session whose timings a distorting flag marks: the result
    file's `flagged_count` (`results._blocks.flagged_count` owns it). A file written before it
    existed gives the largest distorting flag's count, a lower bound."""
    if "flagged_count" in entry:
        return int(entry["flagged_count"])
    flags = entry.get("flags") or {}
    return max((int(flags.get(s.name, 0)) for s in FLAG_SPECS if s.distorting), default=0)
