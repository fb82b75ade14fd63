"""pytest_latency.sim: a simulated LLM endpoint with a latency model and a ground-truth log.

Serves OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and Gemini's generateContent
(streamed and not) on loopback with a precise, seeded send schedule, a prefix cache, faults, a
concurrency limit with a wait queue and 429s over it, and per-request overrides, and records what
it sent and when (`TruthRecord`); `expected_under_load` says what the model predicts at C
concurrent clients. The plugin's fixture and the ``pytest-latency sim`` command are built on this
public API; everything else in the package is private. The package imports only the stdlib and
aiohttp, never pytest nor the rest of pytest_latency. See docs/simulator.md.
"""

from __future__ import annotations

from ._args import add_sim_arguments, model_from_args
from ._load import LoadPrediction, expected_under_load
from ._model import FAULTS, PRESETS, LatencyModel, SimSettingsError
from ._server import SimServer, serve
from ._truth import TruthEvent, TruthRecord

__all__ = [
    "FAULTS",
    "PRESETS",
    "LatencyModel",
    "LoadPrediction",
    "SimServer",
    "SimSettingsError",
    "TruthEvent",
    "TruthRecord",
    "add_sim_arguments",
    "expected_under_load",
    "model_from_args",
    "serve",
]
