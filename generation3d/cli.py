"""``moca``: compositional 3D generation with component-level sparse attention (MoCA); every
subcommand in generation3d/README.md.

    moca build-data --out data/parts --per-category 200 --scenes 8
    moca train-ae --data-dir data/parts --out runs/ae --steps 1500
    moca train --data-dir data/parts --ae runs/ae --attention moca --out runs/moca --steps 2000
    moca train --preset furniture --attention moca --out runs/ship/moca --resume   # the shipped recipe
    moca sample --ckpt moca-furniture --category chair --parts 6 --out chair.glb   # real components
    moca eval --ckpt runs/moca --data-dir data/parts --n 32 --diversity --out runs/moca/eval.json
    moca bench --suite attention --parts 8,16,32,64,128,256 --out results/bench
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common.cli import (  # noqa: E402
    ArgumentParser,
    add_common_args,
    check_outputs,
    int_list,
    nonneg_float,
    positive_float,
    probability,
    subcommand_main,
)
from common.device import add_device_arg, add_precision_arg  # noqa: E402
from common.errors import InputError  # noqa: E402
from common.limits import add_force_arg  # noqa: E402
from generation3d import limits as lim  # noqa: E402
from generation3d.library import add_decoder_arg  # noqa: E402
from generation3d.model import MODEL_SIZES  # noqa: E402
from generation3d.render import RENDERERS  # noqa: E402


def _data_dir(a) -> Path:
    """``--data-dir``, else the cache's ``generation3d/parts``."""
    from common.data_dir import cache_dir

    return Path(a.data_dir) if a.data_dir else cache_dir("generation3d") / "parts"


def cmd_build_data(a) -> int:
    from generation3d.data import read_meta
    from generation3d.shapes import build_dataset

    out = Path(a.out) if a.out else _data_dir(a)
    source = a.source
    inputs = lim.check_build_options(source, out, a.furniture_dir, a.scenes, a.scene_parts, a.scene_max_parts)
    lim.check_build_memory(source, a.points, per_category=a.per_category, scenes=a.scenes, scene_parts=a.scene_parts,
                           scene_max_parts=a.scene_max_parts, max_parts=a.max_parts, force=a.force)
    check_outputs(dirs=[out], inputs=inputs, overwrite=a.overwrite)
    if source == "procedural":
        print(f"building the procedural dataset into {out}", file=sys.stderr)
        build_dataset(out, n_per_category=a.per_category, n_scenes=a.scenes, n_points=a.points,
                      seed=a.seed, min_scene_parts=a.scene_parts)
    elif source == "scenes":
        from generation3d.scenes import build_scene_dataset

        build_scene_dataset(out, n_scenes=a.scenes, min_parts=a.scene_parts, max_parts=a.scene_max_parts,
                            n_points=a.points, seed=a.seed, furniture_dir=a.furniture_dir,
                            item_max_parts=a.max_parts, progress=True)
        print(f"items used listed with their creators and licences in {out / 'ATTRIBUTION.csv'}")
    else:
        from generation3d.sources import build_real_dataset

        real = build_real_dataset(out, source, n_points=a.points, max_parts=a.max_parts, seed=a.seed, up=a.up,
                                  furniture_dir=a.furniture_dir, progress=True)
        print(f"skipped {sum(real.skips.counts.values())}: {real.skips.summary()} (list in {out / 'skipped.csv'})")
    m = read_meta(out)
    per_cat = ", ".join(f"{c} {n}" for c, n in m.get("shapes_per_category", {}).items())
    print(f"wrote {m['n_shapes']} shapes ({per_cat}; {m['n_parts_total']} parts, {m['parts_min']}..{m['parts_max']} "
          f"per shape; {m['n_train']} train, {m['n_val']} val, {m['n_test']} test) to {out}")
    return 0


