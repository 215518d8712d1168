"""Bad input to every CLI of the suite: exit code 2, exactly one ``error:`` line on stderr, no
traceback, and every file that existed before the run byte-identical afterwards (nothing written).

One parametrised test runs each case in-process against tiny fixtures built once per module; the
closed-pipe and kill cases need a subprocess and have their own tests below."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from apps.hub import main as hub_main
from common.io import dumps_json, sweep_stale_temps, write_json
from generation3d.cli import main as moca_main
from olfaction.cli import main as mixscent_main
from retrieval.cli import main as moa3cir_main
from streaming.cli import main as mosaic_main
from vision.cli import main as moh_main

ROOT = Path(__file__).resolve().parents[2]
CLIS = {
    "mosaic": mosaic_main,
    "moh": moh_main,
    "moca": moca_main,
    "moa3cir": moa3cir_main,
    "mixscent": mixscent_main,
    "moe-demo": hub_main,
}
SIM = ["simulate", "--n", "8", "--r", "2", "--K", "2", "--epochs", "1", "--samples-per-epoch", "60",
       "--source-per-class", "20"]


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    """Directory with tiny valid inputs, malformed inputs, and existing outputs to protect:

    stream.npz / ckpt/ / completed.npz (a real mosaic run), truncated.npz, empty.npz, garbage.npz,
    badversion.npz (non-numeric format version), wrongshape.npz, existing.{npz,json,png,csv},
    x.glb + x.png (an unrelated PNG beside a sample's path), full/ (a non-empty directory),
    afile (a file used as a parent directory), corrupt checkpoints, CSVs that are not UTF-8,
    short, empty or header-only, a corrupt faiss index and a truncated MoCA dataset."""
    d = tmp_path_factory.mktemp("cli_safety")
    s, ck, done = d / "stream.npz", d / "ckpt", d / "completed.npz"
    assert mosaic_main([*SIM, "--out", str(s)]) == 0
    assert mosaic_main(["pretrain", "--input", str(s), "--K", "2", "--r", "2", "--restarts", "1", "--out", str(ck)]) == 0
    assert mosaic_main(["stream", "--input", str(s), "--model", str(ck), "--output", str(done)]) == 0
    raw = s.read_bytes()
    (d / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    (d / "empty.npz").write_bytes(b"")
    (d / "garbage.npz").write_text("this is not a zip file\n")
    np.savez(d / "badversion.npz", format_version=np.array("one"), values=np.ones((4, 3)))
    np.savez(d / "wrongshape.npz", completed=np.ones((3, 3)))
    for name in ("existing.npz", "existing.json", "existing.png", "existing.csv", "x.glb", "x.png"):
        (d / name).write_bytes(f"precious {name}\n".encode())
    (d / "full").mkdir()
    (d / "full" / "keep.txt").write_text("keep\n")
    (d / "afile").write_text("a file, not a directory\n")
    (d / "emptydir").mkdir()
    # checkpoints: a config with a non-numeric format version, garbage weights, garbage config
    (d / "badformat").mkdir()
    save_file({"w": torch.zeros(2)}, str(d / "badformat" / "model.safetensors"))
    (d / "badformat" / "config.json").write_text(
        json.dumps({"format_version": "one", "config": {"model": "MoSAIC"}, "extra": {}}))
    (d / "corruptck").mkdir()
    (d / "corruptck" / "config.json").write_bytes(b"\xff\xfe{not json")
    (d / "corruptck" / "model.safetensors").write_bytes(b"\x00" * 10)
    (d / "corruptck" / "scheduler_config.json").write_text("{")
    # a faiss index whose metadata is not UTF-8 and whose index file is garbage
    (d / "badindex").mkdir()
    (d / "badindex" / "index.faiss").write_bytes(b"\x00" * 64)
    (d / "badindex" / "index.json").write_bytes(b"\xff\xfe\x00")
    (d / "metaindex").mkdir()
    (d / "metaindex" / "index.faiss").write_bytes(b"\x00" * 64)
    (d / "metaindex" / "index.json").write_text("[1, 2]")
    # a MoCA dataset whose parts.npz is cut short
    (d / "parts").mkdir()
    (d / "parts" / "parts.npz").write_bytes(raw[: len(raw) // 3])
    (d / "garbage.glb").write_text("solid nothing\n")
    # furniture and shape folders for moca build-data: a corrupt .sh3f only; shapes that are all unusable
    (d / "badsh3f").mkdir()
    (d / "badsh3f" / "Broken.sh3f").write_bytes(b"PK\x03\x04 truncated")
    (d / "badshapes" / "chair").mkdir(parents=True)
    (d / "badshapes" / "chair" / "nofaces.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\n")
    (d / "badshapes" / "chair" / "flat.obj").write_text("v 0 0 0\nv 1 0 0\nv 2 0 0\nf 1 2 3\n")
    (d / "badshapes" / "spaceship").mkdir()
    (d / "badshapes" / "spaceship" / "x.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    (d / "garbage.png").write_text("no image here\n")
    # DREAM-format CSVs
    (d / "nonutf8.csv").write_bytes(b"Dataset,Mixture_1,Mixture_2\nBushdid,\xff\xfe,2\n")
    (d / "short.csv").write_text("Dataset,Mixture_1,Mixture_2\nBushdid,1,2\nBushdid,1\n")
    (d / "empty.csv").write_text("")
    (d / "header.csv").write_text("Dataset,Mixture_1,Mixture_2\n")
    (d / "wrongcols.csv").write_text("a,b\n1,2\n")
    (d / "good.csv").write_text("Dataset,Mixture_1,Mixture_2\nBushdid,1,2\n")
    (d / "split.json").write_text(json.dumps({"training": [0], "validation": [1], "testing": [2]}))
    return d


# (cli, argv) with {d} standing for the fixture directory; each must fail with a one-line error.
CASES: list[tuple[str, str]] = [
    # --- mosaic: numbers
    ("mosaic", "simulate --n 0 --out {d}/new.npz"),
    ("mosaic", "simulate --n -5 --out {d}/new.npz"),
    ("mosaic", "simulate --r 0 --out {d}/new.npz"),
    ("mosaic", "simulate --K 0 --out {d}/new.npz"),
    ("mosaic", "simulate --obs-frac 0 --out {d}/new.npz"),
    ("mosaic", "simulate --obs-frac 1.5 --out {d}/new.npz"),
    ("mosaic", "simulate --obs-frac nan --out {d}/new.npz"),
    ("mosaic", "simulate --noise -0.1 --out {d}/new.npz"),
    ("mosaic", "simulate --noise inf --out {d}/new.npz"),
    ("mosaic", "simulate --epochs 0 --out {d}/new.npz"),
    ("mosaic", "simulate --samples-per-epoch 0 --out {d}/new.npz"),
    ("mosaic", "simulate --angle nan --out {d}/new.npz"),
    ("mosaic", "simulate --angle -1 --out {d}/new.npz"),
    ("mosaic", "simulate --n-replace 0 --out {d}/new.npz"),
    ("mosaic", "simulate --seed -1 --out {d}/new.npz"),
    ("mosaic", "simulate --seed 1e3 --out {d}/new.npz"),
    ("mosaic", "simulate --source-per-class -2 --out {d}/new.npz"),
    ("mosaic", "simulate --K 2 --proportions a,b --out {d}/new.npz"),
    ("mosaic", "simulate --K 2 --proportions nan,1 --out {d}/new.npz"),
    ("mosaic", "simulate --config 1-2-3 --out {d}/new.npz"),
    ("mosaic", "simulate --n 10 --r 20 --out {d}/new.npz"),
    ("mosaic", "simulate --drift sideways --out {d}/new.npz"),
    ("mosaic", "simulate --bogus 1 --out {d}/new.npz"),
    ("mosaic", "simulate"),
    ("mosaic", ""),
    # --- mosaic: outputs
    ("mosaic", "simulate --out {d}/existing.npz"),
    ("mosaic", "simulate --out {d}/afile/new.npz"),
    ("mosaic", "simulate --out {d}/full"),
    ("mosaic", "simulate --out /proc/moe-apps-cli-test.npz"),
    ("mosaic", "pretrain --input {d}/stream.npz --K 2 --r 2 --out {d}/ckpt"),
    ("mosaic", "pretrain --input {d}/stream.npz --K 2 --r 2 --out {d}/stream.npz --overwrite"),
    ("mosaic", "pretrain --input {d}/stream.npz --K 2 --r 2 --out {d}/afile"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/stream.npz --K 2 --r 2 --overwrite"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/existing.npz --K 2 --r 2"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/afile/o.npz --K 2 --r 2"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/full --K 2 --r 2"),
    ("mosaic", "stream --input {d}/stream.npz --model {d}/ckpt --save-model {d}/ckpt --output {d}/n.npz --overwrite"),
    ("mosaic", "stream --input {d}/stream.npz --model {d}/ckpt --save-model {d}/full --output {d}/n.npz"),
    ("mosaic", "eval --input {d}/stream.npz --completed {d}/completed.npz --out {d}/existing.json"),
    ("mosaic", "eval --input {d}/stream.npz --completed {d}/completed.npz --out {d}/stream.npz --overwrite"),
    ("mosaic", "eval --input {d}/stream.npz --completed {d}/completed.npz --out {d}/full"),
    ("mosaic", "bench --out {d}/full"),
    ("mosaic", "bench --out {d}/afile"),
    ("mosaic", "bench --out {d}/new_stress --cells nothing/*"),
    ("mosaic", "bench --out {d}/new_stress --families bogus"),
    ("mosaic", "bench --out {d}/new_stress --stress-seeds 0"),
    ("mosaic", "bench --out {d}/new_stress --stress-seeds 6"),
    ("mosaic", "bench --out {d}/new_stress --suite bogus"),
    ("mosaic", "bench --out {d}/new_bench --suite standard"),
    ("mosaic", "bench --out {d}/new_bench --quick"),
    ("mosaic", "eval --input {d}/stream.npz --out {d}/new.json"),
    ("mosaic", "pretrain --input {d}/stream.npz --K auto --r auto --out {d}/ckpt"),
    ("mosaic", "pretrain --input {d}/stream.npz --K many --r 2 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/stream.npz --K auto --r 0 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/stream.npz --K auto --r auto --k-max 0 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/stream.npz --K auto --r auto --select-restarts 0 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/stream.npz --K 2 --r 7 --out {d}/new_ck"),
    # --- mosaic: malformed inputs and other numbers
    ("mosaic", "pretrain --input {d}/truncated.npz --K 2 --r 2 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/empty.npz --K 2 --r 2 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/garbage.npz --K 2 --r 2 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/badversion.npz --K 2 --r 2 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/missing.npz --K 2 --r 2 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/stream.npz --K 0 --r 2 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/stream.npz --K 2 --r 2 --restarts 0 --out {d}/new_ck"),
    ("mosaic", "pretrain --input {d}/stream.npz --K 2 --r 9 --out {d}/new_ck"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/n.npz --K 2"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/n.npz --K 2 --r 2 --n-source -1"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/n.npz --model {d}/missing_ck"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/n.npz --model {d}/badformat"),
    ("mosaic", "stream --input {d}/stream.npz --output {d}/n.npz --model {d}/corruptck"),
    ("mosaic", "eval --input {d}/stream.npz --completed {d}/truncated.npz"),
    ("mosaic", "eval --input {d}/stream.npz --completed {d}/empty.npz"),
    ("mosaic", "eval --input {d}/stream.npz --completed {d}/stream.npz"),
    ("mosaic", "eval --input {d}/stream.npz --completed {d}/wrongshape.npz"),
    ("mosaic", "eval --input {d}/badversion.npz --completed {d}/completed.npz"),
    ("mosaic", "bench --seeds 0 --out {d}/new_bench"),
    ("mosaic", "bench --workers 0 --out {d}/new_bench"),
    ("mosaic", "bench --obs-frac 0 --out {d}/new_bench"),
    ("mosaic", "bench --throughput --samples 0 --out {d}/new_bench"),
    ("mosaic", "bench --throughput --repeats -1 --out {d}/new_bench"),
    ("mosaic", "data movielens --movies 1 --out {d}/new.npz"),
    ("mosaic", "data movielens --movies many --out {d}/new.npz"),
    ("mosaic", "data movielens --holdout 1 --out {d}/new.npz"),
    ("mosaic", "data movielens --holdout -0.1 --out {d}/new.npz"),
    ("mosaic", "data movielens --holdout nan --out {d}/new.npz"),
    ("mosaic", "data movielens --source-users -1 --out {d}/new.npz"),
    ("mosaic", "data movielens --seed -1 --out {d}/new.npz"),
    ("mosaic", "data netflix --out {d}/new.npz"),
    ("mosaic", "data movielens"),
    ("mosaic", "data movielens --data-dir {d}/emptydir --out {d}/new.npz"),
    ("mosaic", "data movielens --data-dir {d}/afile --out {d}/new.npz"),
    ("mosaic", "data movielens --out {d}/existing.npz"),
    ("mosaic", "data movielens --out {d}/afile/new.npz"),
    ("mosaic", "data movielens --out {d}/full"),
    ("mosaic", "eval --input {d}/stream.npz"),
    # --- moh
    ("moh", "train --steps 0 --out {d}/new_run"),
    ("moh", "train --batch-size 0 --out {d}/new_run"),
    ("moh", "train --lr 0 --out {d}/new_run"),
    ("moh", "train --lr=-1e-3 --out {d}/new_run"),
    ("moh", "train --lr inf --out {d}/new_run"),
    ("moh", "train --size 0 --out {d}/new_run"),
    ("moh", "train --channels 0 --out {d}/new_run"),
    ("moh", "train --channels 5 --out {d}/new_run"),
    ("moh", "train --patch-size 0 --out {d}/new_run"),
    ("moh", "train --threads 0 --out {d}/new_run"),
    ("moh", "train --limit 0 --out {d}/new_run"),
    ("moh", "train --checkpoint-every -1 --out {d}/new_run"),
    ("moh", "train --model nope --out {d}/new_run"),
    ("moh", "train --out {d}/full"),
    ("moh", "train --out {d}/afile"),
    ("moh", "train --data {d}/full --out {d}/full --overwrite"),
    ("moh", "train --data {d}/emptydir --size 16 --channels 3 --out {d}/new_run"),
    ("moh", "sample --ckpt {d}/ckpt --n 0 --out {d}/new.png"),
    ("moh", "sample --ckpt {d}/ckpt --steps 0 --out {d}/new.png"),
    ("moh", "sample --ckpt {d}/ckpt --seed 1099511627776 --out {d}/new.png"),
    ("moh", "sample --ckpt {d}/ckpt --out {d}/existing.png"),
    ("moh", "sample --ckpt {d}/ckpt --out {d}/full"),
    ("moh", "sample --ckpt {d}/ckpt --out {d}/afile/g.png"),
    ("moh", "sample --ckpt {d}/corruptck --out {d}/new.png"),
    ("moh", "sample --ckpt {d}/missing_ck --out {d}/new.png"),
    ("moh", "sample --ckpt {d}/ckpt --sampler euler --out {d}/new.png"),
    ("moh", "eval --ckpt {d}/ckpt --n 0"),
    ("moh", "eval --ckpt {d}/ckpt --n-real 0"),
    ("moh", "eval --ckpt {d}/ckpt --steps -1"),
    ("moh", "eval --ckpt {d}/ckpt --out {d}/existing.json"),
    ("moh", "eval --ckpt {d}/corruptck --out {d}/new.json"),
    ("moh", "eval --ckpt {d}/ckpt --data {d}/emptydir --out {d}/new.json"),
    ("moh", "eval --ckpt {d}/ckpt --data {d}/no_such_folder --out {d}/new.json"),
    ("moh", "train --data sweethome3d --size 2 --out {d}/new_run"),
    ("moh", "bench --steps 0 --out {d}/new_bench"),
    ("moh", "bench --out {d}/full"),
    ("moh", "bench --suite sizes --sizes XL"),
    ("moh", "bench --suite compute --model-size XL --out {d}/new_bench"),
    ("moh", "bench --suite compute --out {d}/full"),
    ("moh", "bench --suite compute --json {d}/existing.json --out {d}/new_bench"),
    ("moh", "bench --suite quick --budget-min 1 --out {d}/new_bench"),
    ("moh", "bench --suite sizes --json {d}/existing.json"),
    # --- moca
    ("moca", "build-data --per-category 0 --out {d}/new_data"),
    ("moca", "build-data --points 0 --out {d}/new_data"),
    ("moca", "build-data --scenes -1 --out {d}/new_data"),
    ("moca", "build-data --scene-parts 0 --out {d}/new_data"),
    ("moca", "build-data --seed -3 --out {d}/new_data"),
    ("moca", "build-data --out {d}/full"),
    ("moca", "build-data --out {d}/afile/sub"),
    ("moca", "build-data --out {d}/afile"),
    ("moca", "build-data --source {d}/missing_shapes --out {d}/new_data"),
    ("moca", "build-data --source {d}/afile --out {d}/new_data"),
    ("moca", "build-data --source {d}/badshapes --out {d}/new_data"),
    ("moca", "build-data --source {d}/badshapes --out {d}/badshapes/out"),
    ("moca", "build-data --source {d}/badshapes --out {d}/badshapes --overwrite"),
    ("moca", "build-data --source {d}/badshapes --up x --out {d}/new_data"),
    ("moca", "build-data --source {d}/badshapes --max-parts 0 --out {d}/new_data"),
    ("moca", "build-data --source sweethome3d --furniture-dir {d}/missing_furniture --out {d}/new_data"),
    ("moca", "build-data --source sweethome3d --furniture-dir {d}/emptydir --out {d}/new_data"),
    ("moca", "build-data --source sweethome3d --furniture-dir {d}/badsh3f --out {d}/new_data"),
    ("moca", "build-data --source sweethome3d --furniture-dir {d}/badsh3f --out {d}/full"),
    ("moca", "train-ae --steps 0 --data-dir {d}/parts --out {d}/new_ae"),
    ("moca", "train-ae --lr nan --data-dir {d}/parts --out {d}/new_ae"),
    ("moca", "train-ae --latents 0 --data-dir {d}/parts --out {d}/new_ae"),
    ("moca", "train-ae --batch-size -4 --data-dir {d}/parts --out {d}/new_ae"),
    ("moca", "train-ae --data-dir {d}/parts --out {d}/new_ae"),
    ("moca", "train-ae --data-dir {d}/emptydir --out {d}/new_ae"),
    ("moca", "train-ae --data-dir {d}/parts --out {d}/full"),
    ("moca", "train-ae --data-dir {d}/parts --out {d}/parts --overwrite"),
    ("moca", "train --ae {d}/missing_ae --top-k 0 --out {d}/new_run"),
    ("moca", "train --ae {d}/missing_ae --dense-warmup 1.5 --out {d}/new_run"),
    ("moca", "train --ae {d}/missing_ae --router-distill -1 --out {d}/new_run"),
    ("moca", "train --ae {d}/missing_ae --d-model 0 --out {d}/new_run"),
    ("moca", "train --ae {d}/missing_ae --max-parts 0 --out {d}/new_run"),
    ("moca", "train --ae {d}/corruptck --data-dir {d}/parts --out {d}/new_run"),
    ("moca", "train --ae {d}/full --data-dir {d}/parts --out {d}/full --overwrite"),
    ("moca", "train --data-dir {d}/parts --out {d}/new_run"),  # no --ae and no --preset
    ("moca", "train --ae {d}/missing_ae --ae-steps 5 --out {d}/new_run"),  # --ae-steps is for --preset
    ("moca", "train --preset demo --ae {d}/missing_ae --out {d}/new_run"),
    ("moca", "train --preset demo --data-dir {d}/parts --out {d}/new_run"),
    ("moca", "train --preset nope --out {d}/new_run"),
    ("moca", "train --preset demo --ae-steps 0 --out {d}/new_run"),
    ("moca", "train --preset demo --out {d}/full"),
    ("moca", "eval --ckpt {d}/ckpt --split train"),
    ("moca", "sample --ckpt {d}/ckpt --out {d}/x.glb"),
    ("moca", "sample --ckpt {d}/ckpt --out {d}/y.glb --overwrite --guidance nan"),
    ("moca", "sample --ckpt {d}/ckpt --out {d}/x.stl"),
    ("moca", "sample --ckpt {d}/ckpt --parts 0 --out {d}/new.glb"),
    ("moca", "sample --ckpt {d}/ckpt --steps -2 --out {d}/new.glb"),
    ("moca", "sample --ckpt {d}/missing_ck --out {d}/new.glb"),
    ("moca", "sample --ckpt {d}/corruptck --out {d}/new.glb"),
    ("moca", "eval --ckpt {d}/ckpt --n 0"),
    ("moca", "eval --ckpt {d}/ckpt --guidance inf"),
    ("moca", "eval --ckpt {d}/ckpt --out {d}/existing.json"),
    ("moca", "eval --ckpt {d}/ckpt --no-fidelity --n -1"),
    ("moca", "train --ae {d}/missing_ae --proportional --out {d}/new_run"),  # a removed MoCA variant
    ("moca", "eval --ckpt {d}/ckpt --no-fidelity --out {d}/existing.json"),
    ("moca", "flow-loss --ckpt {d}/ckpt --out {d}/afile/f.json"),
    ("moca", "flow-loss --ckpt {d}/ckpt --data-dir {d}/parts --out {d}/new.json"),
    ("moca", "bench --suite attention --parts 8,0 --out {d}/new_bench"),
    ("moca", "bench --suite attention --parts , --out {d}/new_bench"),
    ("moca", "bench --suite attention --parts 8,x --out {d}/new_bench"),
    ("moca", "bench --suite attention --tokens 0 --out {d}/new_bench"),
    ("moca", "bench --suite attention --repeats 0 --out {d}/new_bench"),
    ("moca", "bench --suite attention --out {d}/full"),
    ("moca", "bench --suite scenes --parts 32,0 --out {d}/new.json"),
    ("moca", "bench --suite scenes --tokens 0 --out {d}/new.json"),
    ("moca", "bench --suite scenes --repeats 0 --out {d}/new.json"),
    ("moca", "bench --suite scenes --out {d}/existing.json"),
    ("moca", "build-data --source scenes --scene-parts 300 --scene-max-parts 256 --out {d}/new_data"),
    ("moca", "build-data --source scenes --scenes 0 --out {d}/new_data"),
    ("moca", "build-data --source scenes --scene-max-parts 0 --out {d}/new_data"),
    ("moca", "build-data --source scenes --furniture-dir {d}/missing_furniture --out {d}/new_data"),
    ("moca", "build-data --source scenes --furniture-dir {d}/badsh3f --out {d}/new_data"),
    ("moca", "load-mesh {d}/missing.glb"),
    ("moca", "load-mesh {d}/garbage.glb"),
    ("moca", "load-mesh {d}/garbage.glb --out {d}/garbage.glb --overwrite"),
    ("moca", "load-mesh {d}/garbage.glb --out {d}/existing.png"),
    # --- moa3cir
    ("moa3cir", "build-data --out {d}/full"),
    ("moa3cir", "build-data --out {d}/afile"),
    ("moa3cir", "build-data --out {d}/new_data --size huge"),
    ("moa3cir", "train --root {d}/missing --out {d}/full"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --phase1-epochs -1"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --phase1-epochs 0 --phase2-epochs 0"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --augment -5"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --val-fraction 0.9"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --val-fraction -0.1"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --val-fraction nan"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --patience 0"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --phase2-epochs -2"),
    ("moa3cir", "train --dataset fashioniq --root {d}/full --out {d}/new_run"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run"),
    ("moa3cir", "train --root {d}/full --out {d}/full --overwrite"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --image-encoder resnet50"),
    ("moa3cir", "train --root {d}/missing --out {d}/new_run --fine-tune-blocks -1"),
    ("moa3cir", "train --root {d}/full --out {d}/new_run --image-encoder scratch --fine-tune-blocks 9"),
    ("moa3cir", "train --root {d}/full --out {d}/new_run --image-encoder efficientnet-lite0 --fine-tune-blocks 3"),
    ("moa3cir", "train --root {d}/full --out {d}/new_run --fine-tune-blocks 17"),
    ("moa3cir", "eval --root {d}/missing --model {d}/missing_ck"),
    ("moa3cir", "eval --root {d}/missing --model {d}/corruptck"),
    ("moa3cir", "eval --root {d}/missing --model {d}/ckpt --out {d}/existing.json"),
    ("moa3cir", "index --root {d}/missing --model {d}/ckpt --nlist 0 --out {d}/new_index"),
    ("moa3cir", "index --root {d}/missing --model {d}/ckpt --out {d}/full"),
    ("moa3cir", "search --model {d}/ckpt --index {d}/badindex --image {d}/existing.png --text red --k 0"),
    ("moa3cir", "search --model {d}/ckpt --index {d}/badindex --image {d}/existing.png --text red"),
    ("moa3cir", "search --model {d}/ckpt --index {d}/metaindex --image {d}/existing.png --text red"),
    ("moa3cir", "search --model {d}/ckpt --index {d}/full --image {d}/existing.png --text '  '"),
    ("moa3cir", "bench --suite search --out {d}/new_bench"),
    ("moa3cir", "bench --suite features --out {d}/new_bench"),
    ("moa3cir", "bench --model-size XL --out {d}/new_bench"),
    ("moa3cir", "bench --out {d}/full"),
    ("moa3cir", "bench --out {d}/new_bench --json {d}/existing.json"),
    ("moa3cir", "bench --phase1-epochs 0 --phase2-epochs 0 --out {d}/new_bench"),
    ("moa3cir", "build-data --out {d}/new_data --preset huge"),
    ("moa3cir", "bench --benchmark huge --out {d}/new_bench"),
    ("moa3cir", "bench --benchmark hard --root {d}/full --out {d}/new_bench"),
    ("moa3cir", "bench --benchmark hard --root {d}/missing --out {d}/new_bench"),
    ("moa3cir", "bench --image-encoders scratch resnet50 --out {d}/new_bench"),
    ("moa3cir", "bench --feature-threads 1 --out {d}/new_bench"),
    # --- mixscent
    ("mixscent", "pretrain --epochs 0 --encoder {d}/new_enc"),
    ("mixscent", "pretrain --epochs -3 --encoder {d}/new_enc"),
    ("mixscent", "pretrain --encoder {d}/full"),
    ("mixscent", "pretrain --encoder {d}/afile"),
    ("mixscent", "pretrain --moses 10 --encoder {d}/new_enc"),  # MOSES pretraining left the product
    ("mixscent", "train --epochs 0 --out {d}/new_model"),
    ("mixscent", "train --label-epochs 0 --out {d}/new_model"),
    ("mixscent", "train --minimol --out {d}/full"),
    ("mixscent", "train --label-features mordred --out {d}/new_model"),
    ("mixscent", "train --minimol --data-dir {d}/missing --out {d}/new_model"),
    ("mixscent", "predict --model {d}/ckpt --mix1 CCO --mix2 CC"),
    ("mixscent", "predict --mix1 CCO --mix2 CC --dataset Bushdid"),
    ("mixscent", "train --out {d}/full"),
    ("mixscent", "train"),
    ("mixscent", "train --data-dir {d}/missing --out {d}/new_model"),
    ("mixscent", "eval --out {d}/existing.json"),
    ("mixscent", "eval --split {d}/split.json --out {d}/split.json --overwrite"),
    ("mixscent", "predict --model {d}/ckpt --csv {d}/nonutf8.csv"),
    ("mixscent", "predict --model {d}/ckpt --csv {d}/short.csv"),
    ("mixscent", "predict --model {d}/ckpt --csv {d}/empty.csv"),
    ("mixscent", "predict --model {d}/ckpt --csv {d}/header.csv"),
    ("mixscent", "predict --model {d}/ckpt --csv {d}/wrongcols.csv"),
    ("mixscent", "predict --model {d}/ckpt --csv {d}/missing.csv"),
    ("mixscent", "predict --model {d}/ckpt --csv {d}/good.csv --out {d}/good.csv --overwrite"),
    ("mixscent", "predict --model {d}/ckpt --csv {d}/good.csv --out {d}/existing.csv"),
    ("mixscent", "predict --model {d}/badformat --mix1 CCO --mix2 CC"),
    ("mixscent", "predict --model {d}/corruptck --mix1 CCO --mix2 CC"),
    ("mixscent", "predict --model {d}/ckpt --mix1 CCO --mix2 CC --dataset Bushdid --backend onnx"),
    ("mixscent", "predict --model {d}/ckpt --mix1 CCO --mix2 CC --dataset Bushdid --backend jax"),
    ("mixscent", "labels --model {d}/ckpt --mix CCO --top 0"),
    ("mixscent", "white --model {d}/ckpt --max-n 0"),
    ("mixscent", "white --model {d}/ckpt --samples -1"),
    ("mixscent", "white --model {d}/ckpt --out {d}/full"),
    ("mixscent", "white --model {d}/ckpt --out {d}/ckpt --overwrite"),
    ("mixscent", "bench --folds 0 --out {d}/new_bench.json"),
    ("mixscent", "bench --epochs 0 --out {d}/new_bench.json"),
    ("mixscent", "bench --trees 0 --out {d}/new_bench.json"),
    ("mixscent", "bench --families random_cv,nope --out {d}/new_bench.json"),
    ("mixscent", "bench --suite minimol --folds 0 --out {d}/new_bench.json"),
    ("mixscent", "bench --out {d}/existing.json"),
    ("mixscent", "bench --encoder {d}/existing.json --out {d}/existing.json --overwrite"),
    ("mixscent", "quick --out {d}/full"),
    ("mixscent", "featurize --nproc 0"),
    ("mixscent", "featurize --limit 0"),
    # --- moe-demo
    ("moe-demo", "--port 0"),
    ("moe-demo", "--port 70000"),
    ("moe-demo", "--bogus"),
]


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_enough_cases_over_every_cli():
    assert len(CASES) >= 100
    assert {cli for cli, _ in CASES} == set(CLIS)


@pytest.mark.parametrize("cli,argv", CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_bad_input_is_one_error_line_and_touches_nothing(fx, cli, argv, capsys, monkeypatch):
    import shlex

    monkeypatch.chdir(fx)  # default output paths land in the checked directory too
    monkeypatch.setenv("MOE_APPS_CACHE", str(fx / "full"))  # any cache write shows in the snapshot
    before = _snapshot(fx)
    capsys.readouterr()
    code = CLIS[cli](shlex.split(argv.format(d=fx)))
    out, err = capsys.readouterr()
    assert code == 2, (code, out[-500:], err[-2000:])
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert _snapshot(fx) == before


# ----------------------------------------------------------------------------- focused tests


def test_overwrite_allows_the_rewrite_and_its_absence_protects_the_file(tmp_path, capsys):
    out = tmp_path / "s.npz"
    assert mosaic_main([*SIM, "--seed", "1", "--out", str(out)]) == 0
    first = out.read_bytes()
    assert mosaic_main([*SIM, "--seed", "2", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err and out.read_bytes() == first
    assert mosaic_main([*SIM, "--seed", "2", "--out", str(out), "--overwrite"]) == 0
    assert out.read_bytes() != first
    with np.load(out) as z:
        assert z["values"].shape == (60, 8)


def test_atomic_write_keeps_the_replaced_files_permissions(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{}")
    path.chmod(0o640)
    write_json(path, {"a": 1})
    assert (path.stat().st_mode & 0o777) == 0o640 and json.loads(path.read_text()) == {"a": 1}
    new = tmp_path / "new.json"
    old_mask = os.umask(0o022)
    try:
        write_json(new, [1])
    finally:
        os.umask(old_mask)
    assert (new.stat().st_mode & 0o777) == 0o644  # 0o666 & ~umask, not mkstemp's 0o600


def test_json_outputs_are_strict_json(tmp_path):
    obj = {"nan": float("nan"), "inf": float("inf"), "arr": np.array([1.0, np.nan]), "n": np.float32(0.5)}
    expected = {"nan": None, "inf": None, "arr": [1.0, None], "n": 0.5}

    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c}"))

    assert strict(dumps_json(obj)) == expected
    assert strict(write_json(tmp_path / "m.json", obj).read_text()) == expected


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temp_of_a_killed_writer_is_swept_at_the_next_write(tmp_path):
    target = tmp_path / "r.json"
    stale = tmp_path / f".r.json.{_dead_pid()}.abc123.tmp"
    stale.write_text("half a result")
    live = tmp_path / f".r.json.{os.getppid()}.xyz.tmp"  # a writer that is still running
    live.write_text("in progress")
    other = tmp_path / f".other.json.{_dead_pid()}.q.tmp"  # another target's temp: not ours to remove
    other.write_text("x")
    write_json(target, {"ok": True})
    assert not stale.exists() and live.exists() and other.exists()
    assert sweep_stale_temps(tmp_path / "other.json") == [other] and not other.exists()


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def test_sigterm_during_an_atomic_write_leaves_no_temp_and_the_old_file(tmp_path):
    target = tmp_path / "r.txt"
    target.write_text("old\n")
    script = textwrap.dedent(f"""
        import sys, time
        from common.cli import cli_main
        from common.io import atomic_write

        @cli_main
        def main():
            with atomic_write({str(target)!r}) as f:
                f.write("partial")
                f.flush()
                print("writing", flush=True)
                time.sleep(60)

        sys.exit(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    assert len(list(tmp_path.glob(".r.txt.*.tmp"))) == 1  # the write is under way
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in err
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]


def test_closed_stdout_exits_quietly(tmp_path):
    """``mosaic eval ... | head``: the reader is gone before the JSON is printed."""
    s, ck, done = tmp_path / "s.npz", tmp_path / "ck", tmp_path / "c.npz"
    assert mosaic_main([*SIM, "--out", str(s)]) == 0
    assert mosaic_main(["pretrain", "--input", str(s), "--K", "2", "--r", "2", "--restarts", "1", "--out", str(ck)]) == 0
    assert mosaic_main(["stream", "--input", str(s), "--model", str(ck), "--output", str(done)]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "streaming.cli", "eval", "--input", str(s), "--completed", str(done)],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # like `head` exiting at once
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    err = proc.stderr.read().decode()
    assert proc.returncode in (0, 141), err
    assert "Traceback" not in err and "BrokenPipe" not in err and err == ""


def test_every_subcommand_that_writes_has_overwrite():
    """``--overwrite`` on every subcommand with an output option (the rule is the same everywhere)."""
    import argparse

    from generation3d.cli import build_parser as moca_parser
    from olfaction.cli import build_parser as mixscent_parser
    from retrieval.cli import build_parser as moa3cir_parser
    from streaming.cli import build_parser as mosaic_parser
    from vision.cli import build_parser as moh_parser

    missing = []
    for build in (moca_parser, mixscent_parser, moa3cir_parser, mosaic_parser, moh_parser):
        parser = build()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for name, sp in sub.choices.items():
            opts = {o for a in sp._actions for o in a.option_strings}
            if opts & {"--out", "--output", "--encoder", "--save-model"} and "--overwrite" not in opts:
                missing.append(f"{parser.prog} {name}")
    assert missing == []
