"""Reports rendered from a result file: one self-contained HTML page and a Markdown summary.

Owns presentation only: `render_html` (jinja2 with autoescape, inline SVG charts computed in
Python, no network), `render_markdown` (a PR-comment summary) and `render_comparison` (the
Markdown diff of two runs). Input is the result file dict built by `pytest_latency.results`;
nothing here recomputes a metric. The only package that imports jinja2, and only `_html` does;
may import `results` and `histogram`; never pytest.
"""

from __future__ import annotations

from pytest_latency.report._html import render_html
from pytest_latency.report._markdown import render_comparison, render_markdown

__all__ = ["render_comparison", "render_html", "render_markdown"]
