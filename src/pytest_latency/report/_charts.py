"""Chart geometry for the HTML report: numbers in, SVG coordinates out.

Owns the four chart kinds (HDR-style percentile distribution on a log 1/(1−q) axis, a
log-binned histogram, a scatter with a fitted line, a per-sample call timeline) as frozen view
models the template draws with loops: coordinates, tick labels and tooltips, never markup. Every
chart's size is bounded (point counts are capped here), so the report does not grow with the
number of samples, and compact: coordinates are whole pixels, curves have at most 60 points, and a
mark repeats no tooltip (a call's wait and stream bars share one). Stdlib only, plus the sibling
`_format`; never jinja2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_latency import units as fmt

WIDTH = 600
HEIGHT = 230
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 12, 36
MAX_DOTS = 150
Label = Callable[[float], str]
MAX_CURVE_POINTS = 60


@dataclass(frozen=True, slots=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True, slots=True)
class Polyline:
    points: str  # "x,y x,y ..." (numbers only)
    css: str
    label: str


@dataclass(frozen=True, slots=True)
class Dot:
    x: float
    y: float
    css: str
    title: str


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    w: float
    h: float
    css: str
    title: str


@dataclass(frozen=True, slots=True)
class Segment:
    x1: float
    y1: float
    x2: float
    y2: float
    css: str
    title: str


@dataclass(frozen=True, slots=True)
class LegendEntry:
    css: str
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    x_label: str
    y_label: str
    x_ticks: tuple[Tick, ...] = ()
    y_ticks: tuple[Tick, ...] = ()
    lines: tuple[Polyline, ...] = ()
    dots: tuple[Dot, ...] = ()
    bars: tuple[Bar, ...] = ()
    segments: tuple[Segment, ...] = ()
    legend: tuple[LegendEntry, ...] = ()
    note: str = ""
    y_grid: bool = True  # horizontal grid lines at the y ticks (not for timeline lanes)
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def left(self) -> int:
        return LEFT

    @property
    def right(self) -> int:
        return self.width - RIGHT

    @property
    def top(self) -> int:
        return TOP

    @property
    def bottom(self) -> int:
        return self.height - BOTTOM

    @property
    def marks(self) -> int:
        return len(self.lines) + len(self.dots) + len(self.bars) + len(self.segments)


@dataclass(frozen=True, slots=True)
class _Scale:
    lo: float
    hi: float
    a: float  # pixel at lo
    b: float  # pixel at hi
    log: bool

    def __call__(self, v: float) -> float:
        if self.log:
            v, lo, hi = math.log10(max(v, 1e-9)), math.log10(self.lo), math.log10(self.hi)
        else:
            lo, hi = self.lo, self.hi
        t = 0.0 if hi == lo else (v - lo) / (hi - lo)
        return round(self.a + t * (self.b - self.a))  # whole pixels: a third of the bytes


def _nice_step(span: float, target: int = 5) -> float:
    raw = span / max(target, 1)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def _linear_ticks(lo: float, hi: float, label: Label) -> tuple[float, float, list[Tick]]:
    """A 'nice' linear range covering [lo, hi] and its ticks (value positions, not pixels)."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    step = _nice_step(hi - lo)
    start = math.floor(lo / step) * step
    end = math.ceil(hi / step) * step
    ticks = []
    v = start
    while v <= end + step / 2:
        ticks.append(Tick(v, label(v)))
        v += step
    return start, end, ticks


def _log_ticks(lo: float, hi: float, label: Label) -> tuple[float, float, list[Tick]]:
    lo = max(lo, 1e-3)
    hi = max(hi, lo * 1.5)
    start = 10 ** math.floor(math.log10(lo))
    end = 10 ** math.ceil(math.log10(hi))
    ticks = []
    decade = start
    while decade <= end * 1.0001:
        for m in (1, 2, 5):
            v = decade * m
            if start <= v <= end * 1.0001:
                ticks.append(Tick(v, label(v)))
        decade *= 10
    # Tighten to the data so a narrow distribution does not sit in one pixel row.
    lo_edge = max(t.pos for t in ticks if t.pos <= lo)
    hi_edge = min(t.pos for t in ticks if t.pos >= hi)
    kept = [t for t in ticks if lo_edge <= t.pos <= hi_edge]
    if len(kept) > 7:
        kept = [t for t in kept if _mantissa(t.pos) in (1, 5)]
    if len(kept) > 7:
        kept = [t for t in kept if _mantissa(t.pos) == 1]
    return lo_edge, hi_edge, kept


def _mantissa(v: float) -> int:
    return round(v / 10.0 ** math.floor(math.log10(v)))


def _pixel_ticks(ticks: Sequence[Tick], scale: _Scale) -> tuple[Tick, ...]:
    return tuple(Tick(scale(t.pos), t.label) for t in ticks)


