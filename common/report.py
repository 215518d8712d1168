"""Markdown tables for reports and CLI output."""

from __future__ import annotations

import math


def significant(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits (what a number on a page means: 0.1094,
    not 0.10938815522327412); NaN and inf unchanged."""
    if not math.isfinite(value) or value == 0:
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """Rows of dicts as a GitHub markdown table (columns default to first-seen key order)."""
    if not rows:
        return "(no rows)\n"
    if columns is None:
        columns = []
        for row in rows:
            columns.extend(k for k in row if k not in columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)).replace("|", "\\|") for c in columns) + " |")
    return "\n".join(lines) + "\n"
