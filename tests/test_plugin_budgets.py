"""budgets.toml in the plugin, sequential sampling, the inconclusive policy, the session gate, and
the CI outputs (junitxml properties, GitHub annotations). Values are recorded by hand through the
`latency` fixture, so every verdict here is exact and needs no network."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INI = """[pytest]
console_output_style = classic
asyncio_default_fixture_loop_scope = function
markers = slowpath: a marker a budget rule selects
"""

# Deterministic "latencies": a spread of values whose every percentile is known.
SPREAD = "[100 + (i * 37) % 50 for i in range(10_000)]"  # 100..149 ms


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makepyfile(
        test_inner_chat=f"""
        import pytest

        VALUES = {SPREAD}
        RUNS = {{}}

        def _record(latency, name, offset_ms=0):
            i = RUNS.get(name, 0)
            RUNS[name] = i + 1
            latency.record("ttft", VALUES[i] + offset_ms, unit="ms")

        def test_fast(latency):
            _record(latency, "fast")

        @pytest.mark.slowpath
        def test_slow(latency):
            _record(latency, "slow", offset_ms=400)

        def test_zz_runs():
            print("RUNS", sorted(RUNS.items()))
        """
    )
    return pytester


def test_a_budgets_file_selects_tests_by_glob_and_marker(tester: pytest.Pytester) -> None:
    tester.makefile(
        ".toml",
        budgets="""
        [defaults]
        samples = 5

        [[budget]]
        select = "test_inner_chat.py::test_fast"
        expect = ["ttft.max < 300ms"]

        [[budget]]
        marker = "slowpath"
        expect = ["ttft.max < 300ms"]
        """,
    )
    result = tester.runpytest("--latency-budget=budgets.toml", "-s", "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*budgets=budgets.toml (2 rules)*",
            "*RUNS ?('fast', 5), ('slow', 5)?",  # fnmatch: ? stands for the brackets
            "*ttft.max = 548 ms > 300 ms*",
        ]
    )


def test_a_marker_beats_the_file_for_its_test(tester: pytest.Pytester) -> None:
    tester.makefile(
        ".toml",
        budgets="""
        [[budget]]
        select = "*"
        expect = ["ttft.max < 10ms"]
        """,
    )
    tester.makepyfile(
        test_inner_marker="""
        import pytest

        @pytest.mark.latency("ttft.max < 1s", samples=3)
        def test_own(latency):
            latency.record("ttft", 0.5)
        """
    )
    result = tester.runpytest("--latency-budget=budgets.toml", "test_inner_marker.py")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("[[budget]]\nselect = 'x'\nexpect = ['ttfx.p95 < 1s']\n", "*budgets.toml:3*ttfx*"),
        ("[defaults]\nsamples = 0\n", "*budgets.toml:2*samples*"),
        ("[[budget]\n", "*budgets.toml*"),
        ("[budgetz]\n", "*budgets.toml:1*budgetz*"),
    ],
)
def test_a_bad_budgets_file_is_a_usage_error_before_any_test_runs(
    tester: pytest.Pytester, content: str, expected: str
) -> None:
    (tester.path / "budgets.toml").write_text(content)
    result = tester.runpytest("--latency-budget=budgets.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    result.stdout.no_fnmatch_line("*passed*")
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_every_error_of_the_budgets_file_is_reported_in_file_order(
    tester: pytest.Pytester,
) -> None:
    # Issue #16: only the unknown table on line 6 was reported, not the typo on line 2.
    (tester.path / "budgets.toml").write_text(
        "[defaults]\nsampels = 20\n\n[[budget]]\nselect = '*'\n"
        "[budgetz]\nexpect = ['ttft.p95 < 1s']\n"
    )
    result = tester.runpytest("--latency-budget=budgets.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*pytest-latency: budgets.toml:2: unknown key in [[]defaults] 'sampels'*",
            "budgets.toml:4: a [[][[]budget]] needs 'expect*",
            "budgets.toml:6: unknown top-level table 'budgetz'*",
        ],
        consecutive=True,
    )
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_a_missing_budgets_file_is_a_usage_error(tester: pytest.Pytester) -> None:
    result = tester.runpytest("--latency-budget=nope.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*nope.toml*"])


def test_cli_beats_environment_beats_ini(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    strict = '[[budget]]\nselect = "*test_fast"\nexpect = ["ttft.max < 1ms"]\n'
    lenient = '[[budget]]\nselect = "*test_fast"\nexpect = ["ttft.max < 10s"]\n'
    (tester.path / "strict.toml").write_text(strict)
    (tester.path / "lenient.toml").write_text(lenient)
    tester.makeini(INI + "latency_budget = strict.toml\n")
    args = ["test_inner_chat.py::test_fast"]
    tester.runpytest(*args).assert_outcomes(failed=1)
    monkeypatch.setenv("PYTEST_LATENCY_BUDGET", "lenient.toml")
    tester.runpytest(*args).assert_outcomes(passed=1)
    tester.runpytest("--latency-budget=strict.toml", *args).assert_outcomes(failed=1)


def test_inconclusive_verdicts_draw_more_samples_until_confident(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_inner_sequential=f"""
        import pytest

        VALUES = {SPREAD}
        RUNS = []

        @pytest.mark.latency("ttft.p95 < 200ms", samples=10, max_samples=400)
        def test_needs_more(latency):
            RUNS.append(1)
            latency.record("ttft", VALUES[len(RUNS)], unit="ms")

        def test_zz():
            # 10 → 20 → ... → 400 is up to seven looks, each judged at 1 − 5%/7 confidence
            # (Bonferroni), where a p95 needs 94 values to pass: 10 → 20 → 40 → 80 → 160
            assert len(RUNS) == 160, len(RUNS)
        """
    )
    result = tester.runpytest("test_inner_sequential.py", "-p", "no:randomly")
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize(
    ("policy", "outcomes"),
    [
        # (fixed n=5, estimate over budget), (n=5 and max_samples=6, estimate over budget)
        ("auto", {"failed": 1, "passed": 1}),  # estimate when n is fixed; pass after sampling
        ("estimate", {"failed": 2}),
        ("pass", {"passed": 2}),
        ("fail", {"failed": 2}),
    ],
)
def test_the_policy_decides_what_stays_inconclusive(
    tester: pytest.Pytester, policy: str, outcomes: dict[str, int]
) -> None:
    tester.makepyfile(
        test_inner_policy="""
        import pytest

        # p95 estimates over 200 ms that 5 or 6 values can neither prove nor refute
        VALUES = [120, 130, 140, 150, 260, 125]
        SEEN = {"fixed": 0, "sequential": 0}

        def record(latency, name):
            latency.record("ttft", VALUES[SEEN[name]], unit="ms")
            SEEN[name] += 1

        @pytest.mark.latency("ttft.p95 < 200ms", samples=5)
        def test_fixed(latency):
            record(latency, "fixed")

        @pytest.mark.latency("ttft.p95 < 200ms", samples=5, max_samples=6)
        def test_sequential(latency):
            record(latency, "sequential")
        """
    )
    # max_samples=6 cannot bound a p95 (the collection warning says so): the point here.
    result = tester.runpytest(
        "test_inner_policy.py",
        f"--latency-inconclusive={policy}",
        "-p",
        "no:randomly",
        "-W",
        "ignore::pytest.PytestWarning",
    )
    result.assert_outcomes(**outcomes)
    if policy == "fail":
        result.stdout.fnmatch_lines(["*inconclusive; policy 'fail': fail*"])


def test_a_budget_max_samples_cannot_pass_is_a_warning_at_collection(
    tester: pytest.Pytester,
) -> None:
    # Issue #16: a p99 budget sampled up to 80 spent every sample and could never pass.
    tester.makepyfile(
        test_inner_unreachable="""
        import pytest

        @pytest.mark.latency("e2e.p99 < 10s", "e2e.p50 < 10s", samples=10, max_samples=80)
        def test_p99(latency):
            latency.record("e2e", 0.01)

        @pytest.mark.latency("e2e.p99 < 10s", samples=10, max_samples=500)
        def test_enough(latency):
            latency.record("e2e", 0.01)

        @pytest.mark.latency("e2e.p99 < 10s", samples=20)
        def test_fixed(latency):  # a fixed sample size: the too_few_samples finding's business
            latency.record("e2e", 0.01)
        """
    )
    # This suite makes warnings errors; the inner run shows them, as a default setup does.
    result = tester.runpytest(
        "test_inner_unreachable.py", "--co", "-q", "-W", "default::pytest.PytestWarning"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*SamplingPlanWarning: pytest-latency: test_inner_unreachable.py::test_p99: "
            "'e2e.p99 < 10s' cannot pass with confidence at max_samples=80: it needs 492 values "
            "(at one call per sample, sampled 10 → 492); raise max_samples to 492 or budget a "
            "lower percentile",
        ]
    )
    assert result.stdout.str().count("SamplingPlanWarning") == 1
    # The number is the one the verdict needs: at max_samples=492 the p99 can pass.
    from pytest_latency.budgets import parse_expectation
    from pytest_latency.verdicts import confidence_for_looks, looks_for, samples_needed
    from pytest_latency.verdicts import values_needed as needed

    p99 = parse_expectation("e2e.p99 < 10s", source="t")
    assert needed(p99, confidence_for_looks(looks_for(10, 492))) == 492
    assert samples_needed(p99, 10, 492) is None and samples_needed(p99, 10, 491) == 492
    # Under `filterwarnings = error` it is a collection error naming the test, not a crash.
    tester.makeini(INI + "filterwarnings = error\n")
    result = tester.runpytest("test_inner_unreachable.py", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*SamplingPlanWarning (an error under filterwarnings): pytest-latency: *::test_p99: *"]
    )
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


@pytest.mark.parametrize(
    ("policy", "what"),
    [
        ("pass", "it stayed inconclusive and policy 'pass' passed it"),
        ("fail", "it stayed inconclusive and policy 'fail' failed it"),
        ("estimate", "it stayed inconclusive and was passed on the point estimate"),
    ],
)
def test_too_few_samples_says_what_the_policy_did(
    tester: pytest.Pytester, policy: str, what: str
) -> None:
    # Issue #16: it said the verdict "rests on the point estimate alone" under policy 'pass'.
    # The diagnosis reads calls: the simulator's, each a few milliseconds.
    tester.makepyfile(
        test_inner_few="""
        import pytest

        def ask(client):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])

        @pytest.mark.latency("e2e.p99 < 10s", samples=20)
        def test_few(openai_client):
            ask(openai_client)

        @pytest.mark.latency("e2e.p99 < 1us", samples=20)
        def test_few_and_over(openai_client):
            ask(openai_client)
        """
    )
    result = tester.runpytest(
        "test_inner_few.py",
        "--latency-sim=instant",
        f"--latency-inconclusive={policy}",
        "-p",
        "no:randomly",
    )
    result.stdout.fnmatch_lines(
        [
            "test_inner_few.py::test_few",
            "  too_few_samples: e2e.p99 < 10s was judged on 20 values; its upper confidence "
            f"bound needs at least 299 (95%) to pass with confidence, so {what}*",
        ]
    )
    # Twenty calls all slower than 1 µs: a confident failure, whatever the policy.
    result.stdout.fnmatch_lines(
        ["*e2e.p99 < 1us was judged on 20 values*so it could only fail, and failed with*"]
    )
    assert "rests on the point estimate" not in result.stdout.str()


def test_an_unknown_policy_in_the_ini_file_is_a_usage_error(tester: pytest.Pytester) -> None:
    tester.makeini(INI + "latency_inconclusive = maybe\n")
    result = tester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*latency_inconclusive*maybe*auto, estimate, pass, fail*"])


def test_session_budgets_pool_every_test_and_fail_the_run(tester: pytest.Pytester) -> None:
    tester.makefile(
        ".toml",
        budgets="""
        [session]
        expect = ["ttft.max < 300ms", "ttft.min < 200ms"]
        """,
    )
    result = tester.runpytest("--latency-budget=budgets.toml")
    # every test passes on its own; the run fails on the session budget
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*latency session budgets*",
            "FAIL ttft.max = * > 300 ms*",
            "PASS ttft.min = *",
            "*1 session budget(s) missed: ttft.max < 300ms*",
        ]
    )


def test_budget_results_become_junitxml_properties(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        test_inner_junit="""
        import pytest

        @pytest.mark.latency("ttft.max < 1s")
        def test_it(latency):
            latency.record("ttft", 0.1)
        """
    )
    tester.runpytest("test_inner_junit.py", "--junitxml=out.xml").assert_outcomes(passed=1)
    xml = (tester.path / "out.xml").read_text()
    assert 'name="latency: ttft.max &lt; 1s"' in xml
    assert "pass: ttft.max = 0.1 s &lt; 1 s (n=1)" in xml


def test_github_annotations_point_at_the_failing_test(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tester.makepyfile(
        test_inner_gha="""
        import pytest


        @pytest.mark.latency("ttft.max < 1ms")
        def test_it(latency):
            latency.record("ttft", 0.1)
        """
    )
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = tester.runpytest("test_inner_gha.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            # the line of the decorator that set the budget (pytest's location of the test)
            "::error file=test_inner_gha.py,line=4,title=latency budget::"
            "test_inner_gha.py::test_it: ttft.max = 100 ms > 1 ms*"
        ]
    )
    monkeypatch.delenv("GITHUB_ACTIONS")
    tester.runpytest("test_inner_gha.py").stdout.no_fnmatch_line("::error*")


def test_a_missed_budget_fulfils_an_xfail_mark_and_a_met_one_is_an_xpass(
    pytester: pytest.Pytester,
) -> None:
    """A missed budget is the test failing: under `xfail` it is the expected failure (XFAIL), a
    met one an XPASS (a failure when strict); `raises=` names an exception a budget never
    raises, so a miss there stays a failure, and `--runxfail` ignores the mark."""
    pytester.makeini(INI)
    pytester.makepyfile(
        test_inner_xfail="""
        import pytest

        @pytest.mark.xfail(reason="known slow")
        @pytest.mark.latency("ttft.max < 100ms")
        def test_missed(latency):
            latency.record("ttft", 250, unit="ms")

        @pytest.mark.xfail(reason="known slow", strict=True)
        @pytest.mark.latency("ttft.max < 100ms")
        def test_missed_strict(latency):
            latency.record("ttft", 250, unit="ms")

        @pytest.mark.xfail(reason="known slow")
        @pytest.mark.latency("ttft.max < 100ms")
        def test_met(latency):
            latency.record("ttft", 50, unit="ms")

        @pytest.mark.xfail(reason="known slow", strict=True)
        @pytest.mark.latency("ttft.max < 100ms")
        def test_met_strict(latency):
            latency.record("ttft", 50, unit="ms")

        @pytest.mark.xfail(reason="flaky parser", raises=ValueError)
        @pytest.mark.latency("ttft.max < 100ms")
        def test_missed_other_reason(latency):
            latency.record("ttft", 250, unit="ms")
        """
    )
    result = pytester.runpytest("-rxXf")
    result.assert_outcomes(xfailed=2, xpassed=1, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "XFAIL test_inner_xfail.py::test_missed - known slow",
            "XFAIL test_inner_xfail.py::test_missed_strict - known slow",
            "XPASS test_inner_xfail.py::test_met - known slow",
            "FAILED test_inner_xfail.py::test_met_strict*XPASS(strict)*known slow*",
            "FAILED test_inner_xfail.py::test_missed_other_reason*",
        ]
    )
    # The other reason's miss, told as any miss is.
    result.stdout.fnmatch_lines(["*latency budget missed", "  ttft.max = 250 ms > 100 ms (n=1)"])
    pytester.runpytest("--runxfail").assert_outcomes(passed=2, failed=3)
