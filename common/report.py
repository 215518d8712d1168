"""Markdown tables for reports and CLI output."""

from __future__ import annotations


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
