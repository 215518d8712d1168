"""Scaling benchmark: forward+backward time and peak memory of one attention layer vs P.

Methods (same run, same input, interleaved repeats so machine load hits all of them alike):
``full`` (fused SDPA over all P*T tokens), ``moca`` (router top-k + compressed tokens),
``topk`` (router top-k, no compressed tokens), ``local`` (nearest-k components by box centre).

Peak memory is measured with ``torch.profiler`` (``profile_memory=True``): the running sum of
every CPU allocation/free during one forward+backward, maximum over time, minus nothing (inputs
are allocated before). The analytic column counts the bytes of the attention score matrices a
naive (non-fused) implementation would materialise: ``4 * B * H * P*T * L`` with L the keys per
query (P*T for full attention, k*T + C*(P-k) for MoCA).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from common.errors import InputError
from common.io import write_csv, write_json
from common.report import markdown_table
from generation3d.attention import build_attention

DEFAULT_PARTS = (8, 16, 32, 64, 128, 256)
METHODS = ("full", "moca", "topk", "local")


def peak_memory_bytes(fn) -> int:
    """Peak of the running sum of CPU allocations made while ``fn()`` runs (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return peak


def _keys_per_query(method: str, p: int, t: int, top_k: int, n_compressed: int) -> int:
    if method == "full":
        return p * t
    k = min(top_k, p)
    return k * t + (n_compressed * (p - k) if method == "moca" and k < p else 0)


def _interleaved_median_ms(step, methods, repeats: int) -> dict[str, float]:
    """Median milliseconds of ``step(m)`` per method: one warm-up call each, then ``repeats`` rounds
    that call every method in turn (so load drifts hit all methods alike)."""
    times = {m: [] for m in methods}
    for m in methods:
        step(m)
    for _ in range(repeats):
        for m in methods:
            t0 = time.perf_counter()
            step(m)
            times[m].append(time.perf_counter() - t0)
    return {m: 1e3 * statistics.median(v) for m, v in times.items()}


def bench_attention(
    parts: tuple[int, ...] = DEFAULT_PARTS, tokens: int = 64, d_model: int = 128, n_heads: int = 4,
    top_k: int = 4, n_compressed: int = 2, repeats: int = 3, methods: tuple[str, ...] = METHODS,
    seed: int = 0, threads: int | None = None, max_full_parts: int | None = None,
) -> list[dict]:
    """Rows ``{method, parts, tokens, time_ms (median fwd+bwd), peak_mem_mb, attn_matrix_mb, speedup_vs_full,
    mem_ratio_vs_full, ...settings}``. ``max_full_parts`` skips full attention above that P."""
    for m in methods:
        if m not in METHODS:
            raise InputError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    if threads:
        torch.set_num_threads(threads)
    rows = []
    for p in parts:
        if p < 1:
            raise InputError(f"number of parts must be >= 1, got {p}")
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(1, p, tokens, d_model, generator=gen)
        boxes = torch.rand(1, p, 6, generator=gen)
        active = [m for m in methods if not (m == "full" and max_full_parts and p > max_full_parts)]
        mods = {}
        for m in active:
            torch.manual_seed(seed)
            mods[m] = build_attention(m, d_model, n_heads, top_k=top_k, n_compressed=n_compressed).train()

        def step(m, x=x, boxes=boxes, mods=mods):
            xi = x.clone().requires_grad_(True)
            mods[m](xi, boxes).sum().backward()

        times = _interleaved_median_ms(step, active, repeats)
        for m in active:
            mods[m].zero_grad(set_to_none=True)
            peak = peak_memory_bytes(lambda m=m: step(m))
            n_keys = _keys_per_query(m, p, tokens, top_k, n_compressed)
            rows.append({
                "method": m, "parts": p, "tokens": tokens, "time_ms": times[m],
                "peak_mem_mb": peak / 2**20, "attn_matrix_mb": 4 * n_heads * p * tokens * n_keys / 2**20,
                "keys_per_query": n_keys, "d_model": d_model, "n_heads": n_heads, "top_k": top_k,
                "n_compressed": n_compressed, "repeats": repeats, "threads": torch.get_num_threads(),
            })
    full = {r["parts"]: r for r in rows if r["method"] == "full"}
    for r in rows:
        f = full.get(r["parts"])
        r["speedup_vs_full"] = f["time_ms"] / r["time_ms"] if f else float("nan")
        r["mem_ratio_vs_full"] = r["peak_mem_mb"] / f["peak_mem_mb"] if f else float("nan")
    return rows


def crossover(rows: list[dict], method: str = "moca") -> int | None:
    """Smallest P from which ``method`` is faster than full attention at every larger P measured."""
    pts = sorted((r["parts"], r["speedup_vs_full"]) for r in rows if r["method"] == method)
    best = None
    for p, s in reversed(pts):
        if s != s or s <= 1.0:
            break
        best = p
    return best


def plot_bench(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for m in METHODS:
        pts = sorted((r["parts"], r["time_ms"], r["peak_mem_mb"]) for r in rows if r["method"] == m)
        if not pts:
            continue
        ps, ts, ms = zip(*pts, strict=True)
        axes[0].plot(ps, ts, "o-", label=m)
        axes[1].plot(ps, ms, "o-", label=m)
    for ax, lab in zip(axes, ("forward+backward time (ms)", "peak CPU memory (MiB)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("components P (64 tokens each)" if rows and rows[0]["tokens"] == 64 else "components P")
        ax.set_ylabel(lab)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_bench(out_dir: Path, **kw) -> list[dict]:
    """Run, print a markdown table with ratios, write ``bench_attention.csv/.json/.png``."""
    rows = bench_attention(**kw)
    out_dir = Path(out_dir)
    write_csv(out_dir / "bench_attention.csv", rows)
    summary = {"rows": rows, "crossover_parts_moca": crossover(rows, "moca"), "settings": kw}
    write_json(out_dir / "bench_attention.json", summary)
    plot_bench(rows, out_dir / "bench_attention.png")
    cols = ["method", "parts", "time_ms", "speedup_vs_full", "peak_mem_mb", "mem_ratio_vs_full", "attn_matrix_mb", "keys_per_query"]
    print(markdown_table(rows, cols))
    print(f"MoCA faster than full attention from P = {summary['crossover_parts_moca']} on")
    return rows


# ---------------------------------------------------------------- scenes: whole training steps
SCENE_PARTS = (32, 64, 128, 256)
SCENE_METHODS = ("full", "moca", "moca_no_distill")


def bench_scene_training(
    parts: tuple[int, ...] = SCENE_PARTS, tokens: tuple[int, ...] = (8,), d_model: int = 128, n_layers: int = 4,
    top_k: int = 4, n_compressed: int = 2, repeats: int = 3, seed: int = 0, threads: int | None = None,
) -> list[dict]:
    """Time and peak memory of one generator training step (forward + backward + AdamW step of the
    whole ``PartFlowTransformer``, rectified-flow loss, batch of one scene of P components of T
    tokens), full attention vs MoCA in its sparse phase with router distillation (the recipe's
    steady state) and without. Same inputs for all methods (content does not change the cost),
    interleaved repeats; peak memory by ``peak_memory_bytes``. Rows ``{method, parts, tokens,
    time_ms (median), peak_mem_mb, speedup_vs_full, mem_ratio_vs_full, ...settings}``."""
    from generation3d.losses import draw_flow_noise, flow_matching_loss
    from generation3d.model import GenConfig, PartFlowTransformer

    if threads:
        torch.set_num_threads(threads)
    rows = []
    for t in tokens:
        for p in parts:
            if p < 1 or t < 1:
                raise InputError(f"parts and tokens must be >= 1, got {p} and {t}")
            gen = torch.Generator().manual_seed(seed)
            batch = {"z": torch.randn(1, p, t, 8, generator=gen), "box": torch.randn(1, p, 6, generator=gen),
                     "valid": torch.ones(1, p, dtype=torch.bool), "category": torch.tensor([4]),
                     "n_parts": torch.tensor([p]), "text": None}
            noise = draw_flow_noise(batch, gen)
            models, opts = {}, {}
            for m in SCENE_METHODS:
                torch.manual_seed(seed)
                cfg = GenConfig(n_latents=t, d_latent=8, max_parts=p, d_model=d_model, n_layers=n_layers,
                                attention="full" if m == "full" else "moca", top_k=top_k, n_compressed=n_compressed,
                                router_distill=0.5 if m == "moca" else 0.0, dense_warmup=0.0)
                models[m] = PartFlowTransformer(cfg).train()
                models[m].set_sparse_training(distill=m == "moca", dense=False)
                opts[m] = torch.optim.AdamW(models[m].parameters(), lr=1e-4)

            def step(m, models=models, opts=opts, batch=batch, noise=noise):
                model = models[m]
                loss = flow_matching_loss(model, batch, noise)
                aux = model.router_distill_loss()
                (loss if aux is None else loss + 0.5 * aux).backward()
                opts[m].step()
                opts[m].zero_grad(set_to_none=True)

            times = _interleaved_median_ms(step, SCENE_METHODS, repeats)  # warm-up creates the optimizer state
            for m in SCENE_METHODS:
                rows.append({"method": m, "parts": p, "tokens": t, "time_ms": times[m],
                             "peak_mem_mb": peak_memory_bytes(lambda m=m: step(m)) / 2**20, "d_model": d_model,
                             "n_layers": n_layers, "top_k": top_k, "n_compressed": n_compressed, "repeats": repeats,
                             "threads": torch.get_num_threads()})
    full = {(r["parts"], r["tokens"]): r for r in rows if r["method"] == "full"}
    for r in rows:
        f = full[r["parts"], r["tokens"]]
        r["speedup_vs_full"] = f["time_ms"] / r["time_ms"]
        r["mem_ratio_vs_full"] = r["peak_mem_mb"] / f["peak_mem_mb"]
    return rows


def run_scene_bench(out_json: Path, **kw) -> list[dict]:
    """``bench_scene_training`` -> markdown table on stdout and ``out_json`` (``{"rows", "settings"}``)."""
    rows = bench_scene_training(**kw)
    write_json(Path(out_json), {"rows": rows, "settings": {k: list(v) if isinstance(v, tuple) else v
                                                            for k, v in kw.items()}})
    print(markdown_table(rows, ["method", "parts", "tokens", "time_ms", "speedup_vs_full", "peak_mem_mb",
                                "mem_ratio_vs_full"]))
    return rows
