"""Command-line flags for the simulator: one flag per latency-model field, plus host/port/preset.

Owns `add_sim_arguments` (used by ``pytest-latency sim`` and the benchmark) and `model_from_args`,
which applies the explicitly given flags on top of the chosen preset and validates the result.
Flags default to "not given" so a preset is only overridden by what the user typed. Imports only
the stdlib and `_model`.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._model import PRESETS, LatencyModel, SimSettingsError, field_docs, parse_override_json

__all__ = ["add_sim_arguments", "model_from_args"]


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--host --port --preset --model-json`` and a ``--<field>`` flag per model field."""
    group = parser.add_argument_group("simulated endpoint")
    group.add_argument(
        "--host", default="127.0.0.1", help="Interface to bind (default: %(default)s)."
    )
    group.add_argument(
        "--port",
        type=int,
        default=8000,
        help="Port to listen on; 0 picks a free one (default: %(default)s).",
    )
    group.add_argument(
        "--preset",
        default="default",
        help=f"Starting latency model: {', '.join(PRESETS)} (default: %(default)s).",
    )
    group.add_argument(
        "--model-json",
        dest="sim_model_json",
        default=None,
        metavar="JSON",
        help="Field overrides as a JSON object, e.g. '{\"ttfb_ms\": 50}'; flags win over it.",
    )
    for name, kind, default, doc in field_docs():
        group.add_argument(
            "--" + name.replace("_", "-"),
            dest=f"sim_{name}",
            default=None,
            metavar=kind.upper(),
            # Values are validated by LatencyModel so the error names the field the same way
            # everywhere (CLI, per-request override, Python API).
            type=str,
            help=f"{doc.help} [{doc.unit}] (default: {default!r} or the preset's)",
        )


def model_from_args(ns: argparse.Namespace) -> LatencyModel:
    """The model the flags describe: preset, then ``--model-json``, then individual flags."""
    model = LatencyModel.preset(getattr(ns, "preset", None) or "default")
    raw: dict[str, Any] = {}
    text = getattr(ns, "sim_model_json", None)
    if text:
        raw.update(parse_override_json(text, "--model-json"))
    for name, _kind, _default, _doc in field_docs():
        value = getattr(ns, f"sim_{name}", None)
        if value is not None:
            raw[name] = value
    if not raw:
        return model
    try:
        return model.with_overrides(raw)
    except SimSettingsError as exc:
        raise SimSettingsError(f"{exc} (command line)") from None
