"""How fast can a 1M x 256 gallery be searched, and at what recall? NumPy brute force vs faiss
exact vs IVF (an nprobe sweep), IVF-PQ (compressed codes, with and without exact re-ranking) and
HNSW on a clustered gallery of random unit vectors (default 1M x 256), with the same number of
threads on every side. Every row has recall@k against exact search, queries/s and the index's
memory per item (its serialised size / n). The rows and a summary of the targets go to
``search_bench.csv/.json`` in ``--out``; ``--json`` also writes them with the settings. This study
chose the index kinds and defaults of ``moa3cir index`` (``retrieval.index``); formerly
``moa3cir bench --suite search`` (same options).

    python -m experiments.retrieval.search_bench --out runs/rsearch --seed 0 --json docs/results/retrieval/search.json
    python -m experiments.retrieval.search_bench --search-methods ivf ivfpq --out runs/rsearch_pq --seed 0 \
        --json docs/results/retrieval/search_ivfpq.json
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from common.cli import ArgumentParser, add_overwrite_arg, check_outputs, cli_main, int_in, seed_int
from common.errors import InputError
from common.io import write_csv, write_json
from common.limits import add_force_arg, gib, physical_memory_bytes
from common.report import markdown_table
from retrieval.bounds import MAX_THREADS
from retrieval.index import GalleryIndex

MAX_SEARCH_N = 1_000_000_000
MAX_SEARCH_QUERIES = 100_000


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
    methods: tuple[str, ...] = ("numpy", "ivf", "ivfpq"),
    pq_m: int = 64,
    pq_nprobe: int = 8,
    reranks: tuple[int, ...] = (0, 4, 16, 64),
) -> list[dict]:
    """NumPy brute force (argpartition, and with ``full_sort`` also a full argsort) vs faiss ``IndexFlatIP`` vs IVF (an nprobe sweep) on a clustered gallery.

    Both sides run with the same number of ``threads`` (BLAS via threadpoolctl, faiss OpenMP),
    so the comparison is per core. ``methods``: which of numpy (brute force), ivf, ivfpq (``pq_m``
    bytes per item, ``pq_nprobe`` cells, re-ranking the top ``r * k`` exactly for r in ``reranks``,
    0 = none)
    and hnsw run beside the exact faiss index, the reference of every recall. Writes ``search_bench.csv/.json``; returns the rows, the last
    one a summary of the targets (exact >= 5x NumPy with identical results; the smallest
    nprobe with IVF recall@10 >= 0.95 of exact, and whether it is >= 10x faster than exact)."""
    import faiss
    from threadpoolctl import threadpool_limits

    if n < nlist or n_queries < 1 or k < 1:
        raise InputError("search bench needs n >= nlist, n_queries >= 1 and k >= 1")
    if "ivfpq" in methods and (n < max(nlist, 256) or d % pq_m):
        raise InputError(f"the IVF-PQ rows need n >= max(nlist, 256) and pq_m dividing d={d}")
    if any(r < 0 for r in reranks):
        raise InputError("re-rank factors must be >= 0")
    faiss.omp_set_num_threads(threads)
    with threadpool_limits(threads):
        return _search_bench(
            Path(out_dir), n, d, n_queries, k, nlist, nprobes, train_size, threads, seed, log,
            full_sort and "numpy" in methods, set(methods), (pq_m, pq_nprobe, tuple(reranks)),
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


def _memory(index, n: int) -> float:
    import faiss

    return round(len(faiss.serialize_index(index)) / n, 1)


def _search_bench(out_dir, n, d, n_queries, k, nlist, nprobes, train_size, threads, seed, log, full_sort, methods,
                  pq):
    (gal, q), wall, _ = _timed(clustered_gallery, n, d, n_queries, seed)
    log(f"gallery {n} x {d} float32 ({gal.nbytes / 2**30:.2f} GiB) in {wall:.1f} s")
    common = {"n": n, "d": d, "queries": n_queries, "k": k, "threads": threads}

    def timing(wall_s: float, cpu_s: float, ref: dict | None = None, flat: dict | None = None) -> dict:
        out = {"search_s": round(wall_s, 3), "search_cpu_s": round(cpu_s, 3),
               "queries_per_s": round(n_queries / max(wall_s, 1e-9), 1),
               "cpu_queries_per_s": round(n_queries / max(cpu_s, 1e-9), 1)}
        for name, base in (("numpy", ref), ("flat", flat)):
            if base is not None:
                out[f"speedup_vs_{name}"] = round(base["_wall"] / wall_s, 2)
                out[f"cpu_speedup_vs_{name}"] = round(base["_cpu"] / cpu_s, 2)
        return {**out, "_wall": wall_s, "_cpu": cpu_s}

    numpy_row = np_rows = sort_row = None
    if "numpy" in methods:
        (np_scores, np_rows), wall, cpu = _timed(numpy_topk, q, gal, k)
        numpy_row = {**common, "method": "numpy brute force (argpartition)", **timing(wall, cpu),
                     "memory_bytes_per_item": gal.nbytes / n}
        numpy_row.update(speedup_vs_numpy=1.0, cpu_speedup_vs_numpy=1.0)
        log(f"numpy brute force (argpartition): {wall:.2f} s wall, {cpu:.2f} s CPU")
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
    flat_row = {**common, "method": "faiss IndexFlatIP", **timing(wall, cpu, numpy_row),
                "memory_bytes_per_item": _memory(flat.index, n)}
    del flat
    same_set = 1.0
    if np_rows is not None:
        same_set = float(np.mean([set(a) == set(b) for a, b in zip(np_rows, flat_rows, strict=True)]))
        flat_row.update({
            f"recall@{k}_vs_exact": round(
                float(np.mean([len(set(a) & set(b)) / k for a, b in zip(np_rows, flat_rows, strict=True)])), 4
            ),
            "identical_topk_sets": round(same_set, 4),
            "identical_topk_order": round(float(np.mean((np_rows == flat_rows).all(1))), 4),
            "max_score_diff": float(np.abs(np_scores - flat_scores).max()),
        })
    flat_row.update(speedup_vs_flat=1.0, cpu_speedup_vs_flat=1.0)
    log(f"faiss flat: {wall:.2f} s wall, {cpu:.2f} s CPU, identical top-{k} sets {same_set:.4f}")
    if sort_row is not None:
        flat_row["speedup_vs_numpy_sort"] = round(sort_row["_wall"] / flat_row["_wall"], 2)
        flat_row["cpu_speedup_vs_numpy_sort"] = round(sort_row["_cpu"] / flat_row["_cpu"], 2)
    recall_of = lambda found: round(float(np.mean(  # noqa: E731
        [len(set(a) & set(b)) / k for a, b in zip(flat_rows, found, strict=True)])), 4)
    rng = np.random.default_rng(seed + 1)
    sample = gal[rng.choice(n, size=min(n, max(train_size, nlist)), replace=False)]
    ivf_results, other = [], []

    def built(index: GalleryIndex, name: str) -> float:
        t = time.perf_counter()
        index.train(sample)
        index.add(gal)
        log(f"{name}: trained on {len(sample)} vectors + added {n} in {time.perf_counter() - t:.1f} s")
        return round(time.perf_counter() - t, 1)

    def measured(method: str, search, memory: float, build_s: float) -> dict:
        (_, found), wall, cpu = _timed(search, q, k)
        row = {**common, "method": method, **timing(wall, cpu, numpy_row, flat_row),
               f"recall@{k}_vs_exact": recall_of(found), "memory_bytes_per_item": memory, "build_s": build_s}
        log(f"{method}: {wall:.3f} s, recall@{k} {row[f'recall@{k}_vs_exact']:.4f}, {memory} B/item")
        return row

    if "ivf" in methods:
        ivf = GalleryIndex(d, "ivf", nlist=nlist)
        build_s, memory = built(ivf, f"IVF{nlist}"), _memory(ivf.index, n)
        for nprobe in nprobes:
            ivf.set_nprobe(nprobe)
            ivf_results.append(measured(f"faiss IVF{nlist} nprobe={nprobe}", ivf.search_rows, memory, build_s))
        del ivf
    if "ivfpq" in methods:
        import faiss

        pq_m, nprobe, reranks = pq
        ivfpq = GalleryIndex(d, "ivfpq", nlist=nlist, nprobe=nprobe, pq_m=pq_m)
        build_s, memory = built(ivfpq, f"IVF{nlist},PQ{pq_m}"), _memory(ivfpq.index, n)
        ivfpq.set_nprobe(nprobe)
        refine = faiss.IndexRefineFlat(ivfpq.index, faiss.swig_ptr(gal))  # the same codes + the float vectors
        refine_memory = _memory(refine, n)
        for r in reranks:
            name = f"faiss IVF{nlist},PQ{pq_m} nprobe={nprobe}"
            if r == 0:
                other.append(measured(name, ivfpq.search_rows, memory, build_s))
                continue
            refine.k_factor = float(r)
            other.append(measured(f"{name} + exact re-rank of top {r}k", refine.search, refine_memory, build_s))
        del refine, ivfpq
    if "hnsw" in methods:
        hnsw = GalleryIndex(d, "hnsw")
        build_s = built(hnsw, f"HNSW{hnsw.m}")
        other.append(measured(f"faiss HNSW{hnsw.m} efSearch={hnsw.index.hnsw.efSearch}", hnsw.search_rows,
                              _memory(hnsw.index, n), build_s))
        del hnsw
    rows = [r for r in (numpy_row, sort_row) if r is not None] + [flat_row, *ivf_results, *other]
    for r in rows:
        r.pop("_wall"), r.pop("_cpu")
    ok = [r for r in ivf_results if r[f"recall@{k}_vs_exact"] >= 0.95]
    chosen = ok[0] if ok else None
    rows.append(
        {
            **common,
            "method": "targets",
            "exact_speedup_vs_numpy": flat_row.get("speedup_vs_numpy"),
            "exact_cpu_speedup_vs_numpy": flat_row.get("cpu_speedup_vs_numpy"),
            "exact_identical": same_set == 1.0 if np_rows is not None else None,
            "exact_target_5x_met": flat_row.get("speedup_vs_numpy", 0) >= 5 and same_set == 1.0,
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
                "queries_per_s",
                "memory_bytes_per_item",
            ],
        )
    )
    print(markdown_table(rows[-1:]))
    return rows


def search_bench_bytes(n: int, n_queries: int, d: int = 256) -> int:
    """Peak memory estimate of the search suite: the float32 gallery, its copies in the flat and
    IVF indexes, three (64, n) score blocks of the brute force and the queries' results."""
    return 4 * n * (3 * d + 3 * 64) + 16 * n_queries * (d + 128)


