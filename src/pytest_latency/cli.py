"""The `pytest-latency` console script.

Owns command-line parsing and dispatch for the standalone commands: `sim` (serve the simulated
LLM endpoint), `report` (HTML and Markdown from a result file), `merge` (CI shards into one
result file) and `compare` (a Markdown diff of two runs that fails on a significant
regression). Each subcommand is a thin layer over a library module; heavy modules are imported
by the command that needs them. A bad input file is one line on stderr and exit status 2, never
a traceback. Every output asked for is attempted, each on its own; each that could not be
written is one line naming its path, and a command that would have exited 0 exits 3, as the
plugin does (a comparison that found a regression, or a merge whose budgets failed, keeps its
1). May import `sim`, `results` and `report`; never pytest, never `plugin`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from pytest_latency import __version__

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_BUDGET_FAILED = 1  # merge: a budget of the merged run failed, as pytest exits 1
EXIT_BAD_INPUT = 2  # and usage errors (argparse's own status)
EXIT_WRITE_FAILED = 3  # an output that could not be written: the plugin's status for it too


def _parser() -> argparse.ArgumentParser:
    from pytest_latency.sim import add_sim_arguments

    parser = argparse.ArgumentParser(
        prog="pytest-latency", description="Tools around pytest-latency's measurements."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim = commands.add_parser(
        "sim",
        help="serve the simulated LLM endpoint (OpenAI Chat/Responses, Anthropic Messages)",
        description="Serve the simulated LLM endpoint on loopback until interrupted.",
    )
    add_sim_arguments(sim)

    report = commands.add_parser(
        "report",
        help="render the HTML report (and a Markdown summary) from a result file",
        description="Render a self-contained HTML report from a --latency-json result file.",
    )
    report.add_argument("result", metavar="RESULT.json")
    report.add_argument("-o", "--output", metavar="REPORT.html", help="HTML file to write")
    report.add_argument("--markdown", metavar="OUT.md", help="also write a Markdown summary")

    merge = commands.add_parser(
        "merge",
        help="merge the result files of CI shards into one",
        description=(
            "Merge result files (exact histogram merge); tests are concatenated and the "
            "[session] budgets judged again over every shard. Exits 1 when a budget of the "
            "merged run failed, 2 on bad input, 3 when the output could not be written."
        ),
    )
    merge.add_argument("results", metavar="RESULT.json", nargs="+")
    merge.add_argument("-o", "--output", metavar="ALL.json", required=True)

    compare = commands.add_parser(
        "compare",
        help="compare two runs; exit 1 on a significant regression",
        description=(
            "Compare HEAD against BASE per test, group and session, metric by metric (ttft, "
            "tpot, itl, e2e, turn). A regression is a p50 or p95 slower by more than the "
            "tolerance and significant by a one-sided Mann-Whitney U test (p < 0.05 after Holm's "
            "adjustment over every comparison). Exit status: 0 none, 1 regression, 2 bad input, "
            "3 the output could not be written."
        ),
    )
    compare.add_argument("base", metavar="BASE.json")
    compare.add_argument("head", metavar="HEAD.json")
    compare.add_argument(
        "--tolerance",
        default="10%",
        type=_tolerance,
        help="relative slowdown ignored as noise, e.g. 10%% or 0.1 (default: 10%%)",
    )
    compare.add_argument("-o", "--output", metavar="DIFF.md", help="write the Markdown here")
    return parser


def _tolerance(text: str) -> float:
    from pytest_latency.budgets import BudgetError, parse_tolerance

    try:
        return parse_tolerance(text)
    except BudgetError as exc:
        raise argparse.ArgumentTypeError(f"not a tolerance: {text!r} ({exc.reason})") from None


def _fail(message: str) -> int:
    print(f"pytest-latency: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _write_all(outputs: Sequence[tuple[str, Callable[[], str]]], status: int = EXIT_OK) -> int:
    """Render and write each output on its own, one that cannot be written costing no other;
    `status`, or EXIT_WRITE_FAILED if it was OK and a write failed (each failure one line)."""
    from pytest_latency.results import WriteError, write_atomic

    failed = False
    for path, render in outputs:
        try:
            write_atomic(path, render())
        except WriteError as exc:
            print(f"pytest-latency: error: {exc}", file=sys.stderr)
            failed = True
    return EXIT_WRITE_FAILED if failed and status == EXIT_OK else status


def _report(args: argparse.Namespace) -> int:
    from pytest_latency.report import render_html, render_markdown
    from pytest_latency.results import load_result

    result = load_result(args.result)
    if not args.output and not args.markdown:
        return _fail("report: give -o REPORT.html and/or --markdown OUT.md")
    outputs: list[tuple[str, Callable[[], str]]] = []
    if args.output:
        outputs.append((args.output, lambda: render_html(result)))
    if args.markdown:
        outputs.append((args.markdown, lambda: render_markdown(result)))
    return _write_all(outputs)


def _merge(args: argparse.Namespace) -> int:
    from pytest_latency.results import dumps, load_result, merge_results, verdict_counts

    merged = merge_results([load_result(p) for p in args.results])
    missed = verdict_counts(merged)["fail"]
    status = _write_all(
        [(args.output, lambda: dumps(merged))], EXIT_BUDGET_FAILED if missed else EXIT_OK
    )
    if missed:
        # The merged file is the run's verdict: a budget missed in a shard, or a [session]
        # budget missed over all of them once judged again, fails it as pytest would have.
        print(
            f"pytest-latency: {missed} latency budget(s) failed in the merged run ({args.output})",
            file=sys.stderr,
        )
    return status


def _compare(args: argparse.Namespace) -> int:
    from pytest_latency.report import render_comparison
    from pytest_latency.results import compare_results, load_result

    base, head = load_result(args.base), load_result(args.head)
    comparison = compare_results(base, head, tolerance=args.tolerance)
    text = render_comparison(comparison, base=args.base, head=args.head)
    status = EXIT_REGRESSION if comparison.regressions else EXIT_OK
    if not args.output:
        sys.stdout.write(text)
        return status
    return _write_all([(args.output, lambda: text)], status)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "sim":
        from pytest_latency.sim import SimSettingsError, model_from_args, serve

        try:
            model = model_from_args(args)
        except SimSettingsError as exc:
            parser.error(str(exc))
        try:
            serve(model, args.host, args.port)
        except OSError as exc:  # the port taken, the host not ours: one line, not a traceback
            # aiohttp's text repeats the address; the errno's own words do not.
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            return _fail(f"sim: cannot listen on {args.host}:{args.port}: {reason}")
        return EXIT_OK
    from pytest_latency.results import ResultError

    handlers = {"report": _report, "merge": _merge, "compare": _compare}
    try:
        return handlers[args.command](args)
    except ResultError as exc:  # names its file
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc))
    except (KeyError, TypeError, ValueError) as exc:
        # load_result checked every field the commands read, so this is a bug, not a bad file:
        # still one line, naming the files it happened with.
        detail = " ".join(str(exc).split())[:200]
        return _fail(f"{', '.join(_inputs(args))}: cannot read: {type(exc).__name__}: {detail}")


def _inputs(args: argparse.Namespace) -> list[str]:
    if args.command == "merge":
        return list(args.results)
    if args.command == "compare":
        return [args.base, args.head]
    return [args.result]


if __name__ == "__main__":
    sys.exit(main())
