"""``python -m pytest_latency.sim``: the simulated endpoint in the foreground, no plugin CLI.

Owns nothing but argument wiring (the same flags as ``pytest-latency sim``); used by the benchmark
to run the server in its own process. Imports only the stdlib and the sim package.
"""

from __future__ import annotations

import argparse
import sys

from . import SimSettingsError, add_sim_arguments, model_from_args, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_latency.sim", description="Run the simulated LLM endpoint."
    )
    add_sim_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        model = model_from_args(ns)
    except SimSettingsError as exc:
        parser.error(str(exc))
    serve(model, ns.host, ns.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