def cmd_train_ae(a) -> int:
    import torch

    from common.io import write_json
    from generation3d.data import PartDataset
    from generation3d.evaluate import reconstruction_metrics
    from generation3d.model import AEConfig
    from generation3d.sampling import save_autoencoder
    from generation3d.train import pretrain

    out = Path(a.out or "runs/ae")
    lim.check_steps(a.steps, a.force)
    check_outputs(dirs=[out], inputs=[_data_dir(a)], overwrite=a.overwrite)
    torch.set_num_threads(a.threads)
    ds = PartDataset.load(_data_dir(a))
    ae, hist = pretrain(ds, AEConfig(n_latents=a.latents, d_latent=a.latent_dim), steps=a.steps,
                        batch_size=a.batch_size, lr=a.lr, seed=a.seed, progress=True, run_dir=out,
                        device=a.device, precision=a.precision)
    rec = reconstruction_metrics(ae, ds, "test")
    save_autoencoder(ae, out, {"history": hist, "test": rec, "seed": a.seed})
    write_json(out / "metrics.json", rec)
    print(f"autoencoder: test part CD (squared) {rec['ae_cd']:.5f}, F@{rec['tau']} {rec['ae_fscore']:.3f}; saved {out}")
    return 0


def cmd_train(a) -> int:
    import torch

    from common.pretrained import checkpoint_info
    from generation3d.model import GenConfig
    from generation3d.preset import preset_recipe
    from generation3d.train import train_pipeline
    from generation3d.training_run import check_options, run_dir, run_inputs, schedule

    check_options(a)
    size = MODEL_SIZES.lookup(a.model_size)
    recipe = preset_recipe(a.preset) if a.preset else {}
    out = run_dir(a, data_dir=_data_dir(a))
    steps, every, snapshot_every = schedule(a, recipe, out)
    torch.set_num_threads(a.threads)
    width, depth = a.d_model or size.d_model, a.layers or size.n_layers
    ds, ae, info = run_inputs(a, size, width, depth, out, data_dir=_data_dir(a))
    cfg = GenConfig(n_latents=ae.config.n_latents, d_latent=ae.config.d_latent, max_parts=a.max_parts,
                    d_model=width, n_layers=depth, n_heads=size.n_heads, attention=a.attention, top_k=a.top_k,
                    n_compressed=a.compressed, router_distill=a.router_distill, dense_warmup=a.dense_warmup)
    extra = {"seed": a.seed, "steps": steps, "augment": a.augment, **({"preset": a.preset, "ae_train_s": info["ae_train_s"]} if a.preset else {})}
    ae_extra = checkpoint_info(out / "ae").extra if a.preset else None  # the recipe the autoencoder was trained with
    pipe, hist = train_pipeline(ds, ae, cfg, out, extra, ae_extra, steps=steps, batch_size=a.batch_size, lr=a.lr,
                                seed=a.seed, device=a.device, precision=a.precision, resume=a.resume,
                                checkpoint_every=every, snapshot_every=snapshot_every, augment=a.augment)
    train_s = hist[-1]["time_s"]
    print(f"trained {a.attention} generator for {steps} steps: final loss {hist[-1]['loss']:.4f}, "
          f"{train_s:.0f} s of training; saved {out}")
    if a.preset:
        from generation3d.preset import write_preset_samples

        samples = write_preset_samples(a.preset, pipe, ds, out, {
            **info, "steps": steps, "attention": a.attention, "seed": a.seed, "final_loss": hist[-1]["loss"],
            "train_s": train_s})
        listed = ", ".join(f"{r['category']} {r['parts']} parts" for r in samples)
        where = "the hub's 3D tab shows this model" if a.preset == "demo" else "ship it with scripts/ship_generation3d.py"
        print(f"wrote {len(samples)} samples to {out / 'samples'} ({listed}); {where}")
    return 0


