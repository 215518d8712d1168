"""``mosaic`` command line: simulate | data | pretrain | stream | eval | bench.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from common.cli import (
    ArgumentParser,
    add_overwrite_arg,
    check_outputs,
    float_in,
    fraction,
    int_in,
    nonneg_float,
    nonneg_int,
    positive_int,
    seed_int,
    subcommand_main,
)
from common.device import add_device_arg, resolve_device
from common.errors import DataError, InputError
from common.io import atomic_write, dumps_json, read_npz, write_json
from common.limits import add_force_arg, gib
from streaming.data import STANDARD_CONFIGS
from streaming.harness import announce, limit_threads
from streaming.observed import fit_warning_lines, warn_low_observed

#: ``simulate`` refuses (without ``--force``) a stream whose arrays would take more than this
SIMULATE_MAX_BYTES = 4 * 2**30
#: most k-subspaces restarts ``pretrain`` runs (each is a full fit of the source samples)
MAX_RESTARTS = 1000
#: documented maxima of the other count/size options (each refused at parse time above them)
MAX_N = 100_000  # simulate --n: coordinates of a sample
MAX_K = 1000  # --K, --k-max: experts (subspaces)
MAX_RANK = 1000  # --r, --r-max: rank of each expert
MAX_WORKERS = 64  # bench --workers
MAX_ITEMS = 100_000  # data --movies


def cmd_simulate(a: argparse.Namespace) -> int:
    from streaming.data import StreamConfig, generate_stream, save_stream

    check_outputs(files=[a.out], overwrite=a.overwrite)
    n, r, K = STANDARD_CONFIGS[a.config] if a.config else (a.n, a.r, a.K)
    props = None if not a.proportions else _proportions(a.proportions)
    cfg = StreamConfig(
        n=n, r=r, K=K, obs_frac=a.obs_frac, noise_std=a.noise, proportions=props, epochs=a.epochs,
        samples_per_epoch=a.samples_per_epoch, drift=a.drift, angle_rad=a.angle, n_replace=a.n_replace,
        source_per_class=a.source_per_class, seed=a.seed,
    )
    cfg.validate()
    need = simulate_bytes(cfg)
    if need > SIMULATE_MAX_BYTES and not a.force:
        raise InputError(f"--epochs {a.epochs} x --samples-per-epoch {a.samples_per_epoch} x n {n} (with "
                         f"{K * cfg.n_source():,} source samples and the bases) needs about {gib(need)} "
                         f"(at most {gib(SIMULATE_MAX_BYTES)} without --force)")
    announce(f"mosaic simulate: drawing {a.epochs * a.samples_per_epoch:,} samples of n={n}")
    stream = generate_stream(cfg)
    save_stream(a.out, stream)
    print(f"wrote {a.out}: T={stream.values.shape[0]} n={n} r={r} K={K} drift={a.drift} "
          f"source={stream.source_values.shape[0]} drift points={stream.drift_points()}")
    return 0


def simulate_bytes(cfg) -> int:
    """Memory estimate of ``generate_stream(cfg)``: values (float64) and mask (bool) of the stream and
    of the source samples, as much again while they are drawn, and the true bases of every epoch."""
    samples = cfg.epochs * cfg.samples_per_epoch + cfg.K * cfg.n_source()
    return 2 * samples * cfg.n * 9 + 2 * cfg.epochs * cfg.K * cfg.n * cfg.r * 8


def _proportions(text: str) -> list[float]:
    try:
        props = [float(p) for p in text.split(",")]
    except ValueError:
        raise InputError(f"--proportions must be comma-separated numbers, got {text!r}") from None
    if not all(np.isfinite(p) and p >= 0 for p in props):
        raise InputError(f"--proportions must be finite and >= 0, got {text!r}")
    return props


def _source(stream, n_source: int) -> np.ndarray:
    if stream.source_values is not None:
        return stream.source_values
    if n_source <= 0:
        raise InputError("the stream file has no source_values; pass --n-source to pretrain on its first samples")
    return stream.values[:n_source]


def _auto_or_int(text: str) -> int | str:
    """argparse type of ``--K`` / ``--r`` of ``pretrain``: ``auto`` or an integer in [1, MAX_K]."""
    return "auto" if text == "auto" else int_in(1, MAX_K)(text)


def cmd_pretrain(a: argparse.Namespace) -> int:
    from streaming.data import load_stream
    from streaming.select import estimate_K_r, save_model

    check_outputs(dirs=[a.out], inputs=[a.input], overwrite=a.overwrite)
    device = resolve_device(a.device)
    limit_threads()
    stream = load_stream(a.input)
    source = _source(stream, a.n_source)
    K, r, estimate = a.K, a.r, None
    if "auto" in (K, r):
        estimate = estimate_K_r(source, K=K, r=r, k_max=a.k_max, r_max=a.r_max, restarts=a.select_restarts,
                                seed=a.seed, device=device)
        for note in estimate.warnings:
            print(f"warning: {note}", file=sys.stderr)
        print(f"estimated {estimate.summary()}")
        K, r = estimate.K, estimate.r
    else:
        warn_low_observed(source, r, "source samples")
    from streaming.model import MoSAIC

    model = MoSAIC(r, K, seed=a.seed, pretrain_restarts=a.restarts).to(device)
    announce(f"mosaic pretrain: {a.restarts} k-subspaces restarts on {source.shape[0]} source samples")
    fit_warning_lines(model, source)
    model.selection_ = estimate
    save_model(model, a.out)
    print(f"pretrained {K} experts of rank {r} on n={stream.n}; saved to {a.out}"
          + (" (the K/r estimate and its evidence are in config.json, extra.auto_K_r)" if estimate else ""))
    return 0


def cmd_stream(a: argparse.Namespace) -> int:
    from streaming.data import FORMAT_VERSION, load_stream
    from streaming.model import MoSAIC

    check_outputs(files=[a.output], dirs=[a.save_model], inputs=[a.input, a.model], overwrite=a.overwrite)
    device = resolve_device(a.device)
    limit_threads()
    stream = load_stream(a.input)
    if a.model:
        model = MoSAIC.from_pretrained(a.model).to(device)
        if model.n != stream.n:
            raise InputError(f"model has n={model.n} but the stream has n={stream.n}")
    else:
        if a.K is None or a.r is None:
            raise InputError("pass --model CHECKPOINT, or --K and --r (pretrained on the file's source unless --no-pretrain)")
        model = MoSAIC(a.r, a.K, seed=a.seed).to(device)
        if not a.no_pretrain:
            source = _source(stream, a.n_source)
            warn_low_observed(source, a.r, "source samples")
            fit_warning_lines(model, source)
    warn_low_observed(stream.values, model.r, "stream samples")
    announce(f"mosaic stream: completing {stream.values.shape[0]} samples of n={stream.n}")
    epoch = stream.epoch if (stream.epoch is not None and not a.ignore_epochs) else None
    completed, routes = model.process(stream.values, epoch=epoch)
    with atomic_write(a.output, "wb") as f:
        np.savez_compressed(f, format_version=np.array(FORMAT_VERSION), completed=completed, routes=routes)
    if a.save_model:
        model.save_pretrained(a.save_model)
    print(f"wrote {a.output}: completed {completed.shape}, routes over {model.K} experts "
          f"(counts {np.bincount(routes, minlength=model.K).tolist()}), re-seeds {len(model.reseeds_)}")
    return 0


def cmd_eval(a: argparse.Namespace) -> int:
    from streaming.data import load_stream
    from streaming.evaluate import summarize

    check_outputs(files=[a.out], inputs=[a.input, a.completed], overwrite=a.overwrite)
    stream = load_stream(a.input)
    z = read_npz(a.completed, "completed file")
    if "completed" not in z:
        raise DataError(f"{a.completed} has no 'completed' array (write it with `mosaic stream`)")
    completed, routes = z["completed"], z.get("routes")
    if completed.shape != stream.values.shape:
        raise DataError(f"completed has shape {completed.shape}, the stream {stream.values.shape}")
    if stream.full is None and stream.heldout is None:
        raise DataError(f"{a.input} has neither 'full' nor 'heldout': the error on unobserved entries needs one")
    if completed.dtype.kind not in "fiu":
        raise DataError(f"completed in {a.completed} must be numeric, got dtype {completed.dtype}")
    if routes is not None and (routes.shape != (completed.shape[0],) or routes.dtype.kind not in "iu"):
        raise DataError(f"routes in {a.completed} must be ({completed.shape[0]},) integers, "
                        f"got {routes.shape} {routes.dtype}")
    row = summarize(stream, completed, routes) if stream.full is not None else {}
    if stream.heldout is not None:
        from streaming.movielens import heldout_errors

        row.update({f"heldout_{k}": v for k, v in heldout_errors(completed.astype(float), stream.heldout).items()})
    print(dumps_json(row, indent=2))
    if a.out:
        write_json(a.out, row)
    return 0


def cmd_data(a: argparse.Namespace) -> int:
    from streaming.data import save_stream
    from streaming.movielens import MOVIELENS_ROWS, build_stream, load_movielens

    check_outputs(files=[a.out], overwrite=a.overwrite)
    ratings = load_movielens(a.data_dir, expected_rows=None if a.data_dir else MOVIELENS_ROWS)
    stream = build_stream(ratings, movies=a.movies, holdout=a.holdout, source_users=a.source_users, seed=a.seed)
    save_stream(a.out, stream)
    observed, held = int((~np.isnan(stream.values)).sum()), int((~np.isnan(stream.heldout)).sum())
    T, n = stream.values.shape
    print(f"wrote {a.out}: {T} users x {n} movies, {observed} observed + {held} held-out ratings "
          f"(density {(observed + held) / (T * n):.3f}), {stream.source_values.shape[0] if stream.source_values is not None else 0} "
          f"source users, {stream.label_names.size} genre labels")
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from streaming.bench import TEST_SEEDS, run_stress

    if a.stress_seeds is not None and a.stress_seeds > len(TEST_SEEDS):
        raise InputError(f"--stress-seeds {a.stress_seeds}: there are only {len(TEST_SEEDS)} test seeds")
    check_outputs(dirs=[a.out], overwrite=a.overwrite)
    limit_threads()
    run_stress(Path(a.out), cells=a.cells, families=a.families, workers=a.workers, seeds=a.stress_seeds,
               command="mosaic bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "",
               device=resolve_device(a.device))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="mosaic", description="MoSAIC: online matrix completion on a drifting union of subspaces")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("simulate", help="generate a stream file (.npz)")
    s.add_argument("--config", default=None, choices=list(STANDARD_CONFIGS), help="a standard (n, r, K)")
    s.add_argument("--n", type=int_in(2, MAX_N), default=100, help=f"coordinates (at most {MAX_N:,})")
    s.add_argument("--r", type=int_in(1, MAX_RANK), default=10, help=f"rank (at most {MAX_RANK})")
    s.add_argument("--K", type=int_in(1, MAX_K), default=10, help=f"subspaces (at most {MAX_K})")
    s.add_argument("--obs-frac", type=fraction, default=0.4)
    s.add_argument("--noise", type=nonneg_float, default=0.05)
    s.add_argument("--proportions", default=None, help="comma-separated class proportions")
    s.add_argument("--epochs", type=positive_int, default=4)
    s.add_argument("--samples-per-epoch", type=positive_int, default=2000)
    s.add_argument("--drift", default="rotation", choices=["none", "rotation", "abrupt"])
    s.add_argument("--angle", type=float_in(0.0, math.pi), default=0.1, help="rotation angle per epoch (rad)")
    s.add_argument("--n-replace", type=positive_int, default=1, help="subspaces replaced per epoch (abrupt)")
    s.add_argument("--source-per-class", type=nonneg_int, default=0, help="pretraining samples per class (0 = auto)")
    s.add_argument("--seed", type=seed_int, default=0)
    s.add_argument("--out", required=True, help="output .npz")
    add_force_arg(s, f"generate a stream over {gib(SIMULATE_MAX_BYTES)}")
    add_overwrite_arg(s)
    s.set_defaults(fn=cmd_simulate)

    s = sub.add_parser("data", help="write a real-data stream file (.npz): MovieLens users as samples",
                       epilog="Rating streams (--protocol ratings, `data csv`) and MoSAIC as a rating-by-rating "
                              "recommender moved to python -m experiments.streaming.progressive.")
    s.add_argument("dataset", choices=["movielens"], help="dslabs' MovieLens latest-small (Debian r-cran-dslabs)")
    s.add_argument("--movies", type=int_in(2, MAX_ITEMS), default=500, help="the N most-rated movies are the coordinates")
    s.add_argument("--holdout", type=float_in(0.0, 1.0, hi_open=True), default=0.2,
                   help="share of each stream user's ratings held out for evaluation")
    s.add_argument("--source-users", type=nonneg_int, default=100, help="first users, all ratings, for pretraining")
    s.add_argument("--data-dir", default=None, help="the dslabs data directory (default: the Debian package's)")
    s.add_argument("--seed", type=seed_int, default=0, help="seed of the held-out choice")
    s.add_argument("--out", required=True, help="output .npz")
    add_overwrite_arg(s)
    s.set_defaults(fn=cmd_data)

    s = sub.add_parser("pretrain", help="pretrain MoSAIC experts on a file's source samples")
    s.add_argument("--input", required=True)
    s.add_argument("--K", type=_auto_or_int, required=True, help="number of experts, or 'auto' (estimated)")
    s.add_argument("--r", type=_auto_or_int, required=True, help="rank of each expert, or 'auto' (estimated)")
    s.add_argument("--k-max", type=int_in(1, MAX_K), default=20, help=f"--K auto: largest K tried (at most {MAX_K})")
    s.add_argument("--r-max", type=int_in(1, MAX_RANK), default=20,
                   help=f"--r auto: largest r tried (at most {MAX_RANK})")
    s.add_argument("--select-restarts", type=int_in(1, MAX_RESTARTS), default=3,
                   help=f"--K/--r auto: k-subspaces restarts per (K, r) point (at most {MAX_RESTARTS})")
    s.add_argument("--restarts", type=int_in(1, MAX_RESTARTS), default=16,
                   help=f"k-subspaces restarts (at most {MAX_RESTARTS})")
    s.add_argument("--n-source", type=nonneg_int, default=0, help="without source_values: pretrain on the first N samples")
    s.add_argument("--seed", type=seed_int, default=0)
    s.add_argument("--out", required=True, help="checkpoint directory")
    add_device_arg(s)
    add_overwrite_arg(s)
    s.set_defaults(fn=cmd_pretrain)

    s = sub.add_parser("stream", help="complete a stream file sample by sample")
    s.add_argument("--input", required=True)
    s.add_argument("--output", required=True, help="output .npz with completed (T, n) and routes (T,)")
    s.add_argument("--model", default=None, help="checkpoint from `mosaic pretrain`")
    s.add_argument("--K", type=int_in(1, MAX_K), default=None, help=f"experts (at most {MAX_K})")
    s.add_argument("--r", type=int_in(1, MAX_RANK), default=None, help=f"rank of each expert (at most {MAX_RANK})")
    s.add_argument("--no-pretrain", action="store_true")
    s.add_argument("--n-source", type=nonneg_int, default=0)
    s.add_argument("--ignore-epochs", action="store_true", help="do not tell the model where epochs start")
    s.add_argument("--save-model", default=None, help="save the final model to this directory")
    s.add_argument("--seed", type=seed_int, default=0)
    add_device_arg(s)
    add_overwrite_arg(s)
    s.set_defaults(fn=cmd_stream)

    s = sub.add_parser("eval", help="metrics of a completed stream against the file's ground truth",
                       epilog="Moved to experiments/streaming: --compare (python -m experiments.streaming.movielens_users) "
                              "and --protocol progressive with --tune-frac, --items, --seed, --device "
                              "(python -m experiments.streaming.progressive).")
    s.add_argument("--input", required=True)
    s.add_argument("--completed", required=True, help="output of `mosaic stream` to score")
    s.add_argument("--out", default=None, help="write the metrics as JSON")
    add_overwrite_arg(s)
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("bench", help="the README's benchmark: MoSAIC vs the pretrained k-GROUSE and baselines",
                       epilog="Moved to experiments/streaming (python -m experiments.streaming.<name>): the "
                              "tuning seeds, --ablations and --eta-grid (stress_tuning); --suite auto-kr (auto_kr); "
                              "--suite standard with --quick, --configs, --drifts, --large, --throughput (standard_bench).")
    s.add_argument("--out", default="results/streaming")
    s.add_argument("--suite", choices=("stress",), default="stress",
                   help="stress: generator families beyond the geodesic one (streaming.bench)")
    s.add_argument("--cells", nargs="+", default=None,
                   help="cells as glob patterns over family/obsPP/spec/epochs, or 'all' (default: */obs35/exact/*)")
    s.add_argument("--families", nargs="+", default=None, help="only these generator families")
    s.add_argument("--workers", type=int_in(1, MAX_WORKERS), default=1, help=f"processes (at most {MAX_WORKERS})")
    s.add_argument("--stress-seeds", type=positive_int, default=None, help="use only the first N of the 5 test seeds")
    add_device_arg(s)
    add_overwrite_arg(s)
    s.set_defaults(fn=cmd_bench)
    return p


main = subcommand_main(build_parser)


if __name__ == "__main__":
    sys.exit(main())
