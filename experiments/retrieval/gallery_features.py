"""How fast does the pretrained encoder (frozen EfficientNet-Lite0) turn a gallery into features,
into an empty cache and again from the cache? ``retrieval.bench.gallery_feature_speed`` on the
built benchmark's test gallery, once per torch thread count of ``--feature-threads``: images per
second (wall clock, and of the cold run per CPU second of this process) and the CNN forwards of
the second run (0 when the cache works). Formerly ``moa3cir bench --suite features`` (same
options); the bench's table still writes the one-thread row.

    python -m experiments.retrieval.gallery_features --root runs/rbench/data --out runs/rbench_feat \\
        --feature-threads 1 2 --json docs/results/retrieval/gallery_features.json
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.cli import ArgumentParser, add_overwrite_arg, check_outputs, cli_main, int_in, seed_int
from common.io import dumps_json, write_json
from retrieval.bench import bench_root, gallery_feature_speed
from retrieval.bounds import MAX_THREADS
from retrieval.data import VARIANTS, load_synthetic


def feature_speed_rows(root: Path, threads: list[int], variant: str = VARIANTS[0]) -> list[dict]:
    """One :func:`gallery_feature_speed` row per torch thread count, on ``variant``'s test gallery."""
    gallery = load_synthetic(root, "test", variant).images
    rows = []
    for n in threads:
        torch.set_num_threads(n)
        rows.append(gallery_feature_speed(gallery))
        print(dumps_json(rows[-1]))
    return rows


@cli_main
def main(argv=None) -> int:
    p = ArgumentParser(description="gallery-feature speed of the pretrained encoder, cold and cached")
    p.add_argument("--root", default=None, help="benchmark root (built into --out when absent)")
    p.add_argument("--benchmark", choices=("small", "hard"), default="small",
                   help="which built benchmark when --root is absent (built into --out/data[-hard])")
    p.add_argument("--out", default="runs/retrieval_features")
    p.add_argument("--variant", choices=VARIANTS, default=VARIANTS[0], help="whose test gallery is encoded")
    p.add_argument("--feature-threads", nargs="+", type=int_in(1, MAX_THREADS), default=[1],
                   help=f"torch threads, one run each, at most {MAX_THREADS}")
    p.add_argument("--json", default=None, help="also write the rows and the settings to this JSON file")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of a benchmark built here")
    add_overwrite_arg(p)
    a = p.parse_args(argv)
    out = Path(a.out)
    check_outputs(files=[a.json], dirs=[out], inputs=[a.root], overwrite=a.overwrite)
    rows = feature_speed_rows(bench_root(a.root, out, a.benchmark, a.seed), a.feature_threads, a.variant)
    if a.json:
        config = {k: v for k, v in vars(a).items() if k not in ("json", "overwrite")}
        write_json(Path(a.json), {"config": config, "features": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