def cmd_sample(a) -> int:
    from common.io import write_csv
    from generation3d.export import export_meshes
    from generation3d.library import credit_line
    from generation3d.render import render_preview
    from generation3d.sampling import FAR_TEXT_COSINE, MoCAPipeline
    from generation3d.text import check_text

    out = Path(a.out or "sample.glb")
    if out.suffix.lower() not in (".glb", ".ply", ".obj"):
        raise InputError(f"--out must end in .glb, .ply or .obj, got {out.name!r}")
    png, credits_csv = out.with_suffix(".png"), out.with_name(f"{out.stem}_ATTRIBUTION.csv")
    check_outputs(files=[out, png, credits_csv], inputs=[a.ckpt], overwrite=a.overwrite)
    text = None if a.text is None else check_text(a.text)
    pipe = MoCAPipeline.load(a.ckpt).to(a.device)
    g = pipe.sample(a.category, a.parts, seed=a.seed, steps=a.steps, guidance=a.guidance, text=text)[0]
    if a.decoder == "retrieve" and pipe.library is None:
        print(f"note: {a.ckpt} has no component library (library.npz), so the parts are its decoded points, meshed")
    meshes, credits = pipe.meshes(g, a.decoder)
    export_meshes(meshes, out)
    if credits:
        write_csv(credits_csv, credits)
        print(credit_line(credits, credits_csv))
    renderer = render_preview(meshes, png, title=f"{a.category}, {a.parts} parts", renderer=a.renderer)
    if text is not None:
        near, sim = pipe.nearest_description(text)
        print(f"text {text!r}: nearest training description {near!r} (cosine {sim:.2f})")
        if sim < FAR_TEXT_COSINE:
            print(f"warning: the text is unlike every training description (cosine < {FAR_TEXT_COSINE}); "
                  "the shape follows the category and part count more than the text")
    print(f"wrote {out} ({a.parts} parts) and {png} ({renderer} preview)")
    return 0


def cmd_eval(a) -> int:
    from common.io import write_json
    from common.report import markdown_table
    from generation3d.data import PartDataset
    from generation3d.diversity import diversity_report, summary_line
    from generation3d.evaluate import evaluate_generator
    from generation3d.sampling import MoCAPipeline

    lim.check_eval_work(a.n, a.steps, a.force)
    check_outputs(files=[a.out], inputs=[a.ckpt, _data_dir(a)], overwrite=a.overwrite)
    pipe = MoCAPipeline.load(a.ckpt).to(a.device)
    ds = PartDataset.load(_data_dir(a), with_meshes=a.decoder == "retrieve")
    res = evaluate_generator(pipe, ds, n_shapes=a.n, seed=a.seed, steps=a.steps, guidance=a.guidance,
                             use_text=a.text, fidelity=not a.no_fidelity, split=a.split, decoder=a.decoder)
    res["ckpt"] = str(a.ckpt)
    cols = ["attention", "cd", "fscore", "part_cd", "part_fscore", "coverage", "mmd", "1nna", "part_count_acc",
            "pen_gen", "pen_ref", "outside_gen", "outside_ref", "n_shapes"]
    print(markdown_table([res], cols + ([] if a.no_fidelity else ["fidelity", "fidelity_real", "classifier_test_acc"])))
    if a.diversity:  # generation3d.diversity
        res["diversity"] = diversity_report(pipe, ds, n_shapes=a.n, steps=a.steps, decoder=a.decoder)
        print(summary_line(res["diversity"]))
    if a.out:
        write_json(a.out, res)
    return 0


def cmd_flow_loss(a) -> int:
    from common.io import write_json
    from generation3d.data import PartDataset
    from generation3d.evaluate import heldout_flow_loss
    from generation3d.sampling import MoCAPipeline

    check_outputs(files=[a.out], inputs=[a.ckpt, _data_dir(a)], overwrite=a.overwrite)
    res = heldout_flow_loss(MoCAPipeline.load(a.ckpt).to(a.device), PartDataset.load(_data_dir(a)), seed=a.seed)
    res["ckpt"] = str(a.ckpt)
    by_level = " ".join(f"{s}: {z:.3f}/{b:.3f}" for s, z, b in zip(res["levels"], res["z_by_level"], res["box_by_level"], strict=True))
    print(f"held-out flow loss {res['loss']:.4f} (latents {res['z']:.4f}, boxes {res['box']:.4f}) on {res['n_shapes']} shapes; "
          f"by noise level (latents/boxes) {by_level}")
    if a.out:
        write_json(a.out, res)
    return 0


