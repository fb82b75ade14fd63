"""HTML rendering: the view model through one jinja2 template into one self-contained file.

Owns the jinja2 environment (autoescape on for everything, undefined names are errors) and the
single render call. The template draws charts from coordinates and writes every string through
autoescape; nothing here or there marks user data safe. The only module importing jinja2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jinja2

from pytest_latency.report._view import build_view


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_latency", "report/templates"),
        autoescape=True,  # explicit, not by file extension (pytest-html's select_autoescape trap)
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(result: Mapping[str, Any]) -> str:
    """One self-contained HTML page (inline CSS, SVG and a little JS; no network access)."""
    view = build_view(result)
    template = _environment().get_template("report.html.jinja")
    return template.render(view=view)
