"""Search speed benchmark (``moa3cir bench --suite search``): NumPy brute force vs faiss exact
vs IVF (an nprobe sweep) on a clustered gallery of random unit vectors (default 1M x 256), with
the same number of threads on both sides; the rows and a summary of the targets go to
``search_bench.csv/.json``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from common.errors import InputError
from common.io import write_csv, write_json
from common.report import markdown_table

from .index import GalleryIndex


def run_search_bench(
    out_dir: Path,
    n: int = 1_000_000,
    d: int = 256,
    n_queries: int = 1000,
    k: int = 10,
    nlist: int = 1024,
    nprobes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64),
    train_size: int = 100_000,
    threads: int = 1,
    seed: int = 0,
    log=print,
    full_sort: bool = True,
) -> list[dict]:
    """NumPy brute force (argpartition, and with ``full_sort`` also a full argsort) vs faiss ``IndexFlatIP`` vs IVF (an nprobe sweep) on a clustered gallery.

    Both sides run with the same number of ``threads`` (BLAS via threadpoolctl, faiss OpenMP),
    so the comparison is per core. Writes ``search_bench.csv/.json``; returns the rows, the last
    one a summary of the targets (exact >= 5x NumPy with identical results; the smallest
    nprobe with IVF recall@10 >= 0.95 of exact, and whether it is >= 10x faster than exact)."""
    import faiss
    from threadpoolctl import threadpool_limits

    if n < nlist or n_queries < 1 or k < 1:
        raise InputError("search bench needs n >= nlist, n_queries >= 1 and k >= 1")
    faiss.omp_set_num_threads(threads)
    with threadpool_limits(threads):
        return _search_bench(
            Path(out_dir), n, d, n_queries, k, nlist, nprobes, train_size, threads, seed, log, full_sort
        )


def clustered_gallery(n: int, d: int, n_queries: int, seed: int = 0, chunk: int = 100_000):
    """Unit vectors around 256 random centres, (n, d) float32 built in chunks (no float64 copy),
    and (n_queries, d) queries = gallery points + noise."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((256, d), dtype=np.float32)
    gal = np.empty((n, d), np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        x = centers[rng.integers(0, 256, m)] + 0.7 * rng.standard_normal((m, d), dtype=np.float32)
        gal[s : s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    q = gal[rng.integers(0, n, n_queries)] + 0.1 * rng.standard_normal((n_queries, d), dtype=np.float32)
    return gal, (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def numpy_topk(
    q: np.ndarray, gal: np.ndarray, k: int, block: int = 64, select: str = "partition"
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner product by brute force: matmul, then ``select`` = "partition"
    (``argpartition``, the tuned baseline) or "sort" (a full ``argsort`` of every score row, the
    textbook one), ``block`` queries at a time (scores block (block, n) float32). Returns scores
    and rows (Q, k), best first."""
    if select not in ("partition", "sort"):
        raise ValueError(f"select must be 'partition' or 'sort', got {select!r}")
    rows = np.empty((len(q), k), np.int64)
    scores = np.empty((len(q), k), np.float32)
    for s in range(0, len(q), block):
        sc = q[s : s + block] @ gal.T
        if select == "sort":
            part = np.argsort(-sc, axis=1, kind="stable")[:, :k]
        else:
            part = np.argpartition(-sc, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(sc, part, 1)
        order = np.argsort(-top, axis=1, kind="stable")
        rows[s : s + block] = np.take_along_axis(part, order, 1)
        scores[s : s + block] = np.take_along_axis(top, order, 1)
    return scores, rows


def _timed(fn, *args):
    """(result, wall seconds, CPU seconds of this process) of ``fn(*args)``. With one thread the CPU
    time is the compute time, robust to other jobs on a shared machine; wall time is not."""
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - t, time.process_time() - c


def _search_bench(out_dir, n, d, n_queries, k, nlist, nprobes, train_size, threads, seed, log, full_sort):
    (gal, q), wall, _ = _timed(clustered_gallery, n, d, n_queries, seed)
    log(f"gallery {n} x {d} float32 ({gal.nbytes / 2**30:.2f} GiB) in {wall:.1f} s")
    common = {"n": n, "d": d, "queries": n_queries, "k": k, "threads": threads}

    def timing(wall_s: float, cpu_s: float, ref: dict | None = None, flat: dict | None = None) -> dict:
        out = {"search_s": round(wall_s, 3), "search_cpu_s": round(cpu_s, 3)}
        for name, base in (("numpy", ref), ("flat", flat)):
            if base is not None:
                out[f"speedup_vs_{name}"] = round(base["_wall"] / wall_s, 2)
                out[f"cpu_speedup_vs_{name}"] = round(base["_cpu"] / cpu_s, 2)
        return {**out, "_wall": wall_s, "_cpu": cpu_s}

    (np_scores, np_rows), wall, cpu = _timed(numpy_topk, q, gal, k)
    numpy_row = {**common, "method": "numpy brute force (argpartition)", **timing(wall, cpu)}
    numpy_row.update(speedup_vs_numpy=1.0, cpu_speedup_vs_numpy=1.0)
    log(f"numpy brute force (argpartition): {wall:.2f} s wall, {cpu:.2f} s CPU")
    sort_row = None
    if full_sort:
        (_, sort_rows), wall, cpu = _timed(numpy_topk, q, gal, k, 64, "sort")
        sort_row = {**common, "method": "numpy brute force (full argsort)", **timing(wall, cpu, numpy_row)}
        sort_row["identical_topk_sets"] = round(
            float(np.mean([set(a) == set(b) for a, b in zip(np_rows, sort_rows, strict=True)])), 4
        )
        log(f"numpy brute force (full argsort): {wall:.2f} s wall, {cpu:.2f} s CPU")

    flat = GalleryIndex(d, "flat")
    flat.add(gal)
    (flat_scores, flat_rows), wall, cpu = _timed(flat.search_rows, q, k)
    del flat
    same_set = float(np.mean([set(a) == set(b) for a, b in zip(np_rows, flat_rows, strict=True)]))
    flat_row = {
        **common,
        "method": "faiss IndexFlatIP",
        **timing(wall, cpu, numpy_row),
        f"recall@{k}_vs_exact": round(
            float(np.mean([len(set(a) & set(b)) / k for a, b in zip(np_rows, flat_rows, strict=True)])), 4
        ),
        "identical_topk_sets": round(same_set, 4),
        "identical_topk_order": round(float(np.mean((np_rows == flat_rows).all(1))), 4),
        "max_score_diff": float(np.abs(np_scores - flat_scores).max()),
    }
    flat_row.update(speedup_vs_flat=1.0, cpu_speedup_vs_flat=1.0)
    log(f"faiss flat: {wall:.2f} s wall, {cpu:.2f} s CPU, identical top-{k} sets {same_set:.4f}")
    if sort_row is not None:
        flat_row["speedup_vs_numpy_sort"] = round(sort_row["_wall"] / flat_row["_wall"], 2)
        flat_row["cpu_speedup_vs_numpy_sort"] = round(sort_row["_cpu"] / flat_row["_cpu"], 2)
    ivf_results = []

    ivf = GalleryIndex(d, "ivf", nlist=nlist)
    rng = np.random.default_rng(seed + 1)
    m = min(n, max(train_size, nlist))
    t = time.perf_counter()
    ivf.train(gal[rng.choice(n, size=m, replace=False)])
    ivf.add(gal)
    build_s = time.perf_counter() - t
    log(f"IVF{nlist}: trained on {m} vectors + added {n} in {build_s:.1f} s")
    for nprobe in nprobes:
        ivf.set_nprobe(nprobe)
        (_, found), wall, cpu = _timed(ivf.search_rows, q, k)
        recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(flat_rows, found, strict=True)]))
        ivf_results.append(
            {
                **common,
                "method": f"faiss IVF{nlist} nprobe={nprobe}",
                **timing(wall, cpu, numpy_row, flat_row),
                f"recall@{k}_vs_exact": round(recall, 4),
                "build_s": round(build_s, 1),
            }
        )
        log(f"IVF nprobe={nprobe}: {wall:.3f} s, recall@{k} {recall:.4f}")
    rows = [numpy_row, *([sort_row] if sort_row is not None else []), flat_row, *ivf_results]
    for r in rows:
        r.pop("_wall"), r.pop("_cpu")
    ok = [r for r in ivf_results if r[f"recall@{k}_vs_exact"] >= 0.95]
    chosen = ok[0] if ok else None
    rows.append(
        {
            **common,
            "method": "targets",
            "exact_speedup_vs_numpy": flat_row["speedup_vs_numpy"],
            "exact_cpu_speedup_vs_numpy": flat_row["cpu_speedup_vs_numpy"],
            "exact_identical": same_set == 1.0,
            "exact_target_5x_met": flat_row["speedup_vs_numpy"] >= 5 and same_set == 1.0,
            "exact_speedup_vs_numpy_sort": flat_row.get("speedup_vs_numpy_sort"),
            "exact_target_5x_vs_sort_met": bool(
                sort_row is not None and flat_row["speedup_vs_numpy_sort"] >= 5 and same_set == 1.0
            ),
            "ivf_chosen": chosen["method"] if chosen else "none reaches recall 0.95",
            "ivf_speedup_vs_flat": chosen["speedup_vs_flat"] if chosen else None,
            "ivf_cpu_speedup_vs_flat": chosen["cpu_speedup_vs_flat"] if chosen else None,
            "ivf_target_10x_met": bool(chosen and chosen["speedup_vs_flat"] >= 10),
        }
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "search_bench.csv", rows)
    write_json(out_dir / "search_bench.json", rows)
    print(
        markdown_table(
            rows[:-1],
            [
                "method",
                "search_s",
                "search_cpu_s",
                "speedup_vs_numpy",
                "cpu_speedup_vs_numpy",
                "speedup_vs_flat",
                "cpu_speedup_vs_flat",
                f"recall@{k}_vs_exact",
                "identical_topk_sets",
            ],
        )
    )
    print(markdown_table(rows[-1:]))
    return rows