# ---- percentile distribution (HDR style) --------------------------------------------------------

# x positions are 1/(1−q): 50% → 2, 90% → 10, 99% → 100, 99.9% → 1000.
_PCT_TICKS = ((0.0, "0%"), (50.0, "50%"), (90.0, "90%"), (99.0, "99%"), (99.9, "99.9%"))
_SERIES_CSS = {"ttft": "s-ttft", "tpot": "s-tpot", "e2e": "s-e2e", "itl": "s-itl", "ttfb": "s-ttfb"}
# The series colours in order, for a chart whose lines are not metrics (goodput per budget).
SERIES_COLOURS: tuple[str, ...] = tuple(_SERIES_CSS)


@dataclass(frozen=True, slots=True)
class Curve:
    """One metric's distribution as (percentile 0..100, value µs) points, ascending, the last
    one being the maximum (drawn at the right edge)."""

    metric: str
    points: tuple[tuple[float, float], ...]


def _x_of_percentile(p: float, x_max: float) -> float:
    return min(1.0 / max(1.0 - p / 100.0, 1e-9), x_max)


def percentile_chart(title: str, curves: Sequence[Curve], *, x_max: float = 1000.0) -> Chart:
    """HDR-style: value (log) against 1/(1−q) (log), so the tail gets as much room as the body."""
    curves = [c for c in curves if c.points]
    if not curves:
        return Chart(title, "percentile", "latency", note="no timed calls")
    values = [v for c in curves for _, v in c.points]
    y_lo, y_hi, y_ticks = _log_ticks(max(min(values), 1.0), max(max(values), 2.0), fmt.duration)
    xs = _Scale(1.0, x_max, LEFT, WIDTH - RIGHT, log=True)
    ys = _Scale(y_lo, y_hi, HEIGHT - BOTTOM, TOP, log=True)
    x_ticks = [Tick(_x_of_percentile(p, x_max), label) for p, label in _PCT_TICKS]
    x_ticks = [t for t in x_ticks if t.pos < x_max] + [Tick(x_max, "max")]
    lines = []
    dots = []
    for curve in curves:
        pts = []
        for i, (p, v) in enumerate(curve.points):
            last = i == len(curve.points) - 1
            x = xs(x_max if last else _x_of_percentile(p, x_max))
            y = ys(max(v, 1.0))
            pts.append(f"{x},{y}")
            if len(curve.points) <= 12:
                name = "max" if last else f"p{p:g}"
                dots.append(
                    Dot(
                        x,
                        y,
                        _SERIES_CSS.get(curve.metric, ""),
                        f"{curve.metric} {name} = {fmt.duration(v)}",
                    )
                )
        lines.append(Polyline(" ".join(pts), _SERIES_CSS.get(curve.metric, ""), curve.metric))
    return Chart(
        title,
        "percentile (log scale of 1/(1−q))",
        "latency",
        x_ticks=_pixel_ticks(x_ticks, xs),
        y_ticks=_pixel_ticks(y_ticks, ys),
        lines=tuple(lines),
        dots=tuple(dots),
        legend=tuple(LegendEntry(_SERIES_CSS.get(c.metric, ""), c.metric) for c in curves),
    )


def curve_from_buckets(metric: str, buckets: Sequence[tuple[float, int]]) -> Curve:
    """An HDR histogram's buckets as a percentile curve, thinned to log-spaced 1/(1−q) steps."""
    total = sum(c for _, c in buckets)
    if not total:
        return Curve(metric, ())
    points: list[tuple[float, float]] = [(0.0, buckets[0][0])]
    seen = 0
    last_x = 1.0
    for value, count in buckets:
        seen += count
        p = 100.0 * seen / total
        x = 1.0 / max(1.0 - p / 100.0, 1e-9)
        if seen == total or x >= last_x * 1.22:  # <= 60 points across the five decades to p99.999
            points.append((min(p, 99.999), value))
            last_x = x
    points[-1] = (100.0, buckets[-1][0])
    return Curve(metric, tuple(points[: MAX_CURVE_POINTS - 1] + points[-1:]))


# ---- histogram of a distribution ----------------------------------------------------------------


