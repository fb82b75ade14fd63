"""The `pytest-latency` console script.

Owns command-line parsing and dispatch for the standalone commands: `sim` (serve the simulated
LLM endpoint) today; `report`, `merge` and `compare` join it as the result file lands. Each
subcommand is a thin layer over a library module. May import `sim` and the result-file modules;
never pytest, never `plugin`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pytest_latency import __version__


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    # `sim` is the only command so far; argparse rejects anything else.
    from pytest_latency.sim import SimSettingsError, model_from_args, serve

    try:
        model = model_from_args(args)
    except SimSettingsError as exc:
        parser.error(str(exc))
    serve(model, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
