"""What a call costs: its normalised usage priced in US dollars.

Owns the price of one call (`Prices.stamp`): input, output (reasoning included: `output_tokens`
counts every generated token), cache reads and writes (the 1-hour cache's writes apart from the
5-minute one's) and the service tier the response named; what its cache reads saved and its
cache writes cost extra against the same usage priced as plain input; which table priced it
(`price_source`); and the stamp of that table in the result file (`price_table`).

The table is genai-prices' current data snapshot (pydantic's maintained price table: the bundled
one, unless code under test started genai-prices' `UpdatePrices` or set a snapshot of its own),
read through its own `DataSnapshot.calc`/`ModelPrice.calc_price`, so tiered prices (Anthropic's
over 200k tokens), cache multipliers and tier variants are the table's, not ours. The plugin never
starts the updater: no network at run time. Which snapshot priced the calls is stamped as it was
(`PriceTable.snapshot`), and a snapshot replaced mid-run prices the calls after it (lookups are
cached per snapshot). A budgets.toml `[prices."<model>"]` (`budgets.PriceOverride`) wins over the
table for calls whose response names that model. genai_prices (with pydantic) takes ~0.7 s to
import, so it is imported on the first call priced, never when the plugin loads.

May import the stdlib, `metrics` (`CallMetrics`), `budgets` (`PriceOverride`), `catalogue` (the
`price_source` words) and genai_prices (lazily); never pytest. See docs/metrics.md, "Cost".
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from pytest_latency.budgets import PriceOverride
from pytest_latency.catalogue import NO_PRICE, NO_USAGE, PRICED_BY_OVERRIDE, PRICED_BY_TABLE
from pytest_latency.metrics import CallMetrics

if TYPE_CHECKING:
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelPrice, PriceContext

TABLE: Final = PRICED_BY_TABLE
OVERRIDE: Final = PRICED_BY_OVERRIDE

# Which provider's prices apply: the host's, for a provider's own API; for any other host (the
# simulator, a proxy, a self-hosted server on loopback) the wire API's maker. genai-prices
# matches `provider_api_url` against each provider's API URL pattern.
_API_PROVIDERS: Final = {"anthropic": "anthropic", "openai": "openai", "gemini": "google"}


@dataclass(frozen=True, slots=True)
class CallCost:
    """One call's price, in micro-US-dollars (µ$, as `catalogue.Dimension.MONEY` stores it)."""

    cost: float
    cache_saved: float  # what its cache reads saved against pricing them as plain input
    cache_extra: float  # what its cache writes cost over plain input
    source: str  # TABLE or OVERRIDE


# Which genai-prices data snapshot priced a call (`snapshot_kind`).
BUNDLED: Final = "bundled"  # the table shipped in the installed package
AUTO_UPDATE: Final = "auto-update"  # fetched by genai-prices' UpdatePrices (started by user code)
CUSTOM: Final = "custom"  # set by user code through genai_prices.data_snapshot.set_custom_snapshot


@dataclass(frozen=True, slots=True)
class PriceTable:
    """What priced the run, for the result file's `run.prices`: `snapshot` names the genai-prices
    snapshot(s) used in order of first use, joined by "+" ("bundled", "auto-update",
    "bundled+auto-update" when the updater replaced the table mid-run); `fetched` the time the
    latest auto-updated one was fetched (ISO 8601), else None."""

    source: str
    version: str | None
    snapshot: str
    fetched: str | None
    overrides: Mapping[str, str]  # model → budgets.toml:LINE

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "version": self.version,
            "snapshot": self.snapshot,
            "fetched": self.fetched,
            "overrides": dict(self.overrides),
        }


