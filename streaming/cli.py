"""``mosaic`` command line: simulate | data | pretrain | stream | eval | bench.

Why over 400 lines: six subcommands, each a thin handler (parse, call the Python API, print) plus
its argparse options, which are about half of the module; splitting them would scatter one
command's options and handler over two files.
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
from streaming.harness import announce, limit_threads

#: ``simulate`` refuses (without ``--force``) a stream whose arrays would take more than this
SIMULATE_MAX_BYTES = 4 * 2**30
#: most k-subspaces restarts ``pretrain`` runs (each is a full fit of the source samples)
MAX_RESTARTS = 1000
#: documented maxima of the other count/size options (each refused at parse time above them)
MAX_N = 100_000  # simulate --n: coordinates of a sample
MAX_K = 1000  # --K, --k-max: experts (subspaces)
MAX_RANK = 1000  # --r, --r-max: rank of each expert
MAX_SEEDS = 1000  # bench --seeds
MAX_WORKERS = 64  # bench --workers
MAX_REPEATS = 100  # bench --repeats
MAX_SAMPLES = 1_000_000  # bench --throughput --samples
MAX_ITEMS = 100_000  # eval --items, data --movies


def cmd_simulate(a: argparse.Namespace) -> int:
    from streaming.data import STANDARD_CONFIGS, StreamConfig, generate_stream, save_stream

    check_outputs(files=[a.out], overwrite=a.overwrite)
    n, r, K = a.n, a.r, a.K
    if a.config:
        if a.config not in STANDARD_CONFIGS:
            raise InputError(f"unknown config {a.config!r}; choose from {sorted(STANDARD_CONFIGS)}")
        n, r, K = STANDARD_CONFIGS[a.config]
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


def _warn_low_observed(values: np.ndarray, r: int, what: str) -> None:
    """Print the observed-count check's warning line (``streaming.observed.check_observed``); an
    InputError (exit 2) when no sample can identify a rank-r subspace."""
    from streaming.observed import check_observed

    msg = check_observed(~np.isnan(values), r, what, warn=False)
    if msg:
        print(f"warning: {msg}", file=sys.stderr)


def _fit_quietly(model, source: np.ndarray) -> None:
    """``model.fit(source)`` without its LowObservationWarning (the CLI has printed the one-line
    ``warning:`` already, ``_warn_low_observed``); a source too small to identify the experts
    (``streaming.observed.check_source``) is one ``warning:`` line too."""
    import warnings

    from streaming.observed import LowObservationWarning, UnderdeterminedSourceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", LowObservationWarning)
        warnings.simplefilter("always", UnderdeterminedSourceWarning)
        model.fit(source)
    for w in caught:
        if issubclass(w.category, UnderdeterminedSourceWarning):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


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
        _warn_low_observed(source, r, "source samples")
    from streaming.model import MoSAIC

    model = MoSAIC(r, K, seed=a.seed, pretrain_restarts=a.restarts).to(device)
    announce(f"mosaic pretrain: {a.restarts} k-subspaces restarts on {source.shape[0]} source samples")
    _fit_quietly(model, source)
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
        model = MoSAIC.load(a.model).to(device)
        if model.n != stream.n:
            raise InputError(f"model has n={model.n} but the stream has n={stream.n}")
    else:
        if a.K is None or a.r is None:
            raise InputError("pass --model CHECKPOINT, or --K and --r (pretrained on the file's source unless --no-pretrain)")
        model = MoSAIC(a.r, a.K, seed=a.seed).to(device)
        if not a.no_pretrain:
            source = _source(stream, a.n_source)
            _warn_low_observed(source, a.r, "source samples")
            _fit_quietly(model, source)
    _warn_low_observed(stream.values, model.r, "stream samples")
    announce(f"mosaic stream: completing {stream.values.shape[0]} samples of n={stream.n}")
    epoch = stream.epoch if (stream.epoch is not None and not a.ignore_epochs) else None
    completed, routes = model.process(stream.values, epoch=epoch)
    with atomic_write(a.output, "wb") as f:
        np.savez_compressed(f, format_version=np.array(FORMAT_VERSION), completed=completed, routes=routes)
    if a.save_model:
        model.save(a.save_model)
    print(f"wrote {a.output}: completed {completed.shape}, routes over {model.K} experts "
          f"(counts {np.bincount(routes, minlength=model.K).tolist()}), re-seeds {len(model.reseeds)}")
    return 0


def cmd_eval(a: argparse.Namespace) -> int:
    from streaming.data import load_stream
    from streaming.evaluate import summarize

    if sum([a.completed is not None, a.compare, a.protocol == "progressive"]) != 1:
        raise InputError("pass exactly one of --completed FILE (score a completion), --compare (run the methods on "
                         "held-out ratings) and --protocol progressive (run them on a rating stream)")
    check_outputs(files=[a.out], inputs=[a.input, a.completed], overwrite=a.overwrite)
    if a.protocol == "progressive":
        return _eval_progressive(a)
    stream = load_stream(a.input)
    if a.compare:
        return _eval_compare(a, stream)
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


def _eval_compare(a: argparse.Namespace, stream) -> int:
    """``mosaic eval --compare``: every method of ``streaming.movielens.default_methods`` on the
    file's held-out entries, hyper-parameters chosen on the first ``--tune-users`` samples."""
    from streaming.movielens import default_methods, evaluate_heldout, format_table

    if stream.heldout is None:
        raise DataError(f"{a.input} has no 'heldout' array (write one with `mosaic data movielens`)")
    if stream.source_values is None:
        raise DataError(f"{a.input} has no source_values to pretrain on")
    limit_threads()
    result = evaluate_heldout(stream, default_methods(seed=a.seed, device=resolve_device(a.device)),
                              tune_users=a.tune_users)
    result["command"] = "mosaic " + " ".join(sys.argv[1:]) if sys.argv[1:] else "mosaic eval --compare"
    result["stream"] = {"file": str(a.input), "users": int(stream.values.shape[0]), "n": int(stream.n),
                        "source_users": int(stream.source_values.shape[0]), "seed": a.seed}
    print(format_table(result))
    if a.out:
        write_json(a.out, result)
    return 0


