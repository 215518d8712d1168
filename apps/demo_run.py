"""``make demo``: the quick end-to-end run of the core and every landed app.

Writes ``<out>/report.md``, ``<out>/summary.csv``, one CSV per app and the apps' plots, and prints
the summary table. An app that fails is reported as failed and makes the run exit non-zero.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from apps.registry import APPS, CORE
from common.data_dir import resolve_data_dir
from common.errors import DataError
from common.io import atomic_write, write_csv
from common.report import markdown_table

COLUMNS = ["app", "task", "method", "metric", "value", "split", "seed"]


def run_all(
    out_dir: Path, data_dir: Path | None, seed: int, only: list[str] | None = None
) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    failed: list[str] = []
    entries = [e for e in (CORE, *APPS) if not only or e.name in only]
    for i, entry in enumerate(entries, 1):
        print(f"==> [{i}/{len(entries)}] {entry.title}", flush=True)
        start = time.perf_counter()
        try:
            app_rows = entry.run_quick(out_dir, data_dir, seed)
        except Exception as exc:  # one app's failure must not hide the others' results
            traceback.print_exc()
            print(f"error: {entry.name} quick run failed: {exc}", file=sys.stderr)
            failed.append(entry.name)
            continue
        rows.extend(app_rows)
        print(f"    done in {time.perf_counter() - start:.0f} s, {len(app_rows)} result rows", flush=True)
    return rows, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moe-apps-demo-run", description=__doc__)
    parser.add_argument("--out", default="results/demo", help="output directory (default results/demo)")
    parser.add_argument(
        "--data-dir", default=None, help="data directory (default $MOE_APPS_DATA or ../shared/data)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", help="run only these apps (by name)")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        data_dir = resolve_data_dir(args.data_dir)
    except DataError as exc:
        print(f"warning: {exc}; apps that need shared data will fail", file=sys.stderr)
        data_dir = None
    rows, failed = run_all(out_dir, data_dir, args.seed, args.only)
    table = markdown_table(rows, COLUMNS)
    write_csv(out_dir / "summary.csv", rows)
    with atomic_write(out_dir / "report.md", "w", encoding="utf-8") as f:
        f.write("# moe-apps quick demo report\n\n")
        f.write(
            f"Seed {args.seed}; each app's own CSV and plots are beside this file. "
            "Quick-run sizes: numbers show the pipeline works, they are not the benchmarks.\n\n"
        )
        f.write(table)
        if failed:
            f.write(f"\nFailed: {', '.join(failed)}\n")
    print("\n" + table)
    print(f"report: {out_dir / 'report.md'}")
    if failed:
        print(f"error: quick run failed for {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
