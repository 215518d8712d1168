"""``make demo`` part for generation3d: a small end-to-end MoCA run on 2 CPU cores (minutes).

Builds a small procedural dataset, trains the part autoencoder, trains the generator with MoCA
attention and with the full-attention and top-k-without-compression baselines (same data,
steps, seed), evaluates all three on the test split, runs a small attention scaling benchmark,
generates a >= 64-part scene and exports a GLB + preview. The MoCA pipeline is copied to
``cache_dir("generation3d")/demo_model`` for the demo tab.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch

from common.data_dir import cache_dir
from common.io import write_csv, write_json
from common.seed import seed_everything
from generation3d.bench import bench_attention, plot_bench
from generation3d.data import PartDataset, trained_categories
from generation3d.evaluate import evaluate_generator, penetration_rate, reconstruction_metrics
from generation3d.export import export_meshes
from generation3d.library import dataset_library
from generation3d.model import AEConfig, GenConfig
from generation3d.render import render_preview
from generation3d.sampling import MoCAPipeline
from generation3d.shapes import build_dataset
from generation3d.text import shape_descriptions
from generation3d.train import fit, pretrain

DEMO_MODEL = "demo_model"
QUICK = {
    "per_category": 30, "scenes": 4, "points": 128, "ae_steps": 150, "gen_steps": 150, "max_parts": 96,
    "eval_shapes": 10, "sample_steps": 12, "bench_parts": (16, 64, 128), "d_model": 64, "layers": 3,
}


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0, config: dict | None = None) -> list[dict]:
    """Run the quick pipeline; ``data_dir`` is unused (the dataset is procedural, built here).
    Writes ``out_dir/generation3d.csv`` and ``out_dir/generation3d/`` artefacts; returns report rows."""
    cfg = {**QUICK, **(config or {})}
    torch.set_num_threads(2)
    seed_everything(seed)
    out = Path(out_dir) / "generation3d"
    out.mkdir(parents=True, exist_ok=True)
    build_dataset(out / "data", n_per_category=cfg["per_category"], n_scenes=cfg["scenes"], n_points=cfg["points"], seed=seed)
    ds = PartDataset.load(out / "data")
    ae, _ = pretrain(ds, AEConfig(n_out=cfg["points"]), steps=cfg["ae_steps"], batch_size=32, seed=seed)
    rec = reconstruction_metrics(ae, ds, "test")
    rows = [{"method": "part_ae", "metric": "ae_cd_squared", "value": rec["ae_cd"]},
            {"method": "part_ae", "metric": f"ae_fscore@{rec['tau']}", "value": rec["ae_fscore"]}]
    results, pipes = {}, {}
    for attention in ("moca", "full", "topk"):
        gcfg = GenConfig(n_latents=ae.config.n_latents, d_latent=ae.config.d_latent, max_parts=cfg["max_parts"],
                         d_model=cfg["d_model"], n_layers=cfg["layers"], attention=attention)
        t0 = time.perf_counter()
        gen, stats, hist = fit(ds, ae, gcfg, steps=cfg["gen_steps"], batch_size=8, seed=seed)
        train_s = time.perf_counter() - t0
        pipes[attention] = MoCAPipeline(ae, gen, stats, shape_descriptions(ds, "train"),
                                        categories=trained_categories(ds, gcfg.max_parts))
        res = evaluate_generator(pipes[attention], ds, n_shapes=cfg["eval_shapes"], seed=seed, steps=cfg["sample_steps"])
        res.update({"train_s": train_s, "final_loss": hist[-1]["loss"], "train_steps": cfg["gen_steps"]})
        results[attention] = res
        # train_s stays in eval.json only: the three runs are sequential, so load differences distort it
        for metric in ("cd", "fscore", "part_fscore", "coverage", "mmd", "1nna", "part_count_acc", "pen_gen", "fidelity",
                       "classifier_test_acc"):
            rows.append({"method": attention, "metric": metric, "value": res[metric]})
    write_json(out / "eval.json", {"results": results, "config": cfg, "seed": seed, "ae": rec})
    pipes["moca"].library = dataset_library(pipes["moca"], ds)  # the retrieve decoder's parts
    pipes["moca"].save(out / "pipeline_moca")
    demo = cache_dir("generation3d") / DEMO_MODEL
    shutil.rmtree(demo, ignore_errors=True)
    shutil.copytree(out / "pipeline_moca", demo)

    t0 = time.perf_counter()
    scene = pipes["moca"].sample("scene", 64, seed=seed, steps=cfg["sample_steps"])[0]
    scene_s = time.perf_counter() - t0
    meshes = pipes["moca"].meshes(scene)[0]
    export_meshes(meshes, out / "scene_64parts.glb")
    render_preview(meshes, out / "scene_64parts.png", title="MoCA scene, 64 parts")
    rows += [{"method": "moca", "metric": "scene64_sample_s", "value": scene_s},
             {"method": "moca", "metric": "scene64_penetration", "value": penetration_rate(scene.boxes)}]
    chair = pipes["moca"].sample("chair", 12, seed=seed, steps=cfg["sample_steps"])[0]
    cm = pipes["moca"].meshes(chair)[0]
    export_meshes(cm, out / "chair_12parts.glb")
    render_preview(cm, out / "chair_12parts.png", title="MoCA chair, 12 parts")
    text = "a chair with arms and a solid back"
    tc = pipes["moca"].sample("none", 9, seed=seed, steps=cfg["sample_steps"], text=text)[0]
    tm = pipes["moca"].meshes(tc)[0]
    export_meshes(tm, out / "text_chair_9parts.glb")
    render_preview(tm, out / "text_chair_9parts.png", title=text)

    bench = bench_attention(parts=cfg["bench_parts"], repeats=1, seed=seed, threads=2)
    write_csv(out / "bench_attention.csv", bench)
    plot_bench(bench, out / "bench_attention.png")
    for r in bench:
        if r["method"] != "full":
            rows.append({"method": r["method"], "metric": f"attn_speedup_vs_full@P{r['parts']}", "value": r["speedup_vs_full"]})
            rows.append({"method": r["method"], "metric": f"attn_mem_ratio_vs_full@P{r['parts']}", "value": r["mem_ratio_vs_full"]})
    summary = [{"app": "generation3d", "task": "procedural part-based 3D generation", "method": r["method"],
                "metric": r["metric"], "value": round(float(r["value"]), 5),
                "split": "benchmark" if "attn_" in r["metric"] else "test", "seed": seed} for r in rows]
    write_csv(Path(out_dir) / "generation3d.csv", summary)
    return summary