def histogram_chart(title: str, buckets: Sequence[tuple[float, int]], bins: int = 28) -> Chart:
    """Counts in log-spaced bins between the smallest and largest value (chunk gaps span
    decades: sub-millisecond bursts and multi-second tool-call pauses)."""
    if not buckets:
        return Chart(title, "gap", "chunks", note="no inter-chunk gaps (non-streaming calls?)")
    lo = max(buckets[0][0], 1.0)
    hi = max(buckets[-1][0], lo * 1.01)
    edges = [lo * (hi / lo) ** (i / bins) for i in range(bins + 1)]
    counts = [0] * bins
    for value, count in buckets:
        v = max(value, 1.0)
        index = min(bins - 1, max(0, int(bins * math.log(v / lo) / math.log(hi / lo))))
        counts[index] += count
    x_lo, x_hi, x_ticks = _log_ticks(lo, hi, fmt.duration)
    xs = _Scale(x_lo, x_hi, LEFT, WIDTH - RIGHT, log=True)
    top = max(counts)
    y_lo, y_hi, y_ticks = _linear_ticks(0, top, lambda v: f"{v:.0f}")
    ys = _Scale(y_lo, y_hi, HEIGHT - BOTTOM, TOP, log=False)
    bars = []
    for i, count in enumerate(counts):
        if not count:
            continue
        x1, x2 = xs(edges[i]), xs(edges[i + 1])
        y = ys(count)
        bars.append(
            Bar(
                x1,
                y,
                max(round(x2 - x1 - 1), 1),
                round(HEIGHT - BOTTOM - y),
                "s-itl",
                f"{fmt.duration(edges[i])} – {fmt.duration(edges[i + 1])}: {count}",
            )
        )
    return Chart(
        title,
        "gap between content chunks (log)",
        "chunks",
        x_ticks=_pixel_ticks(x_ticks, xs),
        y_ticks=_pixel_ticks([t for t in y_ticks if float(t.label) == int(float(t.label))], ys),
        bars=tuple(bars),
    )


# ---- TTFT against uncached input tokens ---------------------------------------------------------


def prefill_chart(
    title: str,
    points: Sequence[Sequence[float | bool]],
    slope: float | None,
    intercept: float | None,
) -> Chart:
    if not points:
        return Chart(title, "uncached input tokens", "TTFT", note="no calls with TTFT and usage")
    stride = max(1, math.ceil(len(points) / MAX_DOTS))
    shown = list(points)[::stride]
    xs_v = [float(p[0]) for p in points]
    ys_v = [float(p[1]) for p in points]
    x_lo, x_hi, x_ticks = _linear_ticks(0, max(xs_v), lambda v: f"{v:,.0f}")
    y_lo, y_hi, y_ticks = _linear_ticks(0, max(ys_v), fmt.duration)
    xs = _Scale(x_lo, x_hi, LEFT, WIDTH - RIGHT, log=False)
    ys = _Scale(y_lo, y_hi, HEIGHT - BOTTOM, TOP, log=False)
    dots = tuple(
        Dot(
            xs(float(p[0])),
            ys(float(p[1])),
            "cached" if p[2] else "uncached",
            f"{float(p[0]):,.0f} uncached tokens → TTFT {fmt.duration(float(p[1]))}"
            + (" (cache hit)" if p[2] else ""),
        )
        for p in shown
    )
    segments: tuple[Segment, ...] = ()
    if slope is not None and intercept is not None:
        x0, x1 = x_lo, x_hi
        y0 = min(max(intercept + slope * x0, y_lo), y_hi)
        y1 = min(max(intercept + slope * x1, y_lo), y_hi)
        segments = (
            Segment(
                xs(x0),
                ys(y0),
                xs(x1),
                ys(y1),
                "fit",
                f"fit: {fmt.duration(slope * 1000)} per 1k uncached tokens + "
                f"{fmt.duration(intercept)}",
            ),
        )
    return Chart(
        title,
        "uncached input tokens",
        "TTFT",
        x_ticks=_pixel_ticks(x_ticks, xs),
        y_ticks=_pixel_ticks(y_ticks, ys),
        dots=dots,
        segments=segments,
        legend=(
            LegendEntry("uncached", "no cache hit"),
            LegendEntry("cached", "cache hit"),
            *((LegendEntry("fit", "least-squares fit"),) if segments else ()),
        ),
    )


# ---- a sweep: figures against the load ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadSeries:
    """One figure of a sweep's levels (`ttft p95`), None where a level has none."""

    metric: str  # the series' colour: ttft, tpot, e2e
    label: str
    values: tuple[float | None, ...]


