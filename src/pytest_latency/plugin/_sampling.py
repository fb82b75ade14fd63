"""Sampling and verdicts: what each test is held to, how often its body runs, and the judgement.

Owns the per-test sampling plan (the `latency` marker overlaid on the budgets file, its load shape
included), its validation at collection time (a bad marker is a collection error naming the
test), the sample loop (warmup, samples, and more samples while a verdict is inconclusive, up to
max_samples; one at a time, or in batches under a load shape, which `_load` runs), the
attribution of calls to the running test, and the call-phase verdict that fails a test on a
missed budget. Its measurements ride on the call report as plain data.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_latency.plugin import _sweep
from pytest_latency.plugin._state import (
    PLAN_KEY,
    REPORT_ATTRIBUTE,
    RUN_KEY,
    SAMPLER_NAME,
    SETTINGS_KEY,
    Handoff,
    SamplingPlan,
    Settings,
)
from pytest_latency.policies import effective_policy

if TYPE_CHECKING:
    from pytest_latency.budgets import Expectation
    from pytest_latency.load import Load, Shard
    from pytest_latency.plugin._load import Batch
    from pytest_latency.plugin._routing import Router
    from pytest_latency.plugin._split import Meeting
    from pytest_latency.recording import Recording
    from pytest_latency.testdata import TestData
    from pytest_latency.verdicts import Judgement

# The statistics, the budget grammar and the diagnosis are imported where a test needs them, not
# at plugin load: pytest loads the plugin in every session of the environment.

_SAMPLING_KWARGS = ("samples", "warmup", "max_samples")
# The load shape's keys (`load.LOAD_KEYS`), spelled here too: the plan is read for every test
# with a marker, and `load` loads only for a test that gives one of them.
_LOAD_KWARGS = ("concurrency", "rate", "arrival", "burstiness", "seed")
_MARKER_KWARGS = (*_SAMPLING_KWARGS, *_LOAD_KWARGS, "split")

NO_CALLS_HINT = (
    "pytest-latency: this test has latency budgets but made no captured LLM call.\n"
    "Is the client instrumented? Use the anthropic_client/openai_client fixtures, "
    "wrap your own client with pytest_latency.instrument(client), or run with "
    "--latency-capture=auto."
)


# ---- the plan ------------------------------------------------------------------------------------


def plan_for(item: pytest.Item, settings: Settings) -> SamplingPlan | None:
    markers = list(item.iter_markers("latency"))
    budget_file = settings.budget_file
    marker_names = [m.name for m in item.iter_markers()]
    nodeid = item.nodeid
    if _sweep.shard_of(item) is not None:  # a shard is its test: the file's rules name that
        from pytest_latency.plugin._split import unsharded

        nodeid = unsharded(nodeid)
    rules = budget_file.rules_for(nodeid, marker_names) if budget_file else ()
    if not markers and not rules:
        return None
    from pytest_latency.budgets import BudgetError, parse_expectation

    source = f"{item.nodeid} @pytest.mark.latency"
    own: list[Expectation] = []
    sampling: dict[str, int] = {}
    # Each load key's value and where it was written (the closest marker's, else the file's).
    shape: dict[str, tuple[object, str]] = {}
    # A test of a sweep: its level, and every level of its sweep (read as `load` reads them).
    level = _sweep.level_of(item)
    swept: tuple[object, ...] = ()
    # Closest marker first: its sampling wins; expectations from every level add up.
    for marker in markers:
        unknown = set(marker.kwargs) - set(_MARKER_KWARGS)
        if unknown:
            raise BudgetError(
                f"{source}: unknown keyword argument(s) {', '.join(sorted(unknown))}; "
                f"valid: {', '.join(_MARKER_KWARGS)}"
            )
        for arg in marker.args:
            expectation = parse_expectation(arg, source=source)
            # The file's rule: the same budget by meaning twice is a mistake, not a stricter one.
            same = next((e for e in own if e.meaning == expectation.meaning), None)
            if same is not None:
                raise BudgetError(
                    f"{source}: gives the same budget twice: {same.text!r} and "
                    f"{expectation.text!r}; remove one"
                )
            own.append(expectation)
        for name in _SAMPLING_KWARGS:
            if name in marker.kwargs and name not in sampling:
                minimum = 0 if name == "warmup" else 1
                sampling[name] = _count(marker.kwargs[name], name, minimum, source)
        for name in _LOAD_KWARGS:
            if name in marker.kwargs and name not in shape:
                value = marker.kwargs[name]
                if isinstance(value, list | tuple):  # a sweep: this test runs one level of it
                    value, swept = _level_value(name, marker.kwargs, level, source)
                shape[name] = (value, source)
    # A marker beats the file for its test: a file budget on the same statistic gives way.
    own_labels = {e.label for e in own}
    from_file = [e for rule in rules for e in rule.expectations if e.label not in own_labels]
    defaults = budget_file.defaults if budget_file else None
    samples = sampling.get("samples") or (defaults.samples if defaults else None) or 1
    warmup = sampling.get("warmup", defaults.warmup if defaults and defaults.warmup else 0)
    max_samples = sampling.get("max_samples") or (defaults.max_samples if defaults else None)
    if max_samples is not None and max_samples < samples:
        raise BudgetError(f"{source}: max_samples={max_samples} is below samples={samples}")
    for rule in rules:
        for name, value in rule.load:
            shape.setdefault(name, (value, rule.source))
    if defaults is not None:
        for name, value in defaults.load:
            shape.setdefault(name, (value, f"{budget_file.path if budget_file else ''} [defaults]"))
    load = _load_of(shape, item.nodeid) if shape else None
    expectations = tuple(e for e in own + from_file if _applies(e, load, level, swept, source))
    plan = SamplingPlan(expectations, samples, warmup or 0, max_samples or samples, load)
    shard = _sweep.shard_of(item)
    if (
        shard is not None
        or any("split" in m.kwargs for m in markers)
        or (budget_file is not None and budget_file.splits)
    ):
        from pytest_latency.plugin import _split

        # The choice the shards were made by (`_split.shards_of`): the same rules, matched the
        # same way.
        choice = _split.choice_of(item, level, markers, marker_names, budget_file)
        where = source if choice is None or choice.rule is None else f"{choice.rule}: {nodeid}"
        try:
            if choice is not None:
                _split.check_split(choice, plan)
            if shard is not None:
                plan = _split.share_plan(plan, shard)
        except _split.SplitError as exc:
            raise BudgetError(f"{where}: {exc}") from None
    return plan


def _level_value(
    name: str, kwargs: Mapping[str, object], level: _sweep.Level | None, source: str
) -> tuple[object, tuple[object, ...]]:
    """The value of a swept key for this test (its level's), and every level of the sweep."""
    from pytest_latency.budgets import BudgetError
    from pytest_latency.load import LoadError, read_value

    try:
        _sweep.check_sweep(kwargs)
        levels = tuple(read_value(name, v) for v in kwargs[name])  # type: ignore[attr-defined]
    except (_sweep.SweepError, LoadError) as exc:
        raise BudgetError(f"{source}: {exc}") from None
    if level is None or level.key != name:
        raise BudgetError(
            f"{source}: {name}={kwargs[name]!r} is a sweep, whose levels are made when the test "
            "is collected: give it in the marker on the test, its class or its module"
        )
    return level.value, levels


def _applies(
    expectation: Expectation,
    load: Load | None,
    level: _sweep.Level | None,
    swept: tuple[object, ...],
    source: str,
) -> bool:
    """Whether a budget applies to this test: always, unless it names a level
    (`ttft{concurrency=16}.p95 < 800ms`) the test does not run at."""
    if not any(key in _sweep.SWEPT for key, _ in expectation.filters):
        return True
    from pytest_latency.budgets import BudgetError

    try:
        return _sweep.applies(expectation, load, level, swept)
    except _sweep.SweepError as exc:
        raise BudgetError(f"{source}: {exc}") from None


def _load_of(shape: dict[str, tuple[object, str]], nodeid: str) -> Load:
    """The test's load shape from each key's value and where it came from; a bad value is a
    `BudgetError` naming that place (a marker's test, or the file's line)."""
    from pytest_latency.budgets import BudgetError
    from pytest_latency.load import LoadError, load_of, read_value

    values: dict[str, object] = {}
    for name, (value, where) in shape.items():
        try:
            values[name] = read_value(name, value)
        except LoadError as exc:
            raise BudgetError(f"{where}: {exc}") from None
    try:
        return load_of(values)
    except LoadError as exc:
        places = sorted({where for _, where in shape.values()})
        raise BudgetError(f"{' and '.join(places)}: {nodeid}: {exc}") from None


def _count(value: object, name: str, minimum: int, source: str) -> int:
    from pytest_latency.budgets import MAX_SAMPLES, BudgetError

    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BudgetError(f"{source}: {name}={value!r} must be an integer >= {minimum}")
    if value > MAX_SAMPLES:  # the file's limit: a typo of 10**9 samples would run for ever
        raise BudgetError(f"{source}: {name}={value} is over the limit of {MAX_SAMPLES:,}")
    return value


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    settings = collector.config.stash.get(SETTINGS_KEY, None)
    if not report.passed or settings is None:
        return report
    if settings.budget_file is None and not any(
        # `keywords` holds the marker names of a node and its parents: a dict lookup per level,
        # where get_closest_marker builds generators and isinstance(node, Item) goes through
        # ABCMeta (this runs for every collected test). A false positive (a test merely named
        # "latency", a class) costs only the exact check below.
        "latency" in node.keywords
        for node in report.result
    ):
        return report  # nothing to plan: no budgets file, no latency marker
    from pytest_latency.budgets import BudgetError

    problems: list[str] = []
    config = collector.config
    for node in report.result:
        if not isinstance(node, pytest.Item):
            continue
        try:
            plan = plan_for(node, settings)
        except BudgetError as exc:
            problems.append(str(exc))
            continue
        if plan is not None:
            node.stash[PLAN_KEY] = plan
            try:
                _warn_unreachable(node, plan)
            except SamplingPlanWarning as exc:
                # `filterwarnings = error`: a collection error naming the test, not a crash.
                problems.append(f"{type(exc).__name__} (an error under filterwarnings): {exc}")
                continue
            if config.pluginmanager.get_plugin(SAMPLER_NAME) is None:
                router = config.stash[RUN_KEY].router
                handoff = config.stash[RUN_KEY].handoff
                sampler = Sampler(router, settings, handoff)
                config.pluginmanager.register(sampler, SAMPLER_NAME)
    if problems:
        report.outcome = "failed"
        report.longrepr = "\n".join(["pytest-latency: invalid latency marker", *problems])
        report.result = []
    return report


class SamplingPlanWarning(pytest.PytestWarning):
    """A test's sampling plan cannot give one of its budgets a confident pass."""


def _warn_unreachable(item: pytest.Item, plan: SamplingPlan) -> None:
    """Warn at collection about a percentile budget that sequential sampling samples for in vain:
    even at max_samples its bound cannot exist, so the test spends every sample and ends
    inconclusive (issue #16: a p99 budget sampled up to 80 needs hundreds)."""
    if plan.max_samples <= plan.samples:
        return  # a fixed sample size: the too_few_samples finding says it after the run
    from pytest_latency.catalogue import METRICS, Scope

    candidates = [
        e
        for e in plan.expectations
        if e.percentile is not None and METRICS[e.metric].scope is not Scope.CHUNK
    ]
    if not candidates:
        return  # itl has a value per chunk: its count is not the samples'
    from pytest_latency.verdicts import samples_needed

    for expectation in candidates:
        needed = samples_needed(expectation, plan.samples, plan.max_samples)
        if needed is None:
            continue
        per_sample = METRICS[expectation.metric].scope is Scope.SAMPLE
        values = "one value per sample" if per_sample else "at one call per sample"
        item.warn(
            SamplingPlanWarning(
                f"pytest-latency: {item.nodeid}: {expectation.text!r} cannot pass with "
                f"confidence at max_samples={plan.max_samples}: it needs {needed} values "
                f"({values}, sampled {plan.samples} → {needed}); raise max_samples to "
                f"{needed} or budget a lower percentile"
            )
        )


# ---- running a test ------------------------------------------------------------------------------
#
# Every test of the suite pays for `TestTracker`'s hooks, LLM calls or not, so they do no more
# than they must until a test makes its first call; `Sampler`'s hooks are registered only once a
# test has a sampling plan. (benchmarks/bench_unused_plugin.py measures what they cost.)


# pytest >= 9 reports each `subtests.test()` block with a call-phase report of its own.
_SUBTEST_REPORTS: tuple[type[pytest.TestReport], ...] = tuple(
    cls for cls in (getattr(pytest, "SubtestReport", None),) if cls is not None
)


class TestTracker:
    """Tells the router which test runs now and when its body runs, hands an unplanned test's
    record to its report, and passes every test's record on to `on_test_data` (the controller's
    collector). A plugin object registered per config: pytest's logstart, logreport and
    logfinish hooks receive no config, and a pytest-xdist controller receives its workers'
    reports through them."""

    __test__ = False  # not a test class, whatever pytest's collection patterns say

    def __init__(self, router: Router, handoff: Handoff, *, freeze_gc: bool = True) -> None:
        self._router = router
        self._handoff = handoff
        self._outcome = "passed"  # the running test's outcome so far (setup, then call)
        # `--latency-gc=freeze`: how many SDKs had been warmed at the last gc.freeze (None: not
        # frozen yet this session; see `_freeze_gc`).
        self._freeze_gc = freeze_gc
        self._frozen_after: int | None = None
        self._thaw = False  # nothing was frozen before this session's first freeze
        # False on a pytest-xdist controller: its workers run the tests, and the logstart and
        # reports it sees are theirs, forwarded; a call the controller makes belongs to no test.
        self._runs_tests = True
        self.on_test_data: Callable[[pytest.TestReport, TestData], None] | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # pytest-xdist registers its scheduler only on the controller of a distributed run.
        self._runs_tests = not session.config.pluginmanager.hasplugin("dsession")

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        # Before setup: calls made by the test's fixtures are the test's too.
        if self._runs_tests:
            self._router.start(nodeid)

    # The body's start and end are taken from the phase itself, not from its reports:
    # pytest-rerunfailures (and pytest-forked) log the reports only after all phases ran. The
    # innermost wrapper: its sample (and `turn`) is the body's run, not other plugins' work
    # around it (output capture, logging); it ends before the call report is made.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        if self._freeze_gc:
            self._freeze()
        if PLAN_KEY in item.stash:  # a planned test's samples are the sampler's
            return (yield)
        self._router.begin_plain_run()
        try:
            return (yield)
        finally:
            self._router.end_plain_run()

    def _freeze(self) -> None:
        """gc.freeze when the session's first test body starts (the test modules, conftests and
        session fixtures exist by then) and again after a setup that warmed an SDK (its models
        live as long as the process): a collection during a call then scans only what was made
        since (`gc_pauses`). Never otherwise: what the tests leave behind must stay collectable.
        O(1) either way."""
        warm = sys.modules.get("pytest_latency.plugin._warm")
        warmed = 0 if warm is None else warm.warmed()
        if self._frozen_after == warmed:
            return
        from pytest_latency import gc_pauses

        if self._frozen_after is None:
            self._thaw = gc_pauses.frozen() == 0
        gc_pauses.freeze()
        self._frozen_after = warmed

    def thaw(self) -> None:
        """At the session's end, leave the collector as the session found it: what it froze is
        collectable again (a session nested in a test, pytester's inline runs, must not leave
        its host process's garbage uncollectable; a test of the host's saw a closed event loop
        outlive gc.collect()). O(1)."""
        if self._thaw:
            from pytest_latency import gc_pauses

            gc_pauses.thaw()
            self._thaw = False

    # First: the record must be on the report before pytest-xdist forwards it or anyone reads it.
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Already there: the sampler's (a planned test, its object handed over in this process)
        # or a worker's (on an xdist controller: plain data, rebuilt here once).
        test = self._handoff.records.pop(id(report), None)
        if test is None:
            test = _attached(getattr(report, REPORT_ATTRIBUTE, None))
        recording = self._router.recording
        when = report.when
        if when == "call":
            if isinstance(report, _SUBTEST_REPORTS):
                return  # a subtest's report: its calls are the test's, reported with its own
            self._outcome = report.outcome
            if test is None and recording is not None and recording.unreported:
                test = _diagnosed(_record_of(recording, report), ())
                test.outcome = report.outcome
                attach(report, test, self._handoff)
        elif when == "setup":
            self._outcome = report.outcome  # the test's outcome if its setup fails
        elif test is None and recording is not None and recording.unreported:
            # Made after the call report (fixture teardown), or all of them when setup failed:
            # they travel on the teardown report, marked so the collector adds them up.
            test = _late(_record_of(recording, report))
            test.outcome = self._outcome
            test = _diagnosed(test, ())
            attach(report, test, self._handoff)
        if test is not None and self.on_test_data is not None:
            self.on_test_data(report, test)

    def pytest_runtest_logfinish(self) -> None:
        if self._runs_tests:
            self._router.finish()


def _attached(attached: object) -> TestData | None:
    """The record a forwarded report carries as plain data (a pytest-xdist worker's)."""
    if not isinstance(attached, dict):
        return None
    from pytest_latency.testdata import TestData

    return TestData.from_wire(attached)


def attach(report: pytest.TestReport, test: TestData, handoff: Handoff) -> None:
    """Put a test's record on its report as plain data (what pytest-xdist forwards, and what
    any plugin that serialises reports, such as pytest-reportlog, can write), and hand the
    object itself to this process's tracker, which then needs to rebuild nothing."""
    # A shard's blocks are the joined record's, built where the shards are joined.
    if handoff.blocks and test.calls and test.blocks is None and test.shard is None:
        from pytest_latency.results import test_blocks

        test.blocks = test_blocks(test)
    setattr(report, REPORT_ATTRIBUTE, test.to_wire())
    handoff.records[id(report)] = test


class _Pending:
    """The batch an async test's swapped function runs when the sampler next runs its body."""

    __slots__ = ("batch",)

    def __init__(self) -> None:
        self.batch: Batch | None = None

    def current(self) -> Batch:
        assert self.batch is not None, "the sampler runs the body only with a batch pending"
        return self.batch


_BATCH_KEY = pytest.StashKey[_Pending]()


class Sampler:
    """The hooks of tests with a sampling plan: the sample loop and the verdict."""

    def __init__(self, router: Router, settings: Settings, handoff: Handoff) -> None:
        self._router = router
        self._settings = settings
        self._handoff = handoff

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        plan = pyfuncitem.stash.get(PLAN_KEY, None)
        if plan is None:
            return None
        router = self._router
        if router.nodeid != pyfuncitem.nodeid:  # run by a plugin that skipped pytest's logstart
            router.start(pyfuncitem.nodeid)
        recording = router.current()
        assert recording is not None  # router.nodeid is set
        # Every other implementation (pytest's own, pytest-asyncio's, anyio's) runs once per
        # sample; fixtures stay set up across samples, like pytest-benchmark's rounds.
        manager = pyfuncitem.config.pluginmanager
        call_body = manager.subset_hook_caller("pytest_pyfunc_call", remove_plugins=[self])

        def run_samples(count: int, *, warmups: int = 0) -> None:
            for index in range(count):
                recording.begin_run(warmup=index < warmups)
                try:
                    call_body(pyfuncitem=pyfuncitem)
                finally:
                    recording.end_run()

        load = plan.load
        if load is not None and not load.sequential:
            run_samples = self._load_loop(pyfuncitem, recording, load, call_body)

        from pytest_latency.plugin._warm import warm_imported

        warm_imported()  # clients the test built itself: their SDK's first-use work, unmeasured
        shard = _sweep.shard_of(pyfuncitem)
        # A closed loop at concurrency > 1 in one process builds its line again before each
        # batch's kept samples (sequential sampling's extra batches, below).
        closed = load is not None and not load.open_loop and not load.sequential
        rewarm = plan.warmup if shard is None and closed else 0
        if shard is None and (load is None or not load.open_loop):
            # One closed loop, warmup through samples: under concurrency C the first sample
            # starts as the first warmup ends, C - 1 others in flight, so every sample meets
            # the line C clients keep. Two batches let the server drain between them, and the
            # second's first C samples started together into an empty line (at 16 against 4
            # slots, a third of 48 samples waited 0-2 services where the rest waited 3; session
            # 26). An open loop's warmup stays a batch of its own: its schedule starts after.
            run_samples(plan.warmup + plan.samples, warmups=plan.warmup)
        else:
            run_samples(plan.warmup, warmups=plan.warmup)
            if shard is not None:  # a split test's shard: its kept samples start with the others'
                _meet(pyfuncitem, plan, shard)
            run_samples(plan.samples)
        # Sequential sampling: an interval that straddles the budget narrows with n; draw more
        # (doubling, so the number of re-judgements stays logarithmic) up to max_samples.
        if not plan.budgeted or plan.max_samples <= plan.samples:
            return True
        from pytest_latency.pools import Pool
        from pytest_latency.verdicts import confidence_for_looks, judge

        confidence = confidence_for_looks(plan.looks)
        # A look prices the calls only for a budget on cost (the report prices them all).
        priced = any(
            e.metric == "cost" or any(c.metric == "cost" for c in e.conditions)
            for e in plan.expectations
        )
        while recording.samples_run < plan.max_samples:
            # The recording keeps each call's metrics: a look parses only the new calls.
            measured = recording.measured(priced=priced)
            verdicts = judge(
                plan.expectations,
                Pool.of(measured.calls, measured.manual, measured.samples, measured.spans),
                confidence=confidence,
                flagged=self._settings.flagged,
            )
            if not any(j.verdict == "inconclusive" for j in verdicts):
                break
            more = min(recording.samples_run, plan.max_samples - recording.samples_run)
            # Each extra batch starts from an empty line, as the first did: it warms it again
            # as the first did, so that its samples meet the line the first's met (at 16
            # against 4 slots, a batch's first 16 samples waited 0-2 services where the rest
            # waited 3; session 26). The look between batches is no sample.
            run_samples(rewarm + more, warmups=rewarm)
        return True

    def _load_loop(
        self,
        item: pytest.Function,
        recording: Recording,
        load: Load,
        call_body: Callable[..., object],
    ) -> Callable[..., None]:
        """The sample loop under a load shape: each `run_samples(count)` runs one batch, in
        threads (a sync test) or as tasks of one run of the body (an async test, whose function
        `pytest_runtest_call` swapped for the batch)."""
        from pytest_latency.load import Schedule
        from pytest_latency.plugin import _load

        schedule = Schedule(load) if load.open_loop else None
        holder = item.stash.get(_BATCH_KEY, None)

        def run_samples(count: int, *, warmups: int = 0) -> None:
            if count <= 0:
                return
            batch = _load.batch_of(recording, load, schedule, count, warmups=warmups)
            if holder is not None:
                holder.batch = batch
                call_body(pyfuncitem=item)
            else:
                _load.run_threads(batch, lambda: call_body(pyfuncitem=item))

        return run_samples

    # An async test's samples run as tasks on its own loop: for the call phase its function is
    # one coroutine function running a batch of them (`plugin._load.async_batch`), which
    # pytest-asyncio or anyio then runs on the loop as it would the test's own.
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        plan = item.stash.get(PLAN_KEY, None)
        if (
            plan is None
            or plan.load is None
            or plan.load.sequential
            or not isinstance(item, pytest.Function)
            or not inspect.iscoroutinefunction(item.obj)
        ):
            return (yield)
        from pytest_latency.plugin._load import async_batch

        holder = item.stash[_BATCH_KEY] = _Pending()
        original = item.obj
        item.obj = async_batch(original, holder.current)
        try:
            return (yield)
        finally:
            item.obj = original
            del item.stash[_BATCH_KEY]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        plan = item.stash.get(PLAN_KEY, None)
        if report.failed and plan is not None and _MEETING_KEY not in item.stash:
            _leave_if_shard(item)
        if call.when != "call" or plan is None:
            return report
        router = self._router
        recording = router.recording if router.nodeid == item.nodeid else None
        if recording is None:  # a planned test whose body made no call: its (empty) samples
            from pytest_latency.recording import Recording

            recording = Recording(item.nodeid)
        test = _record_of(recording, report)
        test.load = plan.load
        level = _sweep.level_of(item)
        if level is not None:
            test.sweep = _sweep.sweep_name(item.nodeid, level)
        shard = _sweep.shard_of(item)
        if shard is not None:
            # A shard's budgets are judged where the shards are joined (`judge_joined`), and
            # its record is diagnosed there, with the others': here it is only carried.
            meeting = item.stash.get(_MEETING_KEY, None)
            test.shard, test.apart = shard, meeting is None or not meeting.together
            test.pending = tuple(e.text for e in plan.expectations)
            test.outcome = report.outcome
            attach(report, test, self._handoff)
            return report
        judgements: Sequence[Judgement] = ()
        if plan.budgeted:
            from pytest_latency.verdicts import confidence_for_looks, judge

            policy = effective_policy(
                self._settings.policy, sampled_sequentially=plan.max_samples > plan.samples
            )
            confidence = confidence_for_looks(plan.looks)
            judgements = judge(
                plan.expectations,
                test.pool,
                policy=policy,
                confidence=confidence,
                flagged=self._settings.flagged,
            )
            test.judgements = tuple(judgements)
            test.confidence = confidence
            test.policy = policy
            test.flagged_policy = self._settings.flagged
            _record_properties(item, report, judgements)
            xpassed = _xpassed(item, report)
            missed = (report.passed or xpassed is not None) and _fail_on_misses(report, test)
            if missed and xpassed is not None:
                # A missed budget is the test failing: under `xfail` (no `raises=`, which names
                # an exception a budget never raises) that is the expected failure.
                report.outcome = "skipped"
                report.wasxfail = xpassed
        test.outcome = report.outcome
        # After the budgets: `too_few_samples` reads them.
        attach(report, _diagnosed(test, judgements), self._handoff)
        return report


_MEETING_KEY: pytest.StashKey[Meeting] = pytest.StashKey()


def _meet(item: pytest.Function, plan: SamplingPlan, shard: Shard) -> None:
    """Wait for the other shards of a split test, then until their common start (and this
    shard's phase in a constant schedule)."""
    from pytest_latency.plugin import _split

    workerinput = getattr(item.config, "workerinput", {})
    meeting = _split.meet(str(workerinput.get(_split.MEETING_INPUT, "")), item.nodeid, shard)
    item.stash[_MEETING_KEY] = meeting
    phase = plan.load.phase_s(shard) if plan.load is not None else 0.0
    _split.sleep_until(meeting.start_ns + round(phase * 1e9))


def _leave_if_shard(item: pytest.Item) -> None:
    """A shard of a split test that failed before it met the others: tell them (`_split.leave`)."""
    shard = _sweep.shard_of(item)
    if shard is None:
        return
    from pytest_latency.plugin import _split

    workerinput = getattr(item.config, "workerinput", {})
    _split.leave(str(workerinput.get(_split.MEETING_INPUT, "")), item.nodeid, shard)


def judge_joined(report: pytest.TestReport | None, test: TestData, settings: Settings) -> TestData:
    """A split test's joined record (`_split.Joiner`), judged and diagnosed on the controller:
    its shards' budgets over every shard's calls; a miss, or shards that did not run together,
    fails `report` (the last shard's, when it passed)."""
    from pytest_latency.budgets import parse_expectation
    from pytest_latency.plugin._split import APART_HINT, timeout_s

    source = f"{test.nodeid} @pytest.mark.latency"
    expectations = tuple(parse_expectation(text, source=source) for text in test.pending)
    judgements: Sequence[Judgement] = ()
    if expectations:
        from pytest_latency.verdicts import confidence_for_looks, judge

        test.policy = effective_policy(settings.policy, sampled_sequentially=False)
        test.confidence = confidence_for_looks(1)
        test.flagged_policy = settings.flagged
        judgements = judge(
            expectations,
            test.pool,
            policy=test.policy,
            confidence=test.confidence,
            flagged=settings.flagged,
        )
        test.judgements = tuple(judgements)
    if report is not None:
        # As a test run whole records them: junitxml reads the report's copy.
        for j in judgements:
            prop = _property(j)
            if prop not in report.user_properties:
                report.user_properties.append(prop)
    # A shard that failed or was skipped already says why; only a joined test whose every
    # shard passed can still fail here.
    if report is not None and report.passed and test.outcome == "passed":
        xfail = getattr(report, "wasxfail", None)  # every shard's body passed under xfail
        if test.apart:
            report.outcome = "failed"
            report.longrepr = APART_HINT.format(timeout=timeout_s())
        elif expectations and _fail_on_misses(report, test) and xfail is not None:
            report.outcome = "skipped"  # a missed budget fulfils the xfail, as in _xpassed
            report.wasxfail = xfail
        test.outcome = report.outcome
    return _diagnosed(test, judgements)


def _record_of(recording: Recording, report: pytest.TestReport) -> TestData:
    """A test's record of what its recording holds that no report carried yet, and where the
    test is."""
    from pytest_latency.testdata import TestData

    location = (str(report.location[0]), report.location[1])
    return TestData.of(recording.report(), location)


def _late(test: TestData) -> TestData:
    """A record of calls and values made after the test's call report: fixtures' ones, whatever
    sample was open, never pooled; marked so the collector adds them to the test's record."""
    from pytest_latency.calls import OUTSIDE, ManualValue

    test.manual = tuple(ManualValue(OUTSIDE, *m[1:]) for m in test.manual)
    test.spans = ()  # no sample's wall time: the samples were reported with the call report
    test.teardown = True
    return test


def in_flight(router: Router) -> TestData | None:
    """What the test running when the run stopped (Ctrl-C, a stop signal) measured that no
    report carried: the whole test with outcome `interrupted` when none carried any of it, else
    its late calls; None if there is nothing. Its reads still open are cut off now."""
    recording = router.recording
    if recording is None or not recording.unreported:
        return None
    from pytest_latency.testdata import TestData

    reported_before = recording.reported > 0 or recording.reported_manual > 0
    test = TestData.of(recording.report(), None)
    if reported_before:
        test = _late(test)
    test.outcome = "interrupted"
    return test


def _diagnosed(test: TestData, judgements: Sequence[Judgement]) -> TestData:
    """The record with its findings and figures, once it has calls to diagnose (what only the
    diagnosis read leaves it then)."""
    if not test.calls:
        return test
    from pytest_latency import diagnose

    pool = test.pool
    findings = diagnose.diagnose_test(
        pool, judgements=judgements, policy=test.policy, confidence=test.confidence
    )
    return test.diagnosed(findings, diagnose.test_figures(pool))


def _escaped_while(nodeid: str) -> str:
    """What the capture audit saw the test connect to outside captured clients."""
    from pytest_latency import audit

    log = audit.current()
    escapes = log.connections_of(nodeid) if log is not None else []
    if not escapes:
        return ""
    return "\nIt connected to LLM endpoints outside captured clients: " + "; ".join(
        e.describe() for e in escapes
    )


def _record_properties(
    item: pytest.Item, report: pytest.TestReport, judgements: Sequence[Judgement]
) -> None:
    """Budget results as junitxml <properties> (the report's copy is what junitxml reads)."""
    for j in judgements:
        prop = _property(j)
        item.user_properties.append(prop)
        if prop not in report.user_properties:
            report.user_properties.append(prop)


def _property(j: Judgement) -> tuple[str, str]:
    """A budget's result as a junitxml property: its expression, and pass or fail with why."""
    outcome = ("pass" if j.passed else "fail") + (
        " (inconclusive)" if j.verdict == "inconclusive" else ""
    )
    return (f"latency: {j.expr}", f"{outcome}: {j.message}")


def _xpassed(item: pytest.Item, report: pytest.TestReport) -> str | None:
    """The reason of the `xfail` mark of a test whose body passed (pytest's skipping plugin made
    it an XPASS, or a failure when strict), where a missed budget fulfils the mark: no `raises=`
    on the test's xfail marks. None otherwise (also under `--runxfail`, which sets no XPASS)."""
    if report.passed:
        reason = getattr(report, "wasxfail", None)
    elif report.failed and str(report.longrepr).startswith(_XPASS_STRICT):
        reason = str(report.longrepr)[len(_XPASS_STRICT) :]
    else:
        return None
    if reason is None or any("raises" in mark.kwargs for mark in item.iter_markers("xfail")):
        return None
    return str(reason)


# How pytest's skipping plugin words the failure of a strict xfail test whose body passed.
_XPASS_STRICT = "[XPASS(strict)] "


def _fail_on_misses(report: pytest.TestReport, test: TestData) -> bool:
    """Fail the report of a test that missed a budget or measured nothing; whether it did."""
    if not test.measured_anything:
        report.outcome = "failed"
        report.longrepr = NO_CALLS_HINT + _escaped_while(test.nodeid)
        return True
    from pytest_latency.verdicts import FLAGGED_EXPR

    misses = [j for j in test.judgements if not j.passed]
    if misses:
        report.outcome = "failed"
        budget_missed = any(j.expr != FLAGGED_EXPR for j in misses)
        header = "latency budget missed" if budget_missed else "flagged calls in a budgeted test"
        lines = [f"pytest-latency: {header}", *(f"  {j.message}" for j in misses)]
        errors = test.pool.error_counts()
        if errors:
            listed = ", ".join(f"{kind} ×{count}" for kind, count in errors.most_common())
            lines.append(f"  errors: {listed}")
        report.longrepr = "\n".join(lines)
        return True
    return False
