"""From finished ``moca train --preset furniture`` runs to the shipped ``moca-furniture`` pipeline
and its committed report (``scripts/ship_generation3d.py``).

Every number is measured on the held-out test shapes of the preset's dataset with the protocol of
the README's results table (``evaluate.evaluate_generator``: one sample per test shape with its
category and part count, eval seed 0, 20 Euler steps, guidance 1, category fidelity by the
dataset's cached classifier), on the weights as they ship (rounded to float16):

* ``finished_run(run_dir, preset, attention)``: the run's generator record, refused (one line)
  unless the run trained the preset's full budget with that attention;
* ``shipped_precision(pipe)``: the pipeline with its weights rounded as ``common.shipped`` stores them;
* ``learning_curve(run_dir, ds, ...)``: the same metrics for every snapshot the run kept
  (``moca train --snapshot-every``), to say what more steps would buy;
* ``category_grids(pipe, ds, prefix, ...)``: one PNG per trained category with several samples;
* ``readme_section(report)`` and ``update_readme(readme, section)``: the README's shipped-model
  section written from ``shipped.json``, so its numbers are never typed by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from common.engine import snapshots
from common.errors import CheckpointError, InputError
from common.pretrained import checkpoint_info
from common.shipped import cached_snapshot_result
from generation3d.evaluate import evaluate_generator
from generation3d.export import preview_grid
from generation3d.preset import preset_recipe, typical_part_counts
from generation3d.sampling import MoCAPipeline

CURVE_KEYS = ("fidelity", "cd", "fscore", "coverage", "mmd", "part_count_acc")
TABLE_KEYS = (("cd", "CD ↓", 3), ("fscore", "F@0.05 ↑", 3), ("part_fscore", "part F ↑", 3), ("coverage", "COV ↑", 3),
              ("mmd", "MMD ↓", 4), ("1nna", "1-NNA", 3), ("part_count_acc", "part-count acc", 2),
              ("fidelity", "**fidelity** ↑", 3))
README_START, README_END = "<!-- shipped:start -->", "<!-- shipped:end -->"


def finished_run(run_dir: str | Path, preset: str, attention: str) -> dict:
    """The generator ``extra`` of a run that trained ``preset``'s full budget with ``attention``;
    InputError naming the run and what to do otherwise."""
    run_dir = Path(run_dir)
    want = preset_recipe(preset)["steps"]
    try:
        info = checkpoint_info(run_dir / "generator")
    except CheckpointError:
        raise InputError(f"{run_dir} holds no finished run; train it with `moca train --preset {preset} "
                         f"--attention {attention} --out {run_dir} --resume`") from None
    extra = info.extra
    if extra.get("preset") != preset or info.config.get("config", {}).get("attention", attention) != attention:
        raise InputError(f"{run_dir} was not trained with --preset {preset} --attention {attention}")
    if extra.get("steps") != want:
        raise InputError(f"{run_dir} trained {extra.get('steps')} steps, not the preset's {want}; "
                         "train it with the preset's command")
    return extra


def shipped_precision(pipe: MoCAPipeline) -> MoCAPipeline:
    """A copy of ``pipe`` whose floating weights are rounded to float16 and back, as they ship."""
    ckpt = pipe.checkpoint()
    with torch.no_grad():
        for t in ckpt.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.half().float())
    return MoCAPipeline.from_checkpoint(ckpt)


def evaluate(pipe: MoCAPipeline, ds, n: int, steps: int, classifier) -> dict:
    """``evaluate_generator`` on the first ``n`` test shapes with the README protocol."""
    return evaluate_generator(pipe, ds, n_shapes=n, seed=0, steps=steps, guidance=1.0, fidelity=True,
                              classifier=classifier, split="test")


def learning_curve(run_dir: str | Path, ds, n: int, steps: int, classifier, every: int = 0,
                   partial: bool = False) -> list[dict]:
    """``{"step", *CURVE_KEYS}`` of the snapshots of ``run_dir`` (``evaluate``; float32 weights);
    ``every`` (> 0) keeps those whose step is a multiple of it. Each result is cached beside its
    snapshot (``eval_test_n<n>_steps<steps>.json``, with the sha256 of the weights it measured), so
    a report run again, or run while the training still writes snapshots, evaluates only what is
    new; ``partial`` skips a snapshot that is not completely written yet instead of failing."""
    rows = []
    for step, path in snapshots(run_dir):
        if every and step % every:
            continue
        try:
            res = _cached_evaluation(path, ds, n, steps, classifier)
        except CheckpointError:
            if partial:
                continue
            raise
        rows.append({"step": step, **{k: res[k] for k in CURVE_KEYS}})
    return rows


def _cached_evaluation(path: Path, ds, n: int, steps: int, classifier) -> dict:
    weights = sorted(path.glob("*/*.safetensors"))
    if len(weights) < 2:  # ae/ and generator/
        raise CheckpointError(f"{path} holds no complete pipeline")
    return cached_snapshot_result(path, f"eval_test_n{n}_steps{steps}.json", weights,
                                  lambda: evaluate(MoCAPipeline.load(path), ds, n, steps, classifier))


def category_grids(pipe: MoCAPipeline, ds, prefix: str | Path, samples: int = 4, steps: int = 25) -> list[dict]:
    """Per trained category, ``samples`` shapes (seeds 0..samples-1) at the category's median
    training part count in one PNG ``<prefix>_<category>.png``; returns ``[{"category", "parts",
    "png"}]``."""
    rows = []
    for cat, n_parts in typical_part_counts(ds, pipe.categories, pipe.gen.config.max_parts).items():
        shapes = [pipe.sample(cat, n_parts, seed=s, steps=steps)[0] for s in range(samples)]
        png = Path(f"{prefix}_{cat}.png")
        preview_grid([pipe.meshes(g)[0] for g in shapes], png,
                     titles=[f"{cat}, {n_parts} parts, seed {s}" for s in range(samples)], ncols=samples)
        rows.append({"category": cat, "parts": int(n_parts), "png": png.name})
    return rows


def results_table(report: dict) -> str:
    """Markdown table of ``report["models"]`` (one row per attention, ``TABLE_KEYS`` columns,
    training time) with MoCA's ratios to each baseline."""
    models = report["models"]
    head = "| model | " + " | ".join(label for _, label, _ in TABLE_KEYS) + " | training |"
    lines = [head, "|" + "---|" * (len(TABLE_KEYS) + 2)]
    for name, m in models.items():
        cells = [f"{m[k]:.{d}f}" for k, _, d in TABLE_KEYS]
        lines.append(f"| {name} (`{m['run']}`) | " + " | ".join(cells) + f" | {m['train_s'] / 3600:.1f} h |")
    return "\n".join(lines)