def check_search_memory(n: int, n_queries: int, force: bool) -> None:
    """InputError naming the estimate when the search suite would not fit in RAM (unless ``force``)."""
    need, have = search_bench_bytes(n, n_queries), physical_memory_bytes()
    if have is not None and need > have and not force:
        raise InputError(f"--search-n {n:,} needs about {gib(need)} of memory, this machine has "
                         f"{gib(have)} (lower --search-n, or pass --force)")


@cli_main
def main(argv=None) -> int:
    p = ArgumentParser(description="search speed and recall of NumPy, faiss exact, IVF, IVF-PQ and HNSW")
    p.add_argument("--out", default="runs/retrieval_search", help="where search_bench.csv/.json go")
    p.add_argument("--search-n", type=int_in(1, MAX_SEARCH_N), default=1_000_000,
                   help=f"gallery size, at most {MAX_SEARCH_N:,}; its memory estimate must fit this machine's RAM "
                   "unless --force (default 1,000,000)")
    p.add_argument("--search-queries", type=int_in(1, MAX_SEARCH_QUERIES), default=1000,
                   help=f"queries, at most {MAX_SEARCH_QUERIES:,} (default 1000)")
    p.add_argument("--search-methods", nargs="+", choices=("numpy", "ivf", "ivfpq", "hnsw"),
                   default=["numpy", "ivf", "ivfpq"], help="beside exact faiss search (default numpy ivf ivfpq)")
    p.add_argument("--search-threads", type=int_in(1, MAX_THREADS), default=1,
                   help=f"threads for both NumPy (BLAS) and faiss, at most {MAX_THREADS} (default 1)")
    p.add_argument("--json", default=None, help="also write the rows and the settings to this JSON file")
    p.add_argument("--seed", type=seed_int, default=0)
    add_force_arg(p, "run even when the memory estimate exceeds this machine's RAM")
    add_overwrite_arg(p)
    a = p.parse_args(argv)
    check_search_memory(a.search_n, a.search_queries, a.force)
    check_outputs(files=[a.json], dirs=[a.out], overwrite=a.overwrite)
    rows = run_search_bench(Path(a.out), n=a.search_n, n_queries=a.search_queries, threads=a.search_threads,
                            seed=a.seed, methods=tuple(a.search_methods))
    if a.json:
        config = {k: v for k, v in vars(a).items() if k not in ("json", "overwrite", "force")}
        write_json(Path(a.json), {"config": config, "search": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