class Prices:
    """Prices calls: budgets.toml's overrides first, then genai-prices' current snapshot (its
    bundled table unless user code replaced it), remembering which snapshots it used.

    Results are kept per (model, provider, tier, usage): a suite repeats the same usage often,
    and one genai-prices lookup costs ~0.5 ms."""

    def __init__(self, overrides: Iterable[PriceOverride] = ()) -> None:
        self.overrides = {o.model: o for o in overrides}
        # The snapshots that priced calls, in order of first use: kind → fetched (ISO) or None.
        self._snapshots: dict[str, str | None] = {}

    def stamp(self, metrics: CallMetrics) -> CallMetrics:
        """`metrics` with its `cost` fields set (or left absent, with `price_source` saying
        why). An attempt that failed before any usage is not priced (a 429 costs nothing)."""
        if metrics.error is not None and metrics.output_tokens is None:
            return metrics
        if metrics.input_tokens is None or metrics.output_tokens is None or not metrics.model:
            return dataclasses.replace(metrics, price_source=NO_USAGE)
        price = self.price(metrics)
        if price is None:
            return dataclasses.replace(metrics, price_source=NO_PRICE)
        return dataclasses.replace(
            metrics,
            cost=price.cost,
            cost_cache_saved=price.cache_saved,
            cost_cache_extra=price.cache_extra,
            price_source=price.source,
        )

    def price(self, metrics: CallMetrics) -> CallCost | None:
        assert metrics.model is not None
        usage = _usage_key(metrics)
        override = self.overrides.get(metrics.model)
        if override is not None:
            return _priced(_override_price(override), usage, OVERRIDE)
        key = _snapshot_key()
        self.saw({_SNAPSHOTS[key][1]: _SNAPSHOTS[key][2]})
        return _table_price(metrics.model, _provider(metrics), _tier(metrics), usage, key)

    def saw(self, snapshots: Mapping[str, str | None]) -> None:
        """Count `snapshots` (kind → fetched) as used: this process's lookups, or what a
        pytest-xdist worker's calls were priced with (`snapshots_used`)."""
        for kind, fetched in snapshots.items():
            if kind not in self._snapshots or (fetched or "") > (self._snapshots[kind] or ""):
                self._snapshots[kind] = fetched

    def snapshots_used(self) -> dict[str, str | None]:
        return dict(self._snapshots)

    def table(self) -> PriceTable:
        """The stamp of what priced this run's calls: the snapshots used, or (none used) the one
        that would have priced them."""
        used = self._snapshots or _current_snapshot()
        fetched = [f for f in used.values() if f is not None]
        return PriceTable(
            TABLE,
            _table_version(),
            "+".join(used),
            max(fetched) if fetched else None,
            {model: o.source for model, o in self.overrides.items()},
        )


# Every genai-prices snapshot this process priced with, by `id`, kept alive (so no id is reused):
# (the snapshot, its kind, when it was fetched). Lookups are cached per snapshot key, so calls
# after the table changed are priced by the new one. A handful at most: the updater fetches hourly.
_SNAPSHOTS: dict[int, tuple[DataSnapshot, str, str | None]] = {}


def _snapshot_key() -> int:
    """The key of the snapshot genai-prices prices with now (`data_snapshot.get_snapshot`)."""
    from genai_prices.data_snapshot import get_snapshot

    snapshot = get_snapshot()
    key = id(snapshot)
    if key not in _SNAPSHOTS:
        kind = snapshot_kind(snapshot)
        fetched = snapshot.timestamp.isoformat(timespec="seconds") if kind == AUTO_UPDATE else None
        _SNAPSHOTS[key] = (snapshot, kind, fetched)
    return key


def snapshot_kind(snapshot: DataSnapshot) -> str:
    """BUNDLED, AUTO_UPDATE or CUSTOM: what genai-prices itself says of `snapshot`
    (`from_auto_update`), and whether its providers are the package's own (`genai_prices.data`)."""
    if snapshot.from_auto_update:
        return AUTO_UPDATE
    from genai_prices import data

    return BUNDLED if snapshot.providers is data.providers else CUSTOM


def _current_snapshot() -> dict[str, str | None]:
    """The snapshot that would price a call now. genai-prices not imported: nobody can have
    replaced its bundled table, and importing it (~0.2 s) to say so would be waste."""
    if "genai_prices" not in sys.modules:
        return {BUNDLED: None}
    _, kind, fetched = _SNAPSHOTS[_snapshot_key()]
    return {kind: fetched}


# (input incl. cached, output, cache read, cache write incl. 1-hour, 1-hour cache write)
_Usage = tuple[int, int, int, int, int]


def _usage_key(m: CallMetrics) -> _Usage:
    return (
        m.input_tokens or 0,
        m.output_tokens or 0,
        m.cache_read_tokens or 0,
        m.cache_write_tokens or 0,
        m.cache_write_1h_tokens or 0,
    )