def readme_section(report: dict, results_dir: str = "../docs/results/generation3d") -> str:
    """The README's shipped-model section (between ``README_START`` and ``README_END``) from
    ``shipped.json``: the table, whether the fidelity target is met, the learning curve and the grids."""
    p, shipped = report["protocol"], report["shipped"]
    moca = report["models"][shipped["attention"]]
    target = p["fidelity_target"]
    verdict = "met" if moca["fidelity"] >= target else "**not met**"
    curve = ", ".join(f"{r['step']}: {r['fidelity']:.2f}" for r in report["curves"].get(shipped["attention"], []))
    ahead = moca.get("extrapolation", {}).get(f"fidelity_{target:.2f}") or {}
    if moca["fidelity"] < target and ahead.get("slope_per_doubling") is not None:
        step, budget = ahead["predicted_step"], p["recipe"]["steps"]
        if step and step <= 10 * budget:
            reach = f"so about {step:,} steps would reach {target:.2f}"
        elif step:
            reach = f"so it would take about {step / budget:,.0f}x the budget: more steps alone will not reach it"
        else:
            reach = "so more steps are not predicted to reach it"
        curve += (f" ({target - moca['fidelity']:.2f} short; a line through the last {ahead['points']} points "
                  f"gains {ahead['slope_per_doubling']:+.3f} per doubling of the steps, {reach})")
    sd = (moca["fidelity"] * (1 - moca["fidelity"]) / p["n_shapes"]) ** 0.5
    grids = " ".join(f"![{g['category']}]({results_dir}/{g['png']})" for g in report["grids"][shipped["attention"]])
    return "\n".join([
        f"`{shipped['name']}` ({shipped['attention']} attention, {p['recipe']['steps']} steps of "
        f"`moca train --preset furniture`; float16 weights): {p['n_shapes']} held-out test shapes, "
        f"{p['sampling_steps']} Euler steps, guidance 1, eval seed 0, on the weights as shipped; the classifier "
        f"labels {p['classifier_test_acc']:.0%} of the real test shapes right. Fidelity target "
        f"{target:.2f}: {verdict}. The same recipe and budget with full attention and with the local window "
        f"(training time on {p.get('trained_on', 'the training machine')}, autoencoder excluded):",
        "",
        results_table(report),
        "",
        f"Fidelity by training step ({shipped['attention']}): {curve}. With {p['n_shapes']} test shapes one shape "
        f"moves fidelity by {1 / p['n_shapes']:.3f} (binomial sd {sd:.2f} at {moca['fidelity']:.2f}), so rows closer "
        f"than that are not told apart. One grid per category: {grids}",
    ])


def update_readme(readme: str | Path, section: str) -> bool:
    """Replace the text between ``README_START`` and ``README_END`` in ``readme`` with
    ``section``; returns whether the file changed. InputError when the markers are missing."""
    readme = Path(readme)
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(README_START) + r".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise InputError(f"{readme} has no {README_START} ... {README_END} block")
    new = pattern.sub(lambda _: f"{README_START}\n{section}\n{README_END}", text)
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return new != text
