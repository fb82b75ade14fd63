"""Terminal output: the latency summary table printed at the end of a run.

Owns the layout of the summary for a terminal: fixed-width columns (a "cost" column when any call
reported usage, a "by hand" column when a test recorded values itself), node ids cut to fit while
the test name stays readable, the run's spend line and what priced it, and the budget misses
below them. Every figure is read from the test's pool (the same values the result file and the
report show) and formatted by `units` (the "by hand" cell by `by_hand`, the cost cell, spend
line and price line by `spend`); nothing is computed here. May import `testdata`, `pools`,
`verdicts`, `by_hand`, `spend` and `units`; never pytest (the plugin hands the lines to pytest's
terminal reporter).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_latency import units
from pytest_latency.by_hand import FIGURES, by_hand_text
from pytest_latency.by_hand import HEADER as BY_HAND
from pytest_latency.pools import NO_COST
from pytest_latency.spend import HEADER as COST
from pytest_latency.spend import cost_cell, price_line, spend_line

if TYPE_CHECKING:
    from pytest_latency.pools import Pool
    from pytest_latency.testdata import TestData

_HEADERS = ("test", "n", "calls", "err", *FIGURES, "verdict")


def verdict(test: TestData, *, regressed: bool = False) -> str:
    """One word for a test: fail if any budget failed the gate, regressed if none failed but
    the baseline comparison found it slower, inconclusive if any budget was not confident
    (whatever the policy made of it), pass, or "-" for a test without budgets (the result
    file's rule: `results.row_status`)."""
    from pytest_latency.verdicts import worst_status

    return worst_status((j.status for j in test.judgements), regressed=regressed) or "-"


def summary_lines(
    tests: Sequence[TestData],
    *,
    width: int = 48,
    regressed: Mapping[str, Sequence[str]] | None = None,
    prices: Callable[[], Mapping[str, Any] | None] | None = None,
) -> list[str]:
    """The table, then the spend line and what priced it, then the budget misses; `regressed`
    maps each test the baseline comparison found slower to its metrics, `prices` gives the
    price stamp (`run.prices`), asked for only when some call reported usage."""
    regressed = regressed or {}
    names = _names([t.nodeid for t in tests], width)
    # A column for values the tests recorded by hand, when any did: judged like measured
    # values, and shown (a metric without a column of its own by its p50).
    by_hand = [_by_hand(t.pool) for t in tests]
    # A cost column when any call reported usage (`spend`): Σ per test, a floor where unpriced.
    costs = [t.pool.cost_totals() for t in tests]
    priced = any(c.priced or c.unpriced for c in costs)
    headers = _HEADERS[:-1] + ((COST,) if priced else ()) + _HEADERS[-1:]
    headers += (BY_HAND,) if any(by_hand) else ()
    rows = []
    for test, name, manual, cost in zip(tests, names, by_hand, costs, strict=True):
        pool = test.pool
        ratio = pool.cache_ratio()
        row = (
            name,
            str(test.samples),
            str(len(pool.calls)),
            str(pool.errors),
            units.duration(pool.percentile("ttft", 50)),
            units.duration(pool.percentile("ttft", 95)),
            units.duration(pool.percentile("tpot", 50)),
            units.duration(pool.percentile("e2e", 95)),
            units.duration(pool.percentile("turn", 95)),
            units.ratio(ratio.value if ratio else None, _cache_thresholds(test)),
            *((cost_cell(cost),) if priced else ()),
            verdict(test, regressed=test.nodeid in regressed),
        )
        rows.append(row + ((manual or units.ABSENT,) if headers[-1] == BY_HAND else ()))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    hand = headers[-1] == BY_HAND
    lines = [_row(headers, widths, hand)]
    lines.extend(_row(r, widths, hand) for r in rows)
    total = NO_COST
    for cost in costs:
        total = total.plus(cost)
    spent = spend_line(total)
    if spent is not None:
        lines.append(spent)
        stamp = price_line(prices()) if prices is not None else None
        if stamp is not None:
            lines.append(stamp)
    misses = [f"  {t.nodeid}: {j.message}" for t in tests for j in t.judgements if not j.passed]
    if misses:
        lines.append("budget misses:")
        lines.extend(misses)
    return lines


def _by_hand(pool: Pool) -> str:
    return by_hand_text(pool.manual_counts(), lambda metric: pool.percentile(metric, 50))


def _cache_thresholds(test: TestData) -> tuple[float, ...]:
    """The test's budgets on its whole cache read ratio: the cell must not round across them."""
    return tuple(
        e.threshold
        for j in test.judgements
        if (e := j.expectation) is not None and e.metric == "cache_read_ratio" and not e.filters
    )


def _row(cells: tuple[str, ...], widths: list[int], by_hand: bool) -> str:
    # Numbers right-aligned; the text columns (the test, and "by hand" after the verdict) left.
    text = {0, len(cells) - 1} if by_hand else {0}
    return "  ".join(
        c.ljust(w) if i in text else c.rjust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    ).rstrip()


def _names(nodeids: Sequence[str], width: int) -> list[str]:
    """Each node id cut to `width`. Ids whose cuts read the same (parametrize ids that differ in
    what was cut) are cut again keeping more of the end, then of the start, of their parametrize
    ids; ids that still read the same are shown whole."""
    names = [shorten(n, width) for n in nodeids]
    for head in (0.2, 0.8):
        seen = Counter(names)
        names = [
            shorten(n, width, head=head) if seen[s] > 1 else s
            for s, n in zip(names, nodeids, strict=True)
        ]
    seen = Counter(names)
    return [s if seen[s] == 1 else n for s, n in zip(names, nodeids, strict=True)]


# What is cut, in order, and how short each part may get: the parametrize id first (its middle,
# so its start and end still tell ids apart), then the directories (the nearest kept), the file
# name, the parametrize id again and, last, the test's own name.
_CUTS = (("param", 16), ("dirs", 2), ("file", 12), ("param", 8), ("name", 12))


def shorten(nodeid: str, width: int, *, head: float = 0.5) -> str:
    """A node id cut to `width` characters so that the test stays readable (pytest's own cut
    from the left loses the test's name): `…/test_chat.py::test_answer[gpt-4o-mi…ools-b]`;
    `head` is the share of a cut parametrize id kept from its start."""
    if len(nodeid) <= width:
        return nodeid
    path, sep, rest = nodeid.partition("::")
    if not sep:  # not a test id
        return _middle(nodeid, width)
    name, bracket, param = rest.partition("[")
    close = "]" if param.endswith("]") else ""
    directory, slash, file = path.rpartition("/")
    inner = param[: len(param) - len(close)]
    parts = {"dirs": directory + slash, "file": file, "name": name, "param": inner}
    fixed = len(sep) + len(bracket) + len(close)
    for key, shortest in _CUTS:
        over = fixed + sum(map(len, parts.values())) - width
        if over <= 0:
            break
        text = parts[key]
        target = max(shortest, len(text) - over)
        if target < len(text):
            cut = _drop_dirs(text, target) if key == "dirs" else None
            parts[key] = cut or _middle(text, target, head=head if key == "param" else 0.5)
    text = parts["dirs"] + parts["file"] + sep + parts["name"] + bracket + parts["param"] + close
    return text if len(text) <= width else _middle(text, width)


def _drop_dirs(dirs: str, width: int) -> str:
    """`a/b/c/` as `…/c/`: the directories nearest the file kept, as many as fit `width`."""
    kept = dirs.rstrip("/").split("/")
    while kept and len("…/" + "/".join(kept) + "/") > width:
        kept.pop(0)
    return "…/" + "".join(d + "/" for d in kept)


def _middle(text: str, width: int, *, head: float = 0.5) -> str:
    """`text` with its middle replaced by "…" to fit `width`: its start and its end stay
    (`head` of what is kept from the start)."""
    if len(text) <= width:
        return text
    keep = max(width - 1, 2)
    start = min(keep - 1, max(1, round(keep * head)))
    return text[:start] + "…" + text[len(text) - (keep - start) :]
