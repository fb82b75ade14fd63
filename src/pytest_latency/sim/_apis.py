"""The registry of simulated wire formats: every module implementing `_wire.WireFormat`.

Owns which APIs the simulator serves (one entry per wire module; the server adds a route per
entry). Adding a simulated API is one module and its line here. Imports only the wire modules and
`_wire`.
"""

from __future__ import annotations

from . import _anthropic, _gemini, _openai_chat, _openai_responses
from ._wire import WireFormat

WIRE_FORMATS: tuple[WireFormat, ...] = (_openai_chat, _openai_responses, _anthropic, _gemini)

__all__ = ["WIRE_FORMATS"]
