"""The per-test record: what one test measured and what was decided about it.

Owns `TestData`, the one typed record of a test that the plugin builds on the process that ran
it and every later stage reads: its calls, hand-recorded values, sample counts and spans, where it
is, its outcome, its judgements (each holding its parsed `Expectation`) and its findings, plus the
pool of its values, built once on first use. Its plain-data form (`to_wire` / `from_wire`) is what
rides on the test report (the `pytest_latency` attribute pytest-xdist forwards and report-writing
plugins serialise); it is written once where the test ran and read back once, on a pytest-xdist
controller only: in the process that ran the test the plugin keeps the object itself. Once a
test is diagnosed, the fingerprints only its own diagnosis reads leave the record (`diagnosed`),
so neither the report payload nor the controller's memory carries them.

May import `calls`, `pools`, `verdicts`, `diagnose` (the `Finding` type), `metrics`, `load` (the
`Load` type); never pytest, never `results` or `report`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_latency.calls import OUTSIDE, Call, ManualValue, SampleSpan
from pytest_latency.pools import Pool

if TYPE_CHECKING:
    from pytest_latency.diagnose import Finding
    from pytest_latency.load import Load, Shard
    from pytest_latency.recording import Measured
    from pytest_latency.verdicts import Judgement

Wire = dict[str, Any]
# A joined record's outcome: the first of these any shard had.
_WORST_FIRST = ("interrupted", "failed", "skipped")


@dataclass(slots=True)
class TestData:
    __test__ = False  # not a test class, whatever pytest's collection patterns say

    nodeid: str
    samples: int = 0
    warmup: int = 0
    calls: tuple[Call, ...] = ()
    manual: tuple[ManualValue, ...] = ()
    # When each sample ran (warmup ones too; the pool keeps the kept ones): the `turn` metric.
    spans: tuple[SampleSpan, ...] = ()
    location: tuple[str, int | None] | None = None
    outcome: str = "passed"
    judgements: tuple[Judgement, ...] = ()
    # None until the test is diagnosed (then a tuple, empty when nothing was found).
    findings: tuple[Finding, ...] | None = None
    # The derived numbers (`diagnose.test_figures`: what-ifs, time split, prefill fit, overlap),
    # computed with the findings on the process that ran the test, so the end of a session (a
    # pytest-xdist controller's above all) need not compute them for every test.
    figures: dict[str, Any] | None = None
    # The costly parts of the test's result-file entry (`results.test_blocks`), built where the
    # test ran when a result file will be written; None otherwise.
    blocks: dict[str, Any] | None = None
    # The policies the judgements were made under (None: the test was not judged).
    policy: str | None = None
    flagged_policy: str | None = None
    confidence: float | None = None
    # Carried on a teardown report: calls made after the call report, to add to the test's.
    teardown: bool = False
    # The load shape its samples ran under (concurrency, an open-loop rate); None: sequential.
    load: Load | None = None
    # The sweep it is one level of (`plugin._sweep.sweep_name`: its node id, the level as `*`).
    sweep: str | None = None
    # One shard of a test split across pytest-xdist workers (`split=True`): which, whether it
    # ran apart from the others (it gave up waiting for them), and the budgets (as written) it
    # leaves to be judged where the shards are joined.
    shard: Shard | None = None
    apart: bool = False
    pending: tuple[str, ...] = ()
    # A split test's joined record: how many shards (workers) its samples ran on; 0: one process.
    shards: int = 0
    _pool: Pool | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, measured: Measured, location: tuple[str, int | None] | None) -> TestData:
        return cls(
            nodeid=measured.nodeid,
            samples=measured.samples,
            warmup=measured.warmup,
            calls=measured.calls,
            manual=measured.manual,
            spans=measured.spans,
            location=location,
        )

    @property
    def pool(self) -> Pool:
        """The values of this test's kept calls, built once."""
        if self._pool is None:
            self._pool = Pool.of(self.calls, self.manual, self.samples, self.spans)
        return self._pool

    @property
    def unsampled_calls(self) -> int:
        """Calls outside any sample (fixtures' setup and teardown): counted, never pooled."""
        return sum(1 for c in self.calls if c.sample == -1)

    @property
    def measured_anything(self) -> bool:
        return bool(self.calls or self.manual)

    def diagnosed(
        self, findings: Sequence[Finding], figures: dict[str, Any] | None = None
    ) -> TestData:
        """This record with its findings and figures, and without what only the findings
        needed (the serial-calls check's shingles, and the prefix hashes of calls no group's
        cache check will compare): everything later stages read stays."""
        from pytest_latency.diagnose import compares_prefix

        calls = tuple(
            Call.of(
                c.sample,
                c.warmup,
                tuple(a.without_fingerprints(prefix=compares_prefix(a)) for a in c.attempts),
            )
            for c in self.calls
        )
        return dataclasses.replace(
            self, calls=calls, findings=tuple(findings), figures=figures, _pool=None
        )

    def with_late(self, late: TestData) -> TestData:
        """This record with the calls and values of its teardown report added (they are
        fixtures' calls, outside any sample: the pool, the verdicts and the findings stay)."""
        return dataclasses.replace(
            self,
            calls=self.calls + late.calls,
            manual=self.manual + late.manual,
            _pool=self._pool,
        )

    @classmethod
    def joined(cls, parts: Sequence[TestData], nodeid: str) -> TestData:
        """The record of a split test (`split=True`) from its shards' records, by shard: their
        calls, values and sample spans together, each shard's samples numbered after the
        previous shards' (kept ones from 0 on, warmup ones from -2 down, as one process numbers
        them), so every figure of the joined pool is exact; the load shape is the whole one
        (`load.joined`); the outcome is the worst shard's. Not judged or diagnosed yet."""
        from pytest_latency.load import joined

        calls: list[Call] = []
        manual: list[ManualValue] = []
        spans: list[SampleSpan] = []
        kept = warm = 0
        for part in parts:

            def moved(sample: int, warmup: bool, kept: int = kept, warm: int = warm) -> int:
                if sample == OUTSIDE:
                    return sample
                return sample - warm if warmup else sample + kept

            calls += (dataclasses.replace(c, sample=moved(c.sample, c.warmup)) for c in part.calls)
            manual += (m._replace(sample=moved(m.sample, m.warmup)) for m in part.manual)
            spans += (s._replace(sample=moved(s.sample, s.warmup)) for s in part.spans)
            kept += part.samples
            warm += part.warmup
        loads = [p.load for p in parts if p.load is not None]
        outcomes = [p.outcome for p in parts]
        first = parts[0]
        return cls(
            nodeid=nodeid,
            samples=kept,
            warmup=warm,
            calls=tuple(calls),
            manual=tuple(manual),
            spans=tuple(spans),
            location=first.location,
            outcome=next((o for o in _WORST_FIRST if o in outcomes), first.outcome),
            load=joined(loads) if len(loads) == len(parts) else None,
            sweep=first.sweep,
            apart=any(p.apart for p in parts),
            pending=first.pending,
            shards=first.shard.count if first.shard is not None else len(parts),
        )

    # ---- the plain-data form on the test report --------------------------------------------------

    def to_wire(self) -> Wire:
        out: Wire = {
            "nodeid": self.nodeid,
            "samples": self.samples,
            "warmup": self.warmup,
            "calls": [c.to_wire() for c in self.calls],
            "manual": [list(m) for m in self.manual],
            "spans": [list(span) for span in self.spans],
            "location": list(self.location) if self.location is not None else None,
            "outcome": self.outcome,
        }
        if self.judgements:
            out["budgets"] = [j.to_dict() for j in self.judgements]
        if self.findings is not None:
            out["findings"] = [f.to_dict() for f in self.findings]
        if self.figures is not None:
            out["figures"] = self.figures
        if self.blocks is not None:
            out["blocks"] = self.blocks
        for name in ("policy", "flagged_policy", "confidence"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.teardown:
            out["teardown"] = True
        if self.load is not None:
            out["load"] = self.load._asdict()
        if self.sweep is not None:
            out["sweep"] = self.sweep
        if self.shard is not None:
            out["shard"] = [self.shard.index, self.shard.count]
            out["pending"] = list(self.pending)
        if self.shard is not None or self.shards:
            out["apart"] = self.apart
        if self.shards:
            out["shards"] = self.shards
        return out

    @classmethod
    def from_wire(cls, data: Wire) -> TestData:
        """Rebuild a record from its plain data (a worker's report, or data a tool wrote in the
        same shape); every budget expression is parsed once here."""
        from pytest_latency.diagnose import Finding
        from pytest_latency.verdicts import Judgement

        location = data.get("location")
        return cls(
            nodeid=str(data["nodeid"]),
            samples=int(data.get("samples", 0)),
            warmup=int(data.get("warmup", 0)),
            calls=tuple(Call.from_wire(c) for c in data.get("calls", ())),
            manual=tuple(
                ManualValue(int(m[0]), bool(m[1]), str(m[2]), float(m[3]))
                for m in data.get("manual", ())
            ),
            spans=tuple(
                SampleSpan(
                    int(span[0]),
                    bool(span[1]),
                    int(span[2]),
                    int(span[3]),
                    int(span[4]) if len(span) > 4 and span[4] is not None else None,
                )
                for span in data.get("spans", ())
            ),
            location=(str(location[0]), location[1]) if location else None,
            outcome=str(data.get("outcome", "passed")),
            judgements=tuple(Judgement.from_dict(j) for j in data.get("budgets", ())),
            findings=(
                tuple(Finding.from_dict(f) for f in data["findings"])
                if data.get("findings") is not None
                else None
            ),
            figures=data.get("figures"),
            blocks=data.get("blocks"),
            policy=data.get("policy"),
            flagged_policy=data.get("flagged_policy"),
            confidence=data.get("confidence"),
            teardown=bool(data.get("teardown", False)),
            load=_load_of(data.get("load")),
            sweep=data.get("sweep"),
            shard=_shard_of(data.get("shard")),
            apart=bool(data.get("apart", False)),
            pending=tuple(str(e) for e in data.get("pending", ())),
            shards=int(data.get("shards", 0)),
        )


def _load_of(data: object) -> Load | None:
    if not isinstance(data, dict):
        return None
    from pytest_latency.load import Load

    return Load(**{k: v for k, v in data.items() if k in Load._fields})


def _shard_of(data: object) -> Shard | None:
    if not isinstance(data, list) or len(data) != 2:
        return None
    from pytest_latency.load import Shard

    return Shard(int(data[0]), int(data[1]))


__all__ = ["TestData", "Wire"]
