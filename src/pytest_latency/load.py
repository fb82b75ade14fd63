"""The load shape of a test: how many of its samples run at once, and when each one starts.

Owns `Load` (concurrency, an open-loop rate, its arrival process and burstiness, the seed of its
schedule), the reading and validation of those values wherever they are written (the `latency`
marker, budgets.toml's `[defaults]` and `[[budget]]` tables: a bad value is a `LoadError` the
caller prefixes with where it came from), and `Schedule`, the intended starts an open-loop rate
gives: gamma-distributed gaps of mean 1/rate and shape `burstiness` (vLLM `bench serve
--burstiness`: 1 is a Poisson process, below 1 burstier, above 1 steadier), or equal gaps for
`arrival="constant"`. The gaps come from a seeded `random.Random` (stdlib: a schedule of a few
thousand gaps needs nothing more), so a run repeats its schedule. And the arithmetic of a shape
split across pytest-xdist workers (`Shard`, `Load.share`, `joined`): each shard's part of the
samples, the concurrency and the rate, and the whole again from the parts. A leaf: stdlib only,
imports nothing from the package.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import NamedTuple

ARRIVALS = ("poisson", "constant")
# A thread per sample in flight for sync tests: thousands of threads would measure the client's
# own scheduling, not the server (docs/load.md, "How far one process goes").
MAX_CONCURRENCY = 1024
# The keys that make a load shape, in the order the docs and errors list them.
LOAD_KEYS = ("concurrency", "rate", "arrival", "burstiness", "seed")

_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*/\s*(s|sec|min|m)\s*")
_PER_SECOND = {"s": 1.0, "sec": 1.0, "min": 1 / 60, "m": 1 / 60}


class LoadError(ValueError):
    """A load value that cannot be run; the message says which and why, the caller says where."""


class Load(NamedTuple):
    """How a test's samples are started. `rate` None is closed loop: each of `concurrency`
    workers starts its next sample when its last one ended (the default, one worker, is the
    plugin's sequential loop). With a rate the loop is open: samples start on `Schedule`
    whether or not earlier ones finished, at most `concurrency` at once when it is given (a
    start that waits for a free slot waits in `queue`), unbounded when it is not."""

    concurrency: int | None = None
    rate: float | None = None  # samples per second
    arrival: str = "poisson"
    burstiness: float = 1.0
    seed: int = 0

    @property
    def open_loop(self) -> bool:
        return self.rate is not None

    @property
    def sequential(self) -> bool:
        """One sample at a time, closed loop: the plugin's plain loop, no load machinery."""
        return self.rate is None and (self.concurrency or 1) == 1

    @property
    def slots(self) -> int | None:
        """How many samples may be in flight at once; None: no cap (an uncapped open loop)."""
        if self.concurrency is not None:
            return self.concurrency
        return None if self.open_loop else 1

    def share(self, shard: Shard) -> Load:
        """This shape's part on one shard: its part of the concurrency (`Shard.part`) and of
        the rate, on a seed of its own (the shards' Poisson schedules must not coincide)."""
        return self._replace(
            concurrency=None if self.concurrency is None else shard.part(self.concurrency),
            rate=None if self.rate is None else self.rate / shard.count,
            seed=self.seed + shard.index,
        )

    def phase_s(self, shard: Shard) -> float:
        """When a shard's schedule starts after the first shard's, in seconds: one mean gap of
        the whole rate per shard before it. Constant arrivals then interleave (each shard's
        starts fall between the others', as one schedule of the whole rate would place them);
        Poisson ones, whose seeds differ, do not all start with a burst of one per shard."""
        if self.rate is None:
            return 0.0
        # Read on the shard's part: its rate times the count is the whole rate.
        return shard.index / (self.rate * shard.count)

    def describe(self) -> str:
        """The shape in one phrase, as the outputs name it."""
        parts = []
        if self.rate is not None:
            parts.append(f"{format_rate(self.rate)} {self.arrival}")
            if self.burstiness != 1.0:
                parts.append(f"burstiness {self.burstiness:g}")
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        return ", ".join(parts) or "sequential"


@dataclass(frozen=True)
class Shard:
    """One of the `count` parts a test's load is split into across pytest-xdist workers
    (`split=True`), `index` from 0."""

    index: int
    count: int

    @property
    def id(self) -> str:
        """The shard's part of the test id: `shard=1/2`."""
        return f"shard={self.index + 1}/{self.count}"

    def part(self, total: int) -> int:
        """This shard's part of `total` (samples, a concurrency): the parts differ by at most
        one and add up to `total` (the first shards take the remainder)."""
        return total // self.count + (self.index < total % self.count)


def joined(parts: list[Load]) -> Load:
    """The whole shape of the shards' parts (`Load.share`): their concurrencies and rates
    added up, on the first shard's seed (the shape as it was written)."""
    first = parts[0]
    concurrency = [p.concurrency for p in parts]
    rates = [p.rate for p in parts]
    # The parts of a rate are its 1/count: their sum, to 12 digits, is the rate as written.
    return first._replace(
        concurrency=None if None in concurrency else sum(c for c in concurrency if c),
        rate=None if None in rates else float(f"{math.fsum(r for r in rates if r):.12g}"),
    )


def format_rate(rate: float) -> str:
    return f"{rate:g}/s" if rate >= 1 else f"{rate * 60:g}/min"


def concurrency_of(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LoadError(f"concurrency={value!r} must be an integer >= 1")
    if value > MAX_CONCURRENCY:
        raise LoadError(f"concurrency={value} is over the limit of {MAX_CONCURRENCY}")
    return value


def rate_of(value: object) -> float:
    """Samples per second from `"20/s"`, `"90/min"` or a bare number (per second)."""
    if isinstance(value, bool):
        raise LoadError(f"rate={value!r} must be a rate such as '20/s' or '90/min'")
    if isinstance(value, int | float):
        per_second = float(value)
    elif isinstance(value, str) and (match := _RATE.fullmatch(value)):
        per_second = float(match.group(1)) * _PER_SECOND[match.group(2)]
    else:
        raise LoadError(f"rate={value!r} must be a rate such as '20/s' or '90/min'")
    if not math.isfinite(per_second) or per_second <= 0:
        raise LoadError(f"rate={value!r} must be a positive, finite rate")
    return per_second


def arrival_of(value: object) -> str:
    if value not in ARRIVALS:
        raise LoadError(f"arrival={value!r} must be one of {', '.join(map(repr, ARRIVALS))}")
    return str(value)


def burstiness_of(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LoadError(f"burstiness={value!r} must be a positive number")
    if not math.isfinite(value) or value <= 0:
        raise LoadError(f"burstiness={value!r} must be a positive, finite number")
    return float(value)


def seed_of(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LoadError(f"seed={value!r} must be an integer")
    return value


_READERS = {
    "concurrency": concurrency_of,
    "rate": rate_of,
    "arrival": arrival_of,
    "burstiness": burstiness_of,
    "seed": seed_of,
}


def read_value(key: str, value: object) -> object:
    """One load key's value, checked (`LoadError` naming the key otherwise)."""
    return _READERS[key](value)


def load_of(values: dict[str, object]) -> Load:
    """A load shape of checked values (`read_value`), keys as `LOAD_KEYS`; checks that they
    fit together."""
    load = Load(**values)  # type: ignore[arg-type]
    if load.rate is None:
        given = [k for k in ("arrival", "burstiness") if k in values]
        if given:
            verb = "need" if len(given) > 1 else "needs"
            raise LoadError(f"{' and '.join(given)} {verb} a rate (an open loop), e.g. rate='20/s'")
    if load.arrival == "constant" and load.burstiness != 1.0:
        raise LoadError("burstiness shapes poisson arrivals; constant arrivals have none")
    return load


class Schedule:
    """The intended starts of an open loop, as offsets in seconds from its first one (at 0).
    The gaps continue across `next_offsets` calls (a sequential-sampling look draws more
    samples on the same schedule's gaps, from a fresh start: the look itself is no sample)."""

    def __init__(self, load: Load) -> None:
        assert load.rate is not None
        self._load = load
        self._random = random.Random(load.seed)

    def gap(self) -> float:
        load = self._load
        assert load.rate is not None
        if load.arrival == "constant":
            return 1.0 / load.rate
        # Gamma of shape k and scale 1/(rate·k): mean 1/rate, coefficient of variation 1/√k.
        return self._random.gammavariate(load.burstiness, 1.0 / (load.rate * load.burstiness))

    def next_offsets(self, count: int) -> list[float]:
        """`count` intended starts: the first at 0, each later one a gap after the last."""
        offsets: list[float] = []
        at = 0.0
        for index in range(count):
            if index:
                at += self.gap()
            offsets.append(at)
        return offsets


__all__ = [
    "ARRIVALS",
    "LOAD_KEYS",
    "MAX_CONCURRENCY",
    "Load",
    "LoadError",
    "Schedule",
    "Shard",
    "format_rate",
    "joined",
    "load_of",
    "read_value",
]