def cmd_data(a: argparse.Namespace) -> int:
    from streaming.data import save_stream
    from streaming.movielens import build_stream, load_movielens

    if (a.dataset == "csv") != (a.csv is not None):
        raise InputError("`data csv` needs --csv FILE (user,item,rating,timestamp), and --csv goes with `data csv` only")
    check_outputs(files=[a.out], inputs=[a.csv], overwrite=a.overwrite)
    if a.dataset == "csv" or a.protocol == "ratings":
        return _write_ratings(a)
    ratings = load_movielens(a.data_dir, expected_rows=None if a.data_dir else 100_004)
    stream = build_stream(ratings, movies=a.movies, holdout=a.holdout, source_users=a.source_users, seed=a.seed)
    save_stream(a.out, stream)
    observed, held = int((~np.isnan(stream.values)).sum()), int((~np.isnan(stream.heldout)).sum())
    T, n = stream.values.shape
    print(f"wrote {a.out}: {T} users x {n} movies, {observed} observed + {held} held-out ratings "
          f"(density {(observed + held) / (T * n):.3f}), {stream.source_values.shape[0] if stream.source_values is not None else 0} "
          f"source users, {stream.label_names.size} genre labels")
    return 0


def _write_ratings(a: argparse.Namespace) -> int:
    """``mosaic data movielens --protocol ratings`` / ``mosaic data csv``: a time-ordered rating stream."""
    from streaming.ratings import from_movielens, read_ratings_csv, save_ratings

    if a.dataset == "csv":
        stream = read_ratings_csv(a.csv)
    else:
        from streaming.movielens import load_movielens

        stream = from_movielens(load_movielens(a.data_dir, expected_rows=None if a.data_dir else 100_004))
    save_ratings(a.out, stream)
    print(f"wrote {a.out}: {len(stream)} ratings in time order, {stream.n_users} users x {stream.n_items} items")
    return 0


