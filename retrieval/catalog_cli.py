"""``moa3cir index``: a dataset split (``--root``); a shop's catalogue: build (resuming an interrupted
build), ``--add``, ``--remove``; a one-line summary on stdout, bad rows in ``<index>/bad_rows.csv``."""

from __future__ import annotations

import shutil
from pathlib import Path

from common.cli import check_outputs
from common.errors import InputError
from common.io import write_json

from .catalog import read_catalog
from .catalog_index import (
    CHUNKS,
    CatalogIndex,
    add_to_index,
    bad_summary,
    build_catalog_index,
    remove_from_index,
    split_index,
)


def _model(path: str | None, what: str):
    from .registry import load_model

    if not path:
        raise InputError(f"{what} needs --model (the checkpoint that embeds the images)")
    return load_model(Path(path))[0]


def _report(verb: str, idx: CatalogIndex, bad: list) -> None:
    where = f"; listed in {idx.path / 'bad_rows.csv'}" if bad else ""
    print(f"{verb}: {len(idx)} items in {idx.path} ({idx.index.kind}); {bad_summary(bad)}{where}")


def _index_split(args, out: Path) -> int:
    from .data import load_dataset
    from .registry import load_model

    if not args.model:
        raise InputError("--root needs --model (the checkpoint that embeds the gallery)")
    check_outputs(dirs=[out], inputs=[args.root, args.model], overwrite=args.overwrite)
    model, _ = load_model(Path(args.model))
    split = load_dataset(args.dataset, Path(args.root), args.split, args.variant)
    if args.kind in ("ivf", "ivfpq") and args.nlist > len(split.ids):
        raise InputError(f"--nlist {args.nlist} exceeds the {len(split.ids)} items of the {args.split} gallery")
    idx = split_index(model, split, args.kind, nlist=args.nlist, nprobe=args.nprobe, pq_m=args.pq_m,
                      rerank=args.rerank, device=args.device)
    idx.save(out)
    meta = {"dataset": args.dataset, "root": str(Path(args.root).resolve()), "variant": args.variant,
            "split": args.split}
    write_json(out / "source.json", meta)
    print(f"indexed {len(idx)} items into {args.out}")
    return 0


def index_catalog(args) -> int:
    """The one mode of ``args`` (``moa3cir index``'s options): root, catalog (build or resume), add or remove."""
    modes = [m for m in ("root", "catalog", "add", "remove") if getattr(args, m)]
    if len(modes) != 1:
        raise InputError("give exactly one of --root (a dataset split), --catalog (a new catalogue index), "
                         "--add FILE or --remove ID... (update the index at --out)")
    mode, out = modes[0], Path(args.out)
    if mode == "root":
        return _index_split(args, out)
    common = {"batch_size": args.batch_size, "device": args.device, "progress": not args.no_progress}
    if mode == "remove":
        idx = remove_from_index(out, args.remove)
        print(f"removed {len(set(args.remove))}: {len(idx)} items in {out}")
        return 0
    if mode == "add":
        if not (out / "catalog.json").is_file():
            raise InputError(f"--add needs an existing catalogue index at --out {out} (build it with --catalog)")
        current = CatalogIndex.load(out)
        model = _model(args.model or current.info.get("model"), "--add")
        catalog = read_catalog(Path(args.add), seen={it.id for it in current.items})
        idx, bad = add_to_index(out, catalog, model, **common)
        _report(f"added {len(idx) - len(current)}", idx, bad)
        return 0
    resuming = out.is_dir() and (out / CHUNKS).is_dir() and not (out / "catalog.json").exists()
    if args.overwrite and out.is_dir() and (out / "catalog.json").exists():
        check_outputs(dirs=[out], inputs=[args.catalog, args.model], overwrite=True)
        shutil.rmtree(out)
    elif not resuming:
        check_outputs(dirs=[out], inputs=[args.catalog, args.model], overwrite=args.overwrite)
    model = _model(args.model, "--catalog")
    catalog = read_catalog(Path(args.catalog))
    if resuming:
        print(f"resuming the unfinished index in {out}")
    idx, bad = build_catalog_index(catalog, model, out, args.kind, nlist=args.nlist, nprobe=args.nprobe,
                                   pq_m=args.pq_m, rerank=args.rerank, model_dir=Path(args.model), **common)
    _report("indexed", idx, bad)
    return 0
