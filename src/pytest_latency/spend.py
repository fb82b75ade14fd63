"""What a run spent, as every summary reads it.

Owns the text of a cost cell (a test's or a group's Σ cost) and of the spend line under each
summary (the total, what prompt caching saved and what its writes cost extra, the models without
a price) for the terminal, the Markdown summary and the HTML report alike, from one
`pools.CostTotals` (a test's pool, or a result file's `cost` block read back by
`results.cost_of_block`). May import `units` and `pools` (the type); never pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_latency import units

if TYPE_CHECKING:
    from pytest_latency.pools import CostTotals

HEADER = "cost"


def cost_cell(totals: CostTotals) -> str:
    """`$0.0123`; `$0.0123+?` when some calls had no price (the sum is a floor); `?` when none
    did; `–` when nothing reported usage."""
    unpriced = sum(totals.unpriced.values())
    if not totals.priced:
        return "?" if unpriced else units.ABSENT
    text = units.money(totals.cost)
    return f"{text}+?" if unpriced else text


def spend_line(totals: CostTotals) -> str | None:
    """`cost: $0.0123 over 40 priced calls; prompt caching saved $0.0040 on reads and cost
    $0.0005 extra on writes: net $0.0035; no price: 'my-model' (3 calls)`, or None when no
    call reported usage."""
    unpriced = totals.unpriced
    if not totals.priced and not unpriced:
        return None
    if totals.priced:
        parts = [f"cost: {units.money(totals.cost)} over {totals.priced} priced calls"]
    else:
        parts = ["cost: unknown"]
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
        names = ", ".join(f"{model!r} ({n} calls)" for model, n in unpriced.items())
        parts.append(f"no price: {names}")
    return "; ".join(parts)
