"""What a run spent, as every summary reads it.

Owns the text of a cost cell (a test's or a group's Σ cost), of a cache-savings cell (what
prompt caching saved it, net of what its writes cost extra) and of the spend line under each
summary (the total, what prompt caching saved and what its writes cost extra, the models without
a price) for the terminal, the Markdown summary and the HTML report alike, from one
`pools.CostTotals` (a test's pool, or a result file's `cost` block read back by
`results.cost_of_block`); and of the price stamp's text (`price_text`, `price_line`: what priced
the run, from `run.prices`). May import `units` and `pools` (the type); never pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_latency import units

if TYPE_CHECKING:
    from pytest_latency.pools import CostTotals

HEADER = "cost"
SAVED_HEADER = "cache saved"
PRICES = "prices"


def cost_cell(totals: CostTotals) -> str:
    """`$0.0123`; `$0.0123+?` when some calls had no price (the sum is a floor); `?` when none
    did; `–` when nothing reported usage."""
    return _cell(totals, totals.cost)


def saved_cell(totals: CostTotals) -> str:
    """What prompt caching saved the priced calls, net of what its writes cost extra:
    `$0.00350`, `-$0.000500` when the writes outweighed the reads, `$0` when no priced call read
    or wrote the cache; `+?`, `?` and `–` as in `cost_cell`."""
    return _cell(totals, totals.net_saved)


def _cell(totals: CostTotals, value: float) -> str:
    unpriced = sum(totals.unpriced.values())
    if not totals.priced:
        return "?" if unpriced else units.ABSENT
    text = units.money(value)
    return f"{text}+?" if unpriced else text


def price_text(stamp: Mapping[str, Any] | None) -> str | None:
    """What priced the run (`run.prices`): `genai-prices 0.2.3 (bundled snapshot); overrides:
    my-llama (budgets.toml:3)`, with when an auto-updated snapshot was fetched; None for a file
    written before prices were stamped."""
    if not isinstance(stamp, Mapping):
        return None
    text = f"{stamp.get('source', '?')} {stamp.get('version') or ''}".strip()
    fetched = f" fetched {stamp['fetched']}" if stamp.get("fetched") else ""
    text += f" ({stamp.get('snapshot', '?')} snapshot{fetched})"
    overrides = stamp.get("overrides") or {}
    if overrides:
        text += "; overrides: " + ", ".join(
            f"{model} ({where})" for model, where in overrides.items()
        )
    return text


def price_line(stamp: Mapping[str, Any] | None) -> str | None:
    """`prices: ` and `price_text`, the line under the spend line."""
    text = price_text(stamp)
    return None if text is None else f"{PRICES}: {text}"


def spend_line(totals: CostTotals, *, label: bool = True) -> str | None:
    """`cost: $0.0123 over 40 priced calls; prompt caching saved $0.0040 on reads and cost
    $0.0005 extra on writes: net $0.0035; no price: 'my-model' (3 calls)` (without `cost: `
    when not `label`: the HTML report's statement says it), or None when no call reported
    usage."""
    unpriced = totals.unpriced
    if not totals.priced and not unpriced:
        return None
    head = f"{HEADER}: " if label else ""
    if totals.priced:
        parts = [f"{head}{units.money(totals.cost)} over {totals.priced} priced calls"]
    else:
        parts = [f"{head}unknown"]
    if totals.cache_saved and totals.cache_extra:
        parts.append(
            f"prompt caching saved {units.money(totals.cache_saved)} on reads and cost "
            f"{units.money(totals.cache_extra)} extra on writes: net "
            f"{units.money(totals.net_saved)}"
        )
    elif totals.cache_saved:
        parts.append(f"prompt caching saved {units.money(totals.cache_saved)} on reads")
    elif totals.cache_extra:
        parts.append(
            f"cache writes cost {units.money(totals.cache_extra)} extra, and no read saved any"
        )
    if unpriced:
        parts.append(f"no price: {units.calls_by_model(unpriced)}")
    return "; ".join(parts)
