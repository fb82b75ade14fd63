"""The controller side: gather every test's data, judge the session, summarise, annotate.

Owns `LatencyCollector`, a plugin object registered only on the controller (pytest's junitxml
`LogXML` shape). Each test's data reaches it from the tracker's logreport hook, from this process
or, forwarded by pytest-xdist, from workers, in whatever order. After the run loop it judges the
`[session]` budgets over every kept call and fails the run on a miss. When files will be written,
a stop signal interrupts the session as Ctrl-C does (`_signals.Interruption`): under
pytest-xdist it is forwarded to the workers (their process ids asked for once each starts),
whose tests in flight come back in their `workeroutput` (`_stopped`), as do the price snapshots
their calls were priced with (for the result file's `run.prices`). The result file is marked
partial when the run was interrupted or a pytest-xdist worker went down with an error (its
current test's measurements are lost); an output that could not be written is reported with its
path and makes a run that would have passed exit with status 3 (pytest's INTERNAL_ERROR).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_latency.plugin._annotations import annotation_lines
from pytest_latency.plugin._junit import junit_cases
from pytest_latency.plugin._outputs import Outputs, run_info, write_outputs
from pytest_latency.plugin._sampling import in_flight, judge_joined
from pytest_latency.plugin._signals import Interruption
from pytest_latency.plugin._state import ESCAPED_KEY, HELD_NAME, RunState, Settings
from pytest_latency.plugin._stopped import IN_FLIGHT_KEY, PRICES_KEY, HeldReports

# The mark of a split test's shard in its node id (`_split`), looked for before `_split` loads.
_SHARD = "shard="

if TYPE_CHECKING:
    from pytest_latency.audit import Escape
    from pytest_latency.plugin._split import Joiner
    from pytest_latency.results import ResultBuilder
    from pytest_latency.testdata import TestData
    from pytest_latency.verdicts import Judgement


class LatencyCollector:
    def __init__(self, run: RunState, settings: Settings, outputs: Outputs) -> None:
        self._run = run
        self._settings = settings
        self._outputs = outputs
        self._started = datetime.datetime.now(datetime.timezone.utc)
        self._position: dict[str, int] = {}  # a reported test's nodeid → its index in tests
        self._crashed = False  # a pytest-xdist worker went down with an error
        self._escaped: list[Escape] = []  # the workers' audits' (`audit`)
        self._workers: dict[str, int] = {}  # a running pytest-xdist worker's id → its pid
        self._interruption: Interruption | None = None
        self._joiner: Joiner | None = None  # split tests' shards (`_split`), once one reports
        # The result file is built test by test as records arrive, when anything will read it,
        # so the end of the session only finishes the rollups.
        self._builder: ResultBuilder | None = None
        if outputs.wanted or outputs.baseline is not None or os.environ.get("GITHUB_STEP_SUMMARY"):
            from pytest_latency.results import ResultBuilder

            self._builder = ResultBuilder()

    def collect(self, report: pytest.TestReport, test: TestData) -> None:
        """One test's record, from its call report or, for calls made after it, its teardown
        report (this process's or a worker's). A split test's shards are held until the last
        one reports, then joined and judged as one test."""
        if test.shard is not None or (test.teardown and _SHARD in test.nodeid):
            joined = self._join(report, test)
            if joined is not None:
                self._add(joined)
            return
        if not test.teardown:
            test.outcome = report.outcome
        self._add(test)

    def _join(self, report: pytest.TestReport | None, test: TestData) -> TestData | None:
        """A shard's record (its call report's, its late calls, or what it had measured when
        the run stopped): the joined test's record once its last shard reported, else None."""
        if self._joiner is None:
            from pytest_latency.plugin._split import Joiner

            self._joiner = Joiner()
        if report is None:
            joined = self._joiner.in_flight(test)
        elif test.teardown:
            return self._joiner.late(test)
        else:
            test.outcome = report.outcome
            joined = self._joiner.add(test)
        if joined is None or joined.teardown:
            return joined
        return judge_joined(report, joined, self._settings)

    def _add_in_flight(self, test: TestData) -> None:
        """What a stopped worker's test in flight measured (a shard's goes to its test)."""
        if _SHARD in test.nodeid:
            joined = self._join(None, test)
            if joined is not None:
                self._add(joined)
            return
        self._add(test)

    def _add(self, test: TestData) -> None:
        """A record: a test's, or its late calls (added to the test's record if it has one)."""
        position = self._position.get(test.nodeid)
        if test.teardown and position is not None:
            # The late calls join what the call report brought; they are fixtures' calls,
            # outside any sample, so its pool, verdicts and findings stand.
            updated = self._run.tests[position] = self._run.tests[position].with_late(test)
            if self._builder is not None:
                self._builder.replace(position, updated)
            return
        self._position[test.nodeid] = len(self._run.tests)
        self._run.tests.append(test)
        if self._builder is not None:
            self._builder.add(test)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self._builder is None:  # only a run that writes files has anything to save
            return
        # Under pytest-xdist a terminal's Ctrl-C reaches the workers too; pytest's own
        # KeyboardInterrupt on the controller would not wait for their tests in flight.
        distributed = session.config.pluginmanager.hasplugin("dsession")
        interruption = Interruption(lambda: list(self._workers.values()), sigint=distributed)
        if interruption.install():
            self._interruption = interruption
            self._run.restore_signals = interruption.restore
            session.config.pluginmanager.register(HeldReports(interruption), HELD_NAME)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        # pytest-xdist, before the worker starts its session: its pid, to forward a stop signal.
        if self._builder is not None:
            pid = _worker_pid(node)
            if pid is not None:
                self._workers[str(node.gateway.id)] = pid

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        # pytest-xdist: a worker finished, crashed, was killed or interrupted (a clean finish
        # has no error). A crashed one's current test is lost, so the run is partial; xdist
        # itself reports that test as failed, "worker 'gw0' crashed while running ...". One
        # that was stopped sent its test in flight.
        gateway = getattr(node, "gateway", None)
        self._workers.pop(str(getattr(gateway, "id", "")), None)  # its pid may be reused
        if error is not None:
            self._crashed = True
        output = getattr(node, "workeroutput", None)
        escaped = output.pop(ESCAPED_KEY, None) if isinstance(output, dict) else None
        if isinstance(escaped, list):
            from pytest_latency.audit import Escape

            self._escaped.extend(Escape.from_dict(e) for e in escaped if isinstance(e, dict))
        used = output.get(PRICES_KEY) if isinstance(output, dict) else None
        if isinstance(used, dict) and used:
            # The worker's price stamp joins this process's (`pricing.Prices.saw`).
            self._run.router.prices().saw(
                {str(k): None if v is None else str(v) for k, v in used.items()}
            )
        data = output.pop(IN_FLIGHT_KEY, None) if isinstance(output, dict) else None
        if isinstance(data, dict):
            from pytest_latency.testdata import TestData

            if self._interruption is None:
                self._add_in_flight(TestData.from_wire(data))
                return
            with self._interruption.held():  # a stop must not leave a record half added
                self._add_in_flight(TestData.from_wire(data))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        try:
            result = yield
        finally:
            if self._interruption is not None:
                self._interruption.end()  # from here a stop signal waits for the outputs
            # Split tests some shard of which never reported (a crashed worker, a stopped
            # run): what the others measured stays in the outputs.
            if self._joiner is not None:
                for joined in self._joiner.leftovers():
                    self._add(judge_joined(None, joined, self._settings))
        budget_file = self._settings.budget_file
        if budget_file is not None and budget_file.session:
            from pytest_latency.pools import Pool
            from pytest_latency.verdicts import judge

            judgements = judge(
                budget_file.session,
                Pool.merged(t.pool for t in self._run.tests),
                policy=self._settings.policy,
                flagged=self._settings.flagged,
            )
            self._run.session_judgements = judgements
            # By pytest_sessionfinish it is too late to change the exit status; a failed count
            # here makes it TESTS_FAILED like any failing test.
            if not all(j.passed for j in judgements):
                session.testsfailed += 1
        self._audit()
        if self._outputs.baseline is not None:
            self._compare_with_baseline(session)
        # Before junitxml's sessionfinish writes the file.
        junit_cases(session.config, self._run)
        return result

    def _audit(self) -> None:
        """This process's and the workers' escapes, as the run's one list and finding."""
        from pytest_latency import audit

        own = self._run.audit.escapes() if self._run.audit is not None else []
        self._run.escaped = audit.merge([*own, *self._escaped])
        if self._run.escaped:  # diagnose imports metrics: ~0.2 s a run that escaped nothing
            from pytest_latency import diagnose

            self._run.escaped_finding = diagnose.escaped_finding(self._run.escaped)

    def _result(self, session: pytest.Session, *, partial: bool) -> dict[str, Any]:
        """The run's result file, built once (the baseline comparison and the outputs share
        it unless the run was interrupted in between)."""
        if self._built is not None and self._built[0] == partial:
            return self._built[1]
        from pytest_latency.results import ResultBuilder, baseline_block

        if self._builder is None:
            self._builder = ResultBuilder()
            for test in self._run.tests:
                self._builder.add(test)
        comparison = self._run.comparison
        result = self._builder.result(
            session_budgets=self._run.session_judgements,
            partial=partial,
            run=run_info(session.config, self._started),
            session_policy=self._settings.policy,
            escaped=self._run.escaped_finding,
            baseline=None
            if comparison is None
            else baseline_block(comparison, str(self._outputs.baseline_path)),
        )
        self._built = (partial, result)
        return result

    _built: tuple[bool, dict[str, Any]] | None = None

    def _compare_with_baseline(self, session: pytest.Session) -> None:
        """Every test with data, every group and the session against the baseline; a
        regression fails the run and is written into every output (docs/ci.md)."""
        from pytest_latency.results import compare_results

        assert self._outputs.baseline is not None
        head = self._result(session, partial=self._crashed)
        self._run.comparison = compare_results(
            self._outputs.baseline, head, tolerance=self._outputs.tolerance
        )
        self._built = None  # the file carries the comparison from here on
        if self._run.comparison.regressions:
            session.testsfailed += 1

    # First: pytest-xdist's own sessionfinish tears the workers down, waiting up to 10 s for
    # a busy one; an interrupted run must have written its files before that (CI sends SIGKILL
    # a few seconds after SIGTERM). Every report the run will get has arrived by now.
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._run.restore_signals is not None:
            # From here a stop signal terminates as before: the outputs are being written.
            self._run.restore_signals()
            self._run.restore_signals = None
        self._interruption = None
        partial = exitstatus == pytest.ExitCode.INTERRUPTED or self._crashed
        # Ctrl-C or a stop signal inside a test of this process: keep what it measured.
        test = in_flight(self._run.router)
        if test is not None:
            self._add(test)
            self._built = None
        if not (self._outputs.wanted or os.environ.get("GITHUB_STEP_SUMMARY")):
            return
        try:
            result = self._result(session, partial=partial)
        except Exception as exc:  # a reporting failure must not hide the test results
            self._run.write_failures = [f"could not build the result file: {exc!r}"]
        else:
            written = write_outputs(self._outputs, result)
            self._run.written, self._run.write_failures = written.lines, written.failures
        if self._run.write_failures and session.exitstatus == pytest.ExitCode.OK:
            # pytest returns session.exitstatus after this hook. A run that fails or was
            # interrupted keeps its own status; one that passed must not look complete.
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self._run.tests:
            from pytest_latency.terminal import summary_lines

            terminalreporter.write_sep("=", "latency summary")
            regressed = self._run.comparison.regressed_tests() if self._run.comparison else {}
            prices = self._run.router.prices
            for line in summary_lines(
                self._run.tests, regressed=regressed, prices=lambda: prices().table().to_dict()
            ):
                terminalreporter.write_line(line)
        self._write_findings(terminalreporter)
        if self._run.escaped:
            terminalreporter.write_sep("-", "latency capture audit")
            for escape in self._run.escaped:
                terminalreporter.write_line(escape.describe(), yellow=True)
            finding = self._run.escaped_finding
            assert finding is not None
            terminalreporter.write_line(
                f"pytest-latency: {finding.message}", yellow=True, bold=True
            )
        judgements: list[Judgement] = self._run.session_judgements
        if judgements:
            terminalreporter.write_sep("-", "latency session budgets")
            for j in judgements:
                mark = "PASS" if j.passed else "FAIL"
                terminalreporter.write_line(f"{mark} {j.message}")
            misses = [j for j in judgements if not j.passed]
            if misses:
                terminalreporter.write_line(
                    f"pytest-latency: {len(misses)} session budget(s) missed: "
                    + "; ".join(j.expr for j in misses),
                    red=True,
                    bold=True,
                )
        comparison = self._run.comparison
        if comparison is not None and comparison.regressions:
            from pytest_latency.results import describe, describe_rollup

            terminalreporter.write_sep("-", "latency regressions against the baseline")
            for change in comparison.regressions:
                if change.scope == "test":
                    terminalreporter.write_line(describe(change), red=True)
            for changes in comparison.rollup_regressions().values():
                terminalreporter.write_line(describe_rollup(changes), red=True)
            terminalreporter.write_line(
                f"pytest-latency: {len(comparison.regressions)} regression(s) against the "
                f"baseline {self._outputs.baseline_path}",
                red=True,
                bold=True,
            )
        for line in self._run.written:
            terminalreporter.write_sep("-", line)
        for failure in self._run.write_failures:
            terminalreporter.write_line(f"pytest-latency: {failure}", red=True, bold=True)
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for line in annotation_lines(self._run):
                terminalreporter.write_line(line)

    def _write_findings(self, terminalreporter: pytest.TerminalReporter) -> None:
        diagnosed = [(t.nodeid, t.findings) for t in self._run.tests if t.findings]
        if not diagnosed:
            return
        from pytest_latency.diagnose import summary_lines as finding_lines

        terminalreporter.write_sep("-", "latency diagnosis")
        for nodeid, findings in diagnosed:
            terminalreporter.write_line(nodeid)
            for line in finding_lines(findings):
                terminalreporter.write_line(f"  {line}")


def _worker_pid(node: Any) -> int | None:
    """The process id of a pytest-xdist worker that is this process's child (a popen gateway;
    one on another machine, or started through another, is never signalled), asked of the
    worker itself through execnet's public `remote_exec`, before pytest-xdist starts it."""
    gateway = getattr(node, "gateway", None)
    if gateway is None or not getattr(gateway.spec, "popen", False):
        return None
    try:
        channel = gateway.remote_exec("import os; channel.send((os.getpid(), os.getppid()))")
        pid, parent = channel.receive(timeout=10)
        channel.waitclose(timeout=10)  # done before pytest-xdist's own remote_exec
    except Exception:  # no pid: a stop signal then interrupts at once, as without workers
        return None
    return int(pid) if parent == os.getpid() else None