def cmd_bench(a) -> int:
    import torch

    from generation3d.bench import run_suite, suite_output

    out, is_dir = suite_output(a.suite, a.out)
    check_outputs(dirs=[out] if is_dir else [], files=[] if is_dir else [out], overwrite=a.overwrite)
    torch.set_num_threads(a.threads)
    run_suite(a.suite, out, parts=a.parts, tokens=a.tokens, repeats=a.repeats, top_k=a.top_k,
              n_compressed=a.compressed, seed=a.seed, device=a.device, precision=a.precision, force=a.force)
    return 0


def cmd_load_mesh(a) -> int:
    from generation3d.meshes import load_part_mesh
    from generation3d.render import render_preview

    check_outputs(files=[a.out], inputs=[a.path], overwrite=a.overwrite)
    shape = load_part_mesh(a.path, category=a.category, seed=a.seed)
    for p in shape.parts:
        print(f"{p.name}: box centre {p.box[:3].round(3).tolist()} size {p.box[3:].round(3).tolist()}")
    if a.out:
        renderer = render_preview([p.mesh for p in shape.parts], a.out, title=Path(a.path).name, renderer=a.renderer)
        print(f"wrote {a.out} ({renderer} preview)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="moca", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("build-data", help="build a part-labelled dataset (procedural, Sweet Home 3D or your folder)")
    add_common_args(p)
    p.add_argument("--source", default="procedural",
                   help="procedural, sweethome3d (Debian's sweethome3d-furniture), scenes (rooms of that "
                        "furniture) or a folder of part-labelled meshes (formats in generation3d/README.md)")
    p.add_argument("--per-category", type=lim.bounded(lim.MAX_PER_CATEGORY), default=200, help="procedural: shapes per category")
    p.add_argument("--scenes", type=lim.bounded(lim.MAX_SCENES, 0), default=8, help="procedural / scenes: number of scenes")
    p.add_argument("--scene-parts", type=lim.bounded(lim.MAX_SCENE_PARTS), default=64, help="procedural / scenes: minimum parts per scene")
    p.add_argument("--scene-max-parts", type=lim.bounded(lim.MAX_SCENE_PARTS), default=256, help="scenes: maximum parts per scene")
    p.add_argument("--points", type=lim.bounded(lim.MAX_POINTS), default=256, help="surface points per part")
    p.add_argument("--max-parts", type=lim.bounded(lim.MAX_SCENE_PARTS), default=64,
                   help="sweethome3d / scenes / folder: shapes (items) with more parts (after merging tiny ones) "
                        "are skipped")
    p.add_argument("--furniture-dir", default=None, help="sweethome3d / scenes: folder of .sh3f archives "
                   "(default $MOE_APPS_SWEETHOME3D or /usr/share/sweethome3d/furniture)")
    p.add_argument("--up", default="z", choices=["y", "z"], help="folder: the meshes' up axis (y is rotated to z)")
    add_force_arg(p, "build a dataset over the memory budget (README 'Limits')")
    p.set_defaults(fn=cmd_build_data)

    p = sub.add_parser("train-ae", help="train the per-part point-cloud autoencoder")
    add_common_args(p)
    p.add_argument("--steps", type=lim.bounded(lim.MAX_TRAIN_STEPS), default=1500)
    p.add_argument("--batch-size", type=lim.bounded(lim.MAX_BATCH), default=64)
    p.add_argument("--lr", type=positive_float, default=2e-3)
    p.add_argument("--latents", type=lim.bounded(lim.MAX_LATENTS), default=8, help="latent tokens T per part")
    p.add_argument("--latent-dim", type=lim.bounded(lim.MAX_LATENTS), default=8)
    p.add_argument("--threads", type=lim.bounded(lim.MAX_THREADS), default=2)
    add_force_arg(p, f"train more than {lim.STEPS_WITHOUT_FORCE} steps")
    add_device_arg(p)
    add_precision_arg(p)
    p.set_defaults(fn=cmd_train_ae)

    p = sub.add_parser("train", help="train the flow-matching part transformer")
    add_common_args(p)
    p.add_argument("--ae", default=None, help="autoencoder checkpoint directory (required without --preset)")
    p.add_argument("--preset", default=None, choices=["demo", "furniture"],
                   help="Sweet Home 3D data, autoencoder and generator in one command (generation3d/preset.py): "
                        "demo: the README's 2400-step recipe (default --out: the hub's real-furniture model); "
                        "furniture: the shipped moca-furniture recipe, 20000 steps (default --out: "
                        "runs/furniture_<attention>); one sample per category")
    p.add_argument("--ae-steps", type=lim.bounded(lim.MAX_TRAIN_STEPS), default=None, help="--preset: autoencoder steps (default 600)")
    p.add_argument("--attention", default="moca", choices=["moca", "full", "topk", "local"])
    p.add_argument("--steps", type=lim.bounded(lim.MAX_TRAIN_STEPS), default=None,
                   help="default 2000 (--preset: the recipe's)")
    p.add_argument("--resume", action="store_true",
                   help="start, or continue an interrupted run in --out from its last full state (same options; "
                        "--preset: its data and autoencoder are reused)")
    p.add_argument("--checkpoint-every", type=lim.bounded(lim.MAX_TRAIN_STEPS, 0), default=None, metavar="N",
                   help="full training state to OUT/checkpoints/last.ckpt every N steps (default 100; "
                        "--preset furniture 250; 0: never)")
    p.add_argument("--snapshot-every", type=lim.bounded(lim.MAX_TRAIN_STEPS, 0), default=None, metavar="N",
                   help="keep the pipeline every N steps in OUT/snapshots/step_<N> (default 0: none; "
                        "--preset furniture 2500)")
    p.add_argument("--batch-size", type=lim.bounded(lim.MAX_BATCH), default=16)
    p.add_argument("--lr", type=positive_float, default=1e-3)
    p.add_argument("--max-parts", type=lim.bounded(lim.MAX_SCENE_PARTS), default=64)
    p.add_argument("--model-size", default=None, choices=list(MODEL_SIZES),
                   help="named width, depth, heads and tokens per part T (README 'Model sizes'; default S)")
    p.add_argument("--d-model", type=lim.bounded(lim.MAX_WIDTH), default=None, help="width (default 128; not with --model-size)")
    p.add_argument("--layers", type=lim.bounded(lim.MAX_LAYERS), default=None, help="depth (default 4; not with --model-size)")
    p.add_argument("--top-k", type=lim.bounded(lim.MAX_TOP_K), default=4)
    p.add_argument("--compressed", type=lim.bounded(lim.MAX_COMPRESSED), default=2, help="compressed tokens per non-selected component")
    p.add_argument("--router-distill", type=nonneg_float, default=None, metavar="W",
                   help="router distillation loss weight (default 0.5 for moca, else 0)")
    p.add_argument("--dense-warmup", type=probability, default=None, metavar="FRAC",
                   help="first FRAC of the steps dense, k = P (default 0.25 for moca, else 0)")
    p.add_argument("--augment", action="store_true",
                   help="mirror, per-axis scale and component swaps of the training shapes (generation3d/augment.py)")
    p.add_argument("--threads", type=lim.bounded(lim.MAX_THREADS), default=2)
    add_force_arg(p, f"train more than {lim.STEPS_WITHOUT_FORCE} steps or a model over the memory budget")
    add_device_arg(p)
    add_precision_arg(p)
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("sample", help="generate one shape and export it")
    add_common_args(p, out_default="sample.glb")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--category", default="chair", help="a category the model was trained on (chair, table, shelf, lamp, scene, sofa, bed) or none")
    p.add_argument("--parts", type=lim.bounded(lim.MAX_SCENE_PARTS), default=8)
    p.add_argument("--steps", type=lim.bounded(lim.MAX_SAMPLING_STEPS), default=25)
    p.add_argument("--guidance", type=nonneg_float, default=1.0)
    p.add_argument("--text", default=None, help="description to condition on (MiniLM); omit for no text")
    p.add_argument("--renderer", default="auto", choices=RENDERERS, help="preview renderer (auto: open3d, else matplotlib)")
    add_decoder_arg(p)
    add_device_arg(p)
    p.set_defaults(fn=cmd_sample)

    p = sub.add_parser("flow-loss", help="held-out flow-matching loss on every shape of a dataset (model selection)")
    add_common_args(p)
    p.add_argument("--ckpt", required=True)
    add_device_arg(p)
    p.set_defaults(fn=cmd_flow_loss)

    p = sub.add_parser("eval", help="evaluate a generator against the test split")
    add_common_args(p)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--n", type=lim.bounded(lim.MAX_EVAL_SHAPES), default=32)
    p.add_argument("--steps", type=lim.bounded(lim.MAX_SAMPLING_STEPS), default=20)
    p.add_argument("--guidance", type=nonneg_float, default=1.0)
    p.add_argument("--text", action="store_true", help="also condition on each test shape's description")
    p.add_argument("--split", default="test", choices=["test", "val"],
                   help="shapes to compare with (val: choose sampling settings without the test shapes)")
    p.add_argument("--no-fidelity", action="store_true", help="skip category fidelity (its classifier is trained on "
                   "the dataset's training shapes on first use and cached)")
    add_decoder_arg(p)
    p.add_argument("--diversity", action="store_true", help="also spread, copies and final-mesh COV / MMD / 1-NNA "
                   "(generation3d.diversity)")
    add_force_arg(p, f"run more than {lim.EVAL_PASSES_WITHOUT_FORCE} generator passes (--n x --steps)")
    add_device_arg(p)
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("bench", help="time/memory of MoCA vs full attention: one layer (attention) or a training "
                                     "step of each model size (sizes)")
    add_common_args(p)
    add_device_arg(p)
    add_precision_arg(p)
    p.add_argument("--suite", required=True, choices=["attention", "sizes"],
                   help="attention: one layer vs P, MoCA / full / top-k / local (writes bench_attention.csv/.json/.png "
                        "into --out, default results/generation3d_bench); sizes: parameters, step time and memory per "
                        "model size (JSON, default docs/results/generation3d/sizes.json). The former scenes suite (a "
                        "training step on P-component scenes) is python -m experiments.generation3d.scene_bench")
    p.add_argument("--parts", type=int_list(1), default=None, help="components P (attention: 8,16,32,64,128,256; sizes: 16)")
    p.add_argument("--tokens", type=int_list(1), default=None, help="tokens T per component (attention: one value, 64)")
    p.add_argument("--repeats", type=lim.bounded(lim.MAX_REPEATS), default=3, help="timed repeats (sizes: timed steps)")
    p.add_argument("--top-k", type=lim.bounded(lim.MAX_TOP_K), default=4)
    p.add_argument("--compressed", type=lim.bounded(lim.MAX_COMPRESSED), default=2)
    p.add_argument("--threads", type=lim.bounded(lim.MAX_THREADS), default=1)
    add_force_arg(p, "run sizes whose full-attention scores exceed the memory budget")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("load-mesh", help="load a part-segmented GLB/OBJ and list its parts")
    add_common_args(p)
    p.add_argument("path")
    p.add_argument("--category", default="chair")
    p.add_argument("--renderer", default="auto", choices=RENDERERS)
    p.set_defaults(fn=cmd_load_mesh)
    return ap


main = subcommand_main(build_parser)


if __name__ == "__main__":
    raise SystemExit(main())
