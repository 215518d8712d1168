"""``moca bench --suite attention|sizes``: time and peak memory of MoCA against full attention.

Suites (same run, same input, interleaved repeats so machine load hits all methods alike):

- ``attention``: forward+backward of one attention layer vs P: ``full`` (fused SDPA over all P*T
  tokens), ``moca`` (router top-k + compressed tokens), ``topk`` (router top-k, no compressed
  tokens), ``local`` (nearest-k components by box centre);
- ``sizes``: parameters, training-step time and peak memory of each named model size
  (``model.MODEL_SIZES``) through ``time_train_step``.

A whole training step on P-component scenes, full attention vs MoCA with and without router
distillation (the former ``scenes`` suite), is ``experiments/generation3d/scene_bench.py``.

Peak memory on the CPU is measured with ``torch.profiler`` (``profile_memory=True``): the running
sum of every CPU allocation/free during one step, maximum over time (inputs are allocated
before); on CUDA it is ``torch.cuda.max_memory_allocated`` above the memory in use before. The
analytic column of the attention suite counts the bytes of the score matrices a naive (non-fused)
implementation would materialise: ``4 * B * H * P*T * L`` with L the keys per query (P*T for full
attention, k*T + C*(P-k) for MoCA).
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

import torch

from common.device import autocast, check_precision, describe, resolve_device, to_device
from common.errors import InputError
from common.io import atomic_write, write_csv, write_json
from common.report import markdown_table
from generation3d.attention import build_attention
from generation3d.limits import check_bench_memory

DEFAULT_PARTS = (8, 16, 32, 64, 128, 256)
METHODS = ("full", "moca", "topk", "local")


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_bytes(fn, device: torch.device | None = None) -> int:
    """Peak memory allocated while ``fn()`` runs: on CUDA ``max_memory_allocated`` above the memory
    in use before; on the CPU the peak of the running sum of allocations (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    if device is not None and device.type == "cuda":
        _sync(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        _sync(device)
        return torch.cuda.max_memory_allocated(device) - before

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return peak


def interleaved_median_ms(step, methods, repeats: int, device: torch.device | None = None) -> dict[str, float]:
    """Median milliseconds of ``step(m)`` per method: one warm-up call each, then ``repeats`` rounds
    that call every method in turn (so load drifts hit all methods alike); GPU work is waited for."""
    times = {m: [] for m in methods}
    for m in methods:
        step(m)
    for _ in range(repeats):
        for m in methods:
            _sync(device)
            t0 = time.perf_counter()
            step(m)
            _sync(device)
            times[m].append(time.perf_counter() - t0)
    return {m: 1e3 * statistics.median(v) for m, v in times.items()}


def bench_attention(
    parts: tuple[int, ...] = DEFAULT_PARTS, tokens: int = 64, d_model: int = 128, n_heads: int = 4,
    top_k: int = 4, n_compressed: int = 2, repeats: int = 3, seed: int = 0, threads: int | None = None,
    device: str = "auto",
) -> list[dict]:
    """Rows ``{method, parts, tokens, time_ms (median fwd+bwd), peak_mem_mb, attn_matrix_mb, speedup_vs_full,
    mem_ratio_vs_full, ...settings}`` of every method in ``METHODS`` on ``device``."""
    dev = resolve_device(device)
    if threads:
        torch.set_num_threads(threads)
    rows = []
    for p in parts:
        if p < 1:
            raise InputError(f"number of parts must be >= 1, got {p}")
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(1, p, tokens, d_model, generator=gen).to(dev)
        boxes = torch.rand(1, p, 6, generator=gen).to(dev)
        mods = {}
        for m in METHODS:
            torch.manual_seed(seed)
            mods[m] = build_attention(m, d_model, n_heads, top_k=top_k, n_compressed=n_compressed).to(dev).train()

        def step(m, x=x, boxes=boxes, mods=mods):
            xi = x.clone().requires_grad_(True)
            mods[m](xi, boxes).sum().backward()

        times = interleaved_median_ms(step, METHODS, repeats, dev)
        for m in METHODS:
            mods[m].zero_grad(set_to_none=True)
            peak = peak_memory_bytes(lambda m=m: step(m), dev)
            n_keys = p * tokens if m == "full" else mods[m].keys_per_query(p, tokens)
            rows.append({
                "method": m, "parts": p, "tokens": tokens, "time_ms": times[m],
                "peak_mem_mb": peak / 2**20, "attn_matrix_mb": 4 * n_heads * p * tokens * n_keys / 2**20,
                "keys_per_query": n_keys, "d_model": d_model, "n_heads": n_heads, "top_k": top_k,
                "n_compressed": n_compressed, "repeats": repeats, "threads": torch.get_num_threads(),
                **({} if dev.type == "cpu" else {"device": describe(dev)}),
            })
    return ratios_vs_full(rows)


def ratios_vs_full(rows: list[dict]) -> list[dict]:
    """Add the same-run ratios ``speedup_vs_full`` (full's time / the row's) and ``mem_ratio_vs_full``
    (the row's peak memory / full's) against the ``full`` row of the same parts and tokens."""
    full = {(r["parts"], r["tokens"]): r for r in rows if r["method"] == "full"}
    for r in rows:
        f = full[r["parts"], r["tokens"]]
        r["speedup_vs_full"] = f["time_ms"] / r["time_ms"]
        r["mem_ratio_vs_full"] = r["peak_mem_mb"] / f["peak_mem_mb"]
    return rows


def crossover(rows: list[dict], method: str = "moca") -> int | None:
    """Smallest P from which ``method`` is faster than full attention at every larger P measured."""
    pts = sorted((r["parts"], r["speedup_vs_full"]) for r in rows if r["method"] == method)
    best = None
    for p, s in reversed(pts):
        if s <= 1.0:
            break
        best = p
    return best


def plot_bench(rows: list[dict], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
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
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    return path


def run_attention_bench(out_dir: Path, **kw) -> list[dict]:
    """Attention suite: run, print a markdown table with ratios, write ``bench_attention.csv/.json/.png``."""
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


# ---------------------------------------------------------------- sizes: one training step per named size
def training_step(cfg, batch_size: int, device: torch.device, precision: str = "32", seed: int = 0):
    """``(model, step)``: a ``PartFlowTransformer(cfg)`` on ``device`` in training mode (MoCA in its
    sparse phase, with router distillation when ``cfg.router_distill > 0``: the recipe's steady
    state) and ``step()``, one training step (forward + backward + AdamW) on a fixed batch of
    ``batch_size`` scenes of ``cfg.max_parts`` components of ``cfg.n_latents`` tokens (drawn from
    ``seed``; content does not change the cost) in ``precision`` (autocast; 16-mixed with loss
    scaling), returning its detached loss."""
    from generation3d.losses import draw_flow_noise, flow_matching_loss
    from generation3d.model import PartFlowTransformer

    parts = cfg.max_parts
    gen = torch.Generator().manual_seed(seed)
    batch = {"z": torch.randn(batch_size, parts, cfg.n_latents, cfg.d_latent, generator=gen),
             "box": torch.randn(batch_size, parts, 6, generator=gen),
             "valid": torch.ones(batch_size, parts, dtype=torch.bool), "category": torch.full((batch_size,), 4),
             "n_parts": torch.full((batch_size,), parts), "text": None}
    noise = to_device(draw_flow_noise(batch, gen), device)
    batch = to_device(batch, device)
    torch.manual_seed(seed)
    model = PartFlowTransformer(cfg).to(device).train()
    model.set_sparse_training(distill=cfg.router_distill > 0, dense=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "16-mixed")

    def step() -> torch.Tensor:
        with autocast(device, precision):
            loss = flow_matching_loss(model, batch, noise)
            aux = model.router_distill_loss()
            total = loss if aux is None else loss + cfg.router_distill * aux
        scaler.scale(total).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return total.detach()

    return model, step


def time_train_step(
    model_size: str, attention: str, parts: int, tokens_per_part: int, device: str | torch.device = "auto",
    precision: str = "32", steps: int = 3, batch_size: int = 1, seed: int = 0,
) -> dict:
    """Time one generator training step (``training_step``) of the named ``model_size``
    (``model.MODEL_SIZES``: width, depth, heads; ``tokens_per_part`` overrides its T) with
    ``attention`` on a batch of ``batch_size`` scenes of ``parts`` components, on ``device`` in
    ``precision``. One warm-up step (optimizer state, compilation), then ``steps`` timed ones.
    Returns ``{model_size, attention, parts, tokens_per_part, batch_size, precision, device,
    time_ms (median), params, peak_mem_mb, loss, ...}``; peak memory is that of one more step
    (``peak_memory_bytes``)."""
    from generation3d.model import MODEL_SIZES, GenConfig

    size = MODEL_SIZES.lookup(model_size)
    dev = resolve_device(device)
    check_precision(precision, dev)
    if min(parts, tokens_per_part, steps, batch_size) < 1:
        raise InputError(f"parts, tokens_per_part, steps and batch_size must be >= 1, got {parts}, {tokens_per_part}, "
                         f"{steps}, {batch_size}")
    cfg = GenConfig(n_latents=tokens_per_part, d_latent=8, max_parts=parts, d_model=size.d_model, n_heads=size.n_heads,
                    n_layers=size.n_layers, attention=attention, dense_warmup=0.0)
    model, step = training_step(cfg, batch_size, dev, precision, seed)
    losses = []
    times = interleaved_median_ms(lambda _: losses.append(step()), ["step"], steps, dev)["step"]
    peak = peak_memory_bytes(lambda: losses.append(step()), dev)
    loss = float(torch.stack(losses).float().mean())
    if not math.isfinite(loss):
        raise RuntimeError(f"non-finite training loss {loss} in time_train_step({model_size!r}, {attention!r})")
    return {"model_size": model_size, "attention": attention, "parts": parts, "tokens_per_part": tokens_per_part,
            "batch_size": batch_size, "precision": precision, "device": describe(dev), "time_ms": times,
            "params": sum(p.numel() for p in model.parameters()), "peak_mem_mb": peak / 2**20, "loss": loss,
            "d_model": size.d_model, "n_layers": size.n_layers, "n_heads": size.n_heads, "steps": steps}


SIZE_PARTS = 16


def run_sizes_bench(out_json: Path, parts: int = SIZE_PARTS, steps: int = 3, device: str = "auto",
                    precision: str = "32", seed: int = 0) -> list[dict]:
    """Sizes suite: ``time_train_step`` of every named size (its own T) with MoCA attention on one
    scene of ``parts`` components -> markdown table on stdout and ``out_json`` (``{"rows", "settings"}``)."""
    from generation3d.model import MODEL_SIZES

    names, attention = tuple(MODEL_SIZES), "moca"
    rows = [{**time_train_step(n, attention, parts, MODEL_SIZES.lookup(n).tokens_per_part, device, precision, steps=steps,
                               seed=seed), "threads": torch.get_num_threads()} for n in names]
    write_json(Path(out_json), {"rows": rows, "settings": {"sizes": list(names), "parts": parts, "attention": attention,
                                                           "steps": steps, "precision": precision, "seed": seed}})
    print(markdown_table(rows, ["model_size", "d_model", "n_layers", "n_heads", "tokens_per_part", "params", "time_ms",
                                "peak_mem_mb"]))
    return rows


SUITES = {  # per suite: default parts, tokens per component, output (a directory for attention, else a JSON file)
    "attention": ((8, 16, 32, 64, 128, 256), (64,), "results/generation3d_bench"),
    "sizes": ((SIZE_PARTS,), None, "docs/results/generation3d/sizes.json"),
}


def suite_output(suite: str, out: str | Path | None = None) -> tuple[Path, bool]:
    """``(output path, is a directory)`` of ``suite`` (``out`` or the suite's default)."""
    if suite not in SUITES:
        raise InputError(f"unknown bench suite {suite!r}; choose from {', '.join(SUITES)}")
    return Path(out or SUITES[suite][2]), suite == "attention"


def run_suite(suite: str, out: str | Path | None = None, parts: tuple[int, ...] | None = None,
              tokens: tuple[int, ...] | None = None, repeats: int = 3, top_k: int = 4, n_compressed: int = 2,
              seed: int = 0, device: str = "auto", precision: str = "32", force: bool = False) -> list[dict]:
    """Run one suite (module docstring) with its defaults for ``parts``, ``tokens`` and ``out``;
    ``repeats`` is the number of timed steps of the sizes suite; sizes over the bounds of
    ``limits.check_bench_memory`` are refused unless ``force``. Returns its rows."""
    out, _ = suite_output(suite, out)
    parts_default, tokens_default, _ = SUITES[suite]
    parts, tokens = tuple(parts or parts_default), tuple(tokens or tokens_default or ())
    if suite == "attention" and len(tokens) != 1:
        raise InputError("--suite attention takes one --tokens value (T per component)")
    if suite == "sizes" and (tokens or len(parts) != 1):
        raise InputError("--suite sizes takes one --parts value and no --tokens (each size has its own T)")
    if precision != "32" and suite != "sizes":
        raise InputError("--precision applies to --suite sizes only")
    check_bench_memory(suite, parts, tokens, force)
    # the committed CPU results were written without a device setting: keep them that way on auto
    dev = {} if device == "auto" else {"device": device}
    if suite == "attention":
        return run_attention_bench(out, parts=parts, tokens=tokens[0], repeats=repeats, top_k=top_k,
                                   n_compressed=n_compressed, seed=seed, **dev)
    return run_sizes_bench(out, parts=parts[0], steps=repeats, device=device, precision=precision, seed=seed)