def load_chart(
    title: str,
    x_label: str,
    levels: Sequence[float],
    series: Sequence[LoadSeries],
    knee: int | None,
    *,
    share: bool = False,
) -> Chart:
    """Figures (µs, or with `share` fractions of calls drawn from 0 to 100 %) against the load
    of a sweep's levels (concurrency or rate, log scale when they span 8× or more), each level
    a dot; the knee, when there is one, a dashed vertical."""
    values = [v for s in series for v in s.values if v is not None]
    y_label = "share of calls" if share else "latency"
    y_text: Callable[[float], str] = fmt.percent if share else fmt.duration
    if not levels or not values:
        return Chart(title, x_label, y_label, note="no figures at any level")
    spread = max(levels) / min(levels) >= 8 if min(levels) > 0 else False
    if spread:
        x_lo, x_hi, x_ticks = _log_ticks(min(levels), max(levels), lambda v: f"{v:g}")
        x_ticks = [Tick(v, f"{v:g}") for v in levels]
    else:
        x_lo, x_hi, x_ticks = _linear_ticks(0, max(levels), lambda v: f"{v:g}")
    y_lo, y_hi, y_ticks = _linear_ticks(0, 1.0 if share else max(values), y_text)
    xs = _Scale(x_lo, x_hi, LEFT, WIDTH - RIGHT, log=spread)
    ys = _Scale(y_lo, y_hi, HEIGHT - BOTTOM, TOP, log=False)
    lines: list[Polyline] = []
    dots: list[Dot] = []
    for s in series:
        css = _SERIES_CSS.get(s.metric, "")
        pts = [(level, v) for level, v in zip(levels, s.values, strict=True) if v is not None]
        lines.append(Polyline(" ".join(f"{xs(x)},{ys(y)}" for x, y in pts), css, s.label))
        dots.extend(
            Dot(xs(x), ys(y), css, f"{s.label} at {x_label} {x:g} = {y_text(y)}") for x, y in pts
        )
    segments: tuple[Segment, ...] = ()
    if knee is not None:
        x = xs(levels[knee])
        segments = (Segment(x, ys(y_lo), x, ys(y_hi), "fit", f"knee: {x_label} {levels[knee]:g}"),)
    return Chart(
        title,
        x_label + (" (log scale)" if spread else ""),
        y_label,
        x_ticks=_pixel_ticks(x_ticks, xs),
        y_ticks=_pixel_ticks(y_ticks, ys),
        lines=tuple(lines),
        dots=tuple(dots),
        segments=segments,
        legend=(
            *(LegendEntry(_SERIES_CSS.get(s.metric, ""), s.label) for s in series),
            *((LegendEntry("fit", "knee"),) if segments else ()),
        ),
    )


# ---- per-sample call timeline -------------------------------------------------------------------

MAX_LANES = 24
LANE = 7


@dataclass(frozen=True, slots=True)
class TimelineCall:
    """One call of a sample, in µs from the sample's first request (the result file's row)."""

    start: float
    token: float | None
    end: float
    api: str
    error: str | None


def timeline_chart(title: str, samples: Sequence[tuple[int, Sequence[TimelineCall]]]) -> Chart:
    """One lane per call, samples stacked: the wait for the first token and the streaming after
    it are told apart, and overlapping lanes show fan-out where a serial chain shows a staircase."""
    lanes: list[tuple[int, TimelineCall]] = []
    for sample, calls in samples:
        for call in calls:
            if len(lanes) >= MAX_LANES:
                break
            lanes.append((sample, call))
    if not lanes:
        return Chart(title, "time from sample start", "", note="no calls in kept samples")
    end = max(c.end for _, c in lanes)
    x_lo, x_hi, x_ticks = _linear_ticks(0, max(end, 1.0), fmt.duration)
    height = TOP + BOTTOM + LANE * len(lanes) + 4 * len({s for s, _ in lanes})
    xs = _Scale(x_lo, x_hi, LEFT, WIDTH - RIGHT, log=False)
    bars = []
    y_ticks = []
    y = float(TOP)
    previous = None
    for sample, call in lanes:
        if sample != previous:
            if previous is not None:
                y += 4
            y_ticks.append(Tick(y + LANE / 2, f"sample {sample}"))
            previous = sample
        start, token, stop, api, error = call.start, call.token, call.end, call.api, call.error
        x_start, x_stop = xs(start), xs(stop)
        mid = xs(token) if token is not None else x_stop
        what = f"{api}: starts {fmt.duration(start)}"
        if error:
            bars.append(
                Bar(x_start, y, max(x_stop - x_start, 2), LANE - 1, "t-error", f"{what}, {error}")
            )
        else:
            first = f", first token {fmt.duration(token)}" if token is not None else ""
            tip = f"{what}{first}, ends {fmt.duration(stop)}"
            bars.append(Bar(x_start, y, max(mid - x_start, 1), LANE - 1, "t-wait", tip))
            if x_stop > mid:  # the same call: its tooltip is on the wait bar only
                bars.append(Bar(mid, y, x_stop - mid, LANE - 1, "t-stream", ""))
        y += LANE
    return Chart(
        title,
        "time from the sample's first request",
        "",
        x_ticks=_pixel_ticks(x_ticks, xs),
        y_ticks=tuple(y_ticks),
        bars=tuple(bars),
        legend=(
            LegendEntry("t-wait", "waiting for first token"),
            LegendEntry("t-stream", "streaming"),
            LegendEntry("t-error", "failed"),
        ),
        height=int(height),
        y_grid=False,
    )