def _provider(m: CallMetrics) -> tuple[str, str]:
    """("api_url", url) for a provider's own host, else ("id", the wire API's maker)."""
    host = (m.host or "").rsplit(":", 1)[0].strip("[]")
    if host and host != "localhost" and "." in host and not _is_address(host):
        return "api_url", f"https://{host}"
    return "id", _API_PROVIDERS.get(m.api.split(".", 1)[0], "openai")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


# Tiers that mean the provider's standard price: the table's base price applies. OpenAI names
# "auto" where a stream ended before saying which tier served it (and OpenRouter in its last
# event); Anthropic says "standard".
_STANDARD_TIERS: Final = frozenset({"auto", "default", "standard"})


def _tier(m: CallMetrics) -> str | None:
    tier = m.service_tier
    return None if tier is None or tier in _STANDARD_TIERS else tier


@functools.lru_cache(maxsize=4096)
def _table_price(
    model: str, provider: tuple[str, str], tier: str | None, usage: _Usage, snapshot: int
) -> CallCost | None:
    model_price = _table_model_price(model, provider, tier, snapshot)
    return None if model_price is None else _priced(model_price, usage, TABLE)


@functools.lru_cache(maxsize=256)
def _table_model_price(
    model: str, provider: tuple[str, str], tier: str | None, snapshot: int
) -> ModelPrice | None:
    """The price of `model` at `provider` and `tier` in the snapshot keyed `snapshot`, or None
    when it has none (looked up once per model: a failed lookup walks the whole table)."""
    from genai_prices import Usage

    table = _SNAPSHOTS[snapshot][0]
    context: PriceContext | None = {"service_tier": tier} if tier else None
    kind, value = provider
    try:
        if kind == "api_url":
            try:
                found = table.calc(Usage(), model, None, value, None, context)
            except LookupError:  # a host the table does not know: match by the model alone
                found = table.calc(Usage(), model, None, None, None, context)
        else:
            found = table.calc(Usage(), model, value, None, None, context)
    except LookupError:
        return None
    return found.model_price


def _override_price(override: PriceOverride) -> ModelPrice:
    from genai_prices.types import ModelPrice

    read = override.input if override.cache_read is None else override.cache_read
    write = override.input if override.cache_write is None else override.cache_write
    write_1h = write if override.cache_write_1h is None else override.cache_write_1h
    return ModelPrice(
        input_mtok=Decimal(str(override.input)),
        output_mtok=Decimal(str(override.output)),
        cache_read_mtok=Decimal(str(read)),
        cache_write_mtok=Decimal(str(write)),
        cache_write_1h_mtok=Decimal(str(write_1h)),
    )


def _priced(model_price: ModelPrice, usage: _Usage, source: str) -> CallCost:
    """The call's price, and the same usage with its cache reads, then its cache writes, priced
    as plain input: the differences are what the cache saved and what writing it cost extra."""
    total, output, read, write, write_1h = usage
    cost = _total(model_price, total, output, read, write, write_1h)
    uncached_reads = _total(model_price, total, output, 0, write, write_1h) if read else cost
    unwritten = _total(model_price, total, output, read, 0, 0) if write else cost
    return CallCost(cost, uncached_reads - cost, cost - unwritten, source)


def _total(
    model_price: ModelPrice, total: int, output: int, read: int, write: int, write_1h: int
) -> float:
    """µ$ for the usage, by the table's own arithmetic (its tiers and cache prices)."""
    from genai_prices import Usage

    usage = Usage(
        input_tokens=total,
        output_tokens=output,
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_5m_tokens=write - write_1h,
        cache_write_1h_tokens=write_1h,
    )
    return float(model_price.calc_price(usage)["total_price"] * 1_000_000)


def warm() -> None:
    """Load the price table now: its import (~0.7 s) and first lookup (~80 ms) would otherwise
    land in the first look between samples, where an async test's loop-lag monitor still
    watches the calls closing and flagged them `client_saturated` (lag 100-1,100 ms in the
    examples' agent test). The plugin warms it with the SDKs, before the first measured call."""
    _table_model_price("gpt-4o", ("id", "openai"), None, _snapshot_key())


def _table_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("genai-prices")
    except PackageNotFoundError:
        return None