def _eval_progressive(a: argparse.Namespace) -> int:
    """``mosaic eval --protocol progressive``: every method of ``streaming.progressive.default_methods``
    predicts each rating before learning it; tuning on the first ``--tune-frac`` of the stream. The
    offline references of ``streaming.refit.surprise_methods`` are refit before each time slice."""
    from streaming.progressive import default_methods, evaluate_progressive, format_table
    from streaming.ratings import load_ratings

    stream = load_ratings(a.input)
    limit_threads()
    try:
        from streaming.refit import evaluate_refit, surprise_methods

        methods = default_methods(seed=a.seed, items=a.items, device=resolve_device(a.device))
        references = surprise_methods(seed=a.seed)
    except ImportError as exc:
        raise InputError(f"--protocol progressive needs the bench extra (river, scikit-surprise): {exc}") from None
    announce(f"mosaic eval --protocol progressive: {len(stream)} ratings")
    try:
        result = evaluate_progressive(stream, methods, tune_frac=a.tune_frac)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    result["references"] = evaluate_refit(stream, references, tune_frac=a.tune_frac)
    result["command"] = "mosaic " + " ".join(sys.argv[1:]) if sys.argv[1:] else "mosaic eval --protocol progressive"
    result["stream"] = {"file": str(a.input), "seed": a.seed, "items": a.items}
    print(format_table(result))
    if a.out:
        write_json(a.out, result)
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from streaming.bench import run_bench

    device = resolve_device(a.device)
    if a.stress_seeds is not None:
        from streaming.stress import TEST_SEEDS, TUNING_SEEDS

        available = len(TUNING_SEEDS if a.tuning else TEST_SEEDS)
        if a.stress_seeds > available:
            raise InputError(f"--stress-seeds {a.stress_seeds}: there are only {available} "
                             f"{'tuning' if a.tuning else 'test'} seeds")
    if a.suite == "auto-kr":
        from streaming.autokr import run_auto_kr

        if a.resume and not a.json:
            raise InputError("--resume needs --json (the interrupted run's trials are in F.partial.jsonl)")
        check_outputs(files=[a.json], overwrite=a.overwrite)
        limit_threads()
        run_auto_kr(a.json, families=a.families, obs_fracs=a.obs_fracs, seeds=a.stress_seeds, tuning=a.tuning,
                    command="mosaic bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "",
                    resume=a.resume, device=device)
        return 0
    if a.json or a.obs_fracs or a.resume:
        raise InputError("--json, --obs-fracs and --resume need --suite auto-kr")
    from streaming.data import DRIFT_KINDS, STANDARD_CONFIGS

    for flag, given, known in (("--configs", a.configs, STANDARD_CONFIGS), ("--drifts", a.drifts, DRIFT_KINDS)):
        unknown = [g for g in given or () if g not in known]
        if unknown:  # names, never paths: they become output file names
            raise InputError(f"{flag}: unknown {unknown[0]!r}; choose from {', '.join(known)}")
    check_outputs(dirs=[a.out], overwrite=a.overwrite)
    limit_threads()
    if a.suite == "stress":
        from streaming.stress import run_stress

        run_stress(Path(a.out), cells=a.cells, families=a.families, tuning=a.tuning, ablations=a.ablations,
                   eta_grid=a.eta_grid, workers=a.workers, seeds=a.stress_seeds,
                   command="mosaic bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "",
                   device=device)
        return 0
    if a.cells or a.families or a.tuning or a.ablations or a.eta_grid:
        raise InputError("--cells, --families, --tuning, --ablations and --eta-grid need --suite stress")
    if a.throughput:
        from streaming.throughput import throughput_bench

        throughput_bench(Path(a.out), configs=a.configs, samples=a.samples, repeats=a.repeats, large=a.large,
                         drift=a.throughput_drift, device=device)
        return 0
    run_bench(Path(a.out), seeds=a.seeds, quick=a.quick, configs=a.configs, drifts=a.drifts,
              workers=a.workers, fashion=not a.no_fashion, large=a.large, obs_frac=a.obs_frac, device=device)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="mosaic", description="MoSAIC: online matrix completion on a drifting union of subspaces")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("simulate", help="generate a stream file (.npz)")
    s.add_argument("--config", default=None, help="standard (n,r,K): 25-5-5, 50-5-10, 100-10-10, 100-25-5")
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

    s = sub.add_parser("data", help="write a real-data stream file (.npz): movielens, or a ratings CSV")
    s.add_argument("dataset", choices=["movielens", "csv"],
                   help="movielens: dslabs' MovieLens latest-small (Debian r-cran-dslabs); csv: --csv FILE")
    s.add_argument("--protocol", choices=["users", "ratings"], default="users",
                   help="users: users as samples with held-out ratings; ratings: a time-ordered rating stream "
                        "(for `eval --protocol progressive`; `data csv` always writes one)")
    s.add_argument("--csv", default=None, help="data csv: a CSV with the columns user,item,rating,timestamp")
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

    s = sub.add_parser("eval", help="metrics of a completed stream against the file's ground truth")
    s.add_argument("--input", required=True)
    s.add_argument("--completed", default=None, help="output of `mosaic stream` to score")
    s.add_argument("--compare", action="store_true",
                   help="instead: run every method on the file's held-out entries (see streaming.movielens)")
    s.add_argument("--tune-users", type=positive_int, default=150,
                   help="--compare: hyper-parameters are chosen on the first N stream samples, reported on the rest")
    s.add_argument("--protocol", choices=["progressive"], default=None,
                   help="progressive: on a rating stream (`data --protocol ratings`), predict each rating "
                        "before learning it (streaming.progressive)")
    s.add_argument("--tune-frac", type=float_in(0.0, 1.0, lo_open=True, hi_open=True), default=0.2,
                   help="--protocol progressive: share of the stream (by time) the settings are chosen on")
    s.add_argument("--items", type=int_in(2, MAX_ITEMS), default=500,
                   help="--protocol progressive: MoSAIC's coordinates, the most-rated items")
    s.add_argument("--seed", type=seed_int, default=0, help="--compare: seed of the methods")
    s.add_argument("--out", default=None, help="write the metrics as JSON")
    add_device_arg(s)
    add_overwrite_arg(s)
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("bench", help="multi-seed benchmark vs baselines: table, CSV, plots")
    s.add_argument("--out", default="results/streaming")
    s.add_argument("--seeds", type=int_in(1, MAX_SEEDS), default=10, help=f"seeds per cell (at most {MAX_SEEDS})")
    s.add_argument("--quick", action="store_true", help="short streams, fewer methods' restarts")
    s.add_argument("--configs", nargs="*", default=None)
    s.add_argument("--drifts", nargs="*", default=None)
    s.add_argument("--workers", type=int_in(1, MAX_WORKERS), default=1, help=f"processes (at most {MAX_WORKERS})")
    s.add_argument("--no-fashion", action="store_true")
    s.add_argument("--obs-frac", type=fraction, default=None,
                   help="observed fraction of every config (default: 0.4, 0.5 for 25-5-5)")
    s.add_argument("--large", action="store_true", help="also run the (10000, 10, 20) memory-scaling config")
    s.add_argument("--throughput", action="store_true",
                   help="time per sample of MoSAIC vs GROUSE instead (table + throughput.csv/json)")
    s.add_argument("--samples", type=int_in(1, MAX_SAMPLES), default=4000,
                   help=f"stream length per config for --throughput (at most {MAX_SAMPLES:,})")
    s.add_argument("--throughput-drift", choices=("abrupt", "none"), default="abrupt",
                   help="--throughput stream: one abrupt replacement at mid-stream (change buffer timed) or none (steady state)")
    s.add_argument("--repeats", type=int_in(1, MAX_REPEATS), default=3,
                   help=f"timed runs per method for --throughput (best is kept; at most {MAX_REPEATS})")
    s.add_argument("--suite", choices=("standard", "stress", "auto-kr"), default="standard",
                   help="stress: generator families beyond the geodesic one (streaming/stress.py); auto-kr: "
                        "the K/r estimator on the stress families (streaming.autokr.run_auto_kr)")
    s.add_argument("--json", default=None, help="auto-kr: write the result JSON here")
    s.add_argument("--resume", action="store_true",
                   help="auto-kr: reuse the finished trials of an interrupted run (the JSON's .partial.jsonl)")
    s.add_argument("--obs-fracs", type=fraction, nargs="+", default=None,
                   help="auto-kr: observed fractions (default 0.2 0.35 0.5)")
    s.add_argument("--cells", nargs="+", default=None,
                   help="stress cells as glob patterns over family/obsPP/spec/epochs, or 'all' "
                        "(default: */obs35/exact/*)")
    s.add_argument("--families", nargs="+", default=None, help="stress: only these generator families")
    s.add_argument("--tuning", action="store_true", help="stress: run on the tuning seeds instead of the test seeds")
    s.add_argument("--ablations", action="store_true", help="stress: also MoSAIC with each online mechanism off")
    s.add_argument("--eta-grid", action="store_true", help="stress: the pretrained k-GROUSE at every step of its grid")
    s.add_argument("--stress-seeds", type=positive_int, default=None, help="stress, auto-kr: use only the first N seeds (at most the 5 test / 3 tuning seeds)")
    add_device_arg(s)
    add_overwrite_arg(s)
    s.set_defaults(fn=cmd_bench)
    return p


main = subcommand_main(build_parser)


if __name__ == "__main__":
    sys.exit(main())
