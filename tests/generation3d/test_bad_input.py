"""Bad input to ``moca`` and the 3D tab: absurd sizes refused before any work, malformed dataset,
folder and checkpoint files named in one error line, long runs stopped by SIGINT/SIGTERM without
stray files, an interrupted checkpoint save, and the tab under 8 concurrent requests."""

import json
import shutil
import signal
import threading

import numpy as np
import pytest

from generation3d import demo
from generation3d.cli import main
from generation3d.data import DATASET_FILE
from generation3d.limits import MAX_POINTS, MAX_SAMPLING_STEPS, STEPS_WITHOUT_FORCE
from tests.bad_input import assert_refused, assert_stops_on_signal

HUGE = "1000000000000"


# ---------------------------------------------------------------- sizes that parse but cannot run
@pytest.mark.parametrize("argv, match", [
    (["build-data", "--points", HUGE], f"[1, {MAX_POINTS}]"),
    (["build-data", "--per-category", HUGE], "must be an integer in"),
    (["build-data", "--scenes", HUGE], "must be an integer in"),
    (["train-ae", "--steps", HUGE], "must be an integer in"),
    (["train", "--steps", HUGE], "must be an integer in"),
    (["train", "--batch-size", HUGE], "must be an integer in"),
    (["sample", "--ckpt", "x", "--steps", HUGE], f"[1, {MAX_SAMPLING_STEPS}]"),
    (["sample", "--ckpt", "x", "--parts", HUGE], "must be an integer in"),
    (["eval", "--ckpt", "x", "--n", HUGE], "must be an integer in"),
    (["bench", "--suite", "attention", "--repeats", HUGE], "must be an integer in"),
])
def test_absurd_counts_are_refused_at_parse_time(argv, match, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_refused(main, argv, tmp_path, match=match)


def test_build_data_names_its_memory_estimate(tmp_path):
    err = assert_refused(main, ["build-data", "--points", str(MAX_POINTS), "--per-category", "2000",
                                "--out", str(tmp_path / "d")], tmp_path, match="GiB of memory (estimate)")
    assert "--force" in err


@pytest.mark.parametrize("argv, flag", [
    (["train-ae", "--steps", str(STEPS_WITHOUT_FORCE + 1), "--data-dir", "nodata"], "--steps"),
    (["train", "--ae", "ae", "--steps", str(STEPS_WITHOUT_FORCE + 1), "--data-dir", "nodata"], "--steps"),
    (["train", "--preset", "demo", "--ae-steps", str(STEPS_WITHOUT_FORCE + 1)], "--ae-steps"),
])
def test_training_past_the_step_budget_needs_force(argv, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = assert_refused(main, [*argv, "--out", str(tmp_path / "run")],
                         tmp_path, match=f"{flag} {STEPS_WITHOUT_FORCE + 1} is over")
    assert "--force" in err


def test_train_names_the_generator_memory(tmp_path):
    err = assert_refused(main, ["train", "--preset", "demo", "--d-model", "4096", "--layers", "128", "--out",
                                str(tmp_path / "run")], tmp_path, match="GiB of memory (estimate)")
    assert "width 4096, 128 layers" in err


def test_eval_names_its_generator_passes(tmp_path):
    err = assert_refused(main, ["eval", "--ckpt", "ck", "--n", "10000", "--steps", "1000", "--out",
                                str(tmp_path / "e.json")], tmp_path, match="is 10000000 generator passes")
    assert "--force" in err


@pytest.mark.parametrize("argv, match", [
    (["--parts", "100000"], "at most 4096"),
    (["--parts", "512", "--tokens", "64"], "GiB of memory (estimate)"),
])
def test_bench_sizes_are_bounded(argv, match, tmp_path):
    assert_refused(main, ["bench", "--suite", "attention", *argv, "--out", str(tmp_path / "b")], tmp_path, match=match)


def test_over_long_text_is_refused(tmp_path):
    assert_refused(main, ["sample", "--ckpt", str(tmp_path / "ck"), "--text", "a chair " * 1000, "--out",
                          str(tmp_path / "s.glb")], tmp_path, match="over the 2000 limit")


def test_sampling_api_bounds_steps(tiny_pipeline):
    from common.errors import InputError
    from generation3d.sampling import MoCAPipeline

    pipe = MoCAPipeline.load(tiny_pipeline)
    with pytest.raises(InputError, match="sampling steps must be in 1..1000"):
        pipe.sample("chair", 4, steps=int(HUGE))


# ---------------------------------------------------------------- malformed dataset / folder / checkpoint
def _broken_dataset(src, dst, **change):
    with np.load(src / DATASET_FILE) as z:
        arrays = {k: z[k] for k in z.files}
    for k, v in change.items():
        if v is None:
            arrays.pop(k)
        else:
            arrays[k] = v(arrays[k])
    dst.mkdir()
    np.savez(dst / DATASET_FILE, **arrays)
    return dst


@pytest.mark.parametrize("change, match", [
    ({"part_names": None}, "no part_names array"),
    ({"category": lambda a: a.astype(np.float32)}, "array 'category' should be a 1-D integer array"),
    ({"category": lambda a: a + 100}, "array 'category' should be indices"),
    ({"offsets": lambda a: a[::-1].copy()}, "array 'offsets' should be increasing from 0"),
    ({"points": lambda a: np.where(a > 0, np.nan, a)}, "should be finite"),
    ({"boxes": lambda a: a[:, :3]}, "array 'boxes' should be float"),
    ({"split": lambda a: a + 5}, "array 'split' should be 0 (train)"),
])
def test_malformed_dataset_names_the_array(change, match, tiny_data, tmp_path):
    bad = _broken_dataset(tiny_data, tmp_path / "bad", **change)
    err = assert_refused(main, ["train-ae", "--data-dir", str(bad), "--out", str(tmp_path / "ae"), "--steps", "2"],
                         tmp_path, match=match)
    assert str(bad / DATASET_FILE) in err


def _obj(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")


@pytest.mark.parametrize("rows, match", [
    ("shape,category\n../../x.obj,chair\n", "row 1: shape '../../x.obj' should be a path inside the folder"),
    ("shape,category\n/etc/passwd,chair\n", "row 1: shape '/etc/passwd' should be a path inside"),
    ("shape,category\na.obj,chair\na.obj,table\n", "row 2: shape 'a.obj' is listed twice"),
    ("name,kind\na.obj,chair\n", "needs a header with the columns shape,category"),
    (b"shape,category\n\xff\xfe.obj,chair\n", "cannot read"),
])
def test_folder_category_csv_is_checked(rows, match, tmp_path):
    src = tmp_path / "src"
    _obj(src / "a.obj")
    (src / "categories.csv").write_bytes(rows if isinstance(rows, bytes) else rows.encode())
    err = assert_refused(main, ["build-data", "--source", str(src), "--out", str(tmp_path / "d")], tmp_path,
                         match=match)
    assert "categories.csv" in err


def test_folder_entry_through_a_link_outside_is_refused(tmp_path):
    src = tmp_path / "src"
    _obj(tmp_path / "outside" / "a.obj")
    src.mkdir()
    (src / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    (src / "categories.csv").write_text("shape,category\nlink/a.obj,chair\n")
    assert_refused(main, ["build-data", "--source", str(src), "--out", str(tmp_path / "d")], tmp_path,
                   match="leads outside")


def test_oversized_mesh_file_is_refused_before_parsing(tmp_path, monkeypatch):
    from generation3d import meshes

    _obj(tmp_path / "big.obj")
    monkeypatch.setattr(meshes, "MAX_MESH_BYTES", 16)
    assert_refused(main, ["load-mesh", str(tmp_path / "big.obj")], tmp_path, match="MiB limit")


@pytest.mark.parametrize("edit, match", [
    (lambda e: e["stats"].update(z_mean="abc"), "extra.stats.z_mean should be a list of 4 numbers"),
    (lambda e: e.update(stats=[1, 2]), "extra.stats should be an object"),
    (lambda e: e.update(categories=["chair", "spaceship"]), "not spaceship"),
    (lambda e: e.update(descriptions="a chair"), "extra.descriptions should be a list of strings"),
])
def test_checkpoint_extra_is_checked(edit, match, tiny_pipeline, tmp_path):
    ckpt = tmp_path / "ck"
    shutil.copytree(tiny_pipeline, ckpt)
    cfg = json.loads((ckpt / "generator" / "config.json").read_text())
    edit(cfg["extra"])
    (ckpt / "generator" / "config.json").write_text(json.dumps(cfg))
    assert_refused(main, ["sample", "--ckpt", str(ckpt), "--out", str(tmp_path / "s.glb"), "--parts", "4",
                          "--steps", "2", "--category", "table"], tmp_path, match=match)


# ---------------------------------------------------------------- interrupted runs
MOCA = ["-m", "generation3d.cli"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_train_ae_stops_on_signal(sig, tiny_data, tmp_path):
    err = assert_stops_on_signal([*MOCA, "train-ae", "--data-dir", str(tiny_data), "--out", "ae", "--steps", "90000",
                                  "--batch-size", "4", "--threads", "1"], tmp_path, sig,
                                 ready="training the autoencoder", within_s=20)
    assert ("interrupted" in err) == (sig == signal.SIGINT)
    assert not (tmp_path / "ae" / "config.json").exists()


def test_train_stops_on_sigint_during_fit(tiny_data, tiny_pipeline, tmp_path):
    """SIGINT inside Lightning's fit (which would turn it into exit 1) ends with 130 and the message."""
    err = assert_stops_on_signal([*MOCA, "train", "--data-dir", str(tiny_data), "--ae", str(tiny_pipeline / "ae"),
                                  "--out", "gen", "--steps", "90000", "--batch-size", "2", "--d-model", "32",
                                  "--layers", "1", "--max-parts", "40", "--threads", "1"], tmp_path, signal.SIGINT,
                                 ready="training the moca generator", within_s=20, env={"HF_HUB_OFFLINE": "1"})
    assert "interrupted" in err and not (tmp_path / "gen" / "generator").exists()


def test_build_data_stops_on_sigterm(tmp_path):
    assert_stops_on_signal([*MOCA, "build-data", "--out", "d", "--per-category", "10000", "--points", "64"], tmp_path,
                           signal.SIGTERM, ready="building the procedural dataset", within_s=20)
    assert not (tmp_path / "d" / DATASET_FILE).exists()


def test_pipeline_save_interrupted_keeps_ae_and_generator_together(tiny_pipeline, tmp_path, monkeypatch):
    """Ctrl-C while the generator is written: the save finishes both halves, then the interrupt is raised."""
    import os

    from generation3d.model import PartFlowTransformer
    from generation3d.sampling import MoCAPipeline

    ckpt = tmp_path / "ck"
    shutil.copytree(tiny_pipeline, ckpt)
    before = {d: json.loads((ckpt / d / "config.json").read_text())["weights_id"] for d in ("ae", "generator")}
    pipe = MoCAPipeline.load(ckpt)
    original = PartFlowTransformer.save_pretrained

    def save_with_ctrl_c(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PartFlowTransformer, "save_pretrained", save_with_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        pipe.save(ckpt)
    after = {d: json.loads((ckpt / d / "config.json").read_text())["weights_id"] for d in ("ae", "generator")}
    assert all(after[d] != before[d] for d in after)
    assert not [p for p in ckpt.rglob("*") if ".tmp" in p.name]
    MoCAPipeline.load(ckpt)


# ---------------------------------------------------------------- the hub tab
@pytest.fixture()
def tab(tiny_pipeline, monkeypatch):
    monkeypatch.setattr(demo, "_PIPELINES", demo.LoaderCache(demo.MAX_PIPELINES))
    monkeypatch.setenv("MOCA_RENDERER", "matplotlib")
    monkeypatch.setenv("MOCA_DEMO_CKPT", str(tiny_pipeline))
    return str(tiny_pipeline)


@pytest.mark.parametrize("ckpt, seed, steps, match", [
    (None, 1e30, 2, "seed must be a whole number from 0 to"),
    (None, float("nan"), 2, "seed must be a whole number"),
    (None, 0.5, 2, "seed must be a whole number"),
    (None, 0, 10**9, "sampling steps must be a whole number from 1 to 1000"),
    ("/tmp/\x00x", 0, 2, "could not be generated"),
])
def test_tab_errors_are_page_messages(ckpt, seed, steps, match, tab):
    out = demo.generate_for_page(ckpt or tab, "table", 4, seed, steps, "")
    assert out[:3] == (None, None, None) and out[3].startswith("**error:** ") and match in out[3], out[3]
    assert "Traceback" not in out[3] and "Error(" not in out[3]


def test_tab_serves_8_concurrent_requests(tab):
    seeds = list(range(8))
    sequential = {s: demo.generate_for_page(tab, "table", 4, s, 2, "") for s in seeds[:2]}
    results: dict[int, tuple] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(seeds))

    def request(s: int) -> None:
        try:
            start.wait()
            results[s] = demo.generate_for_page(tab, "table", 4, s, 2, "")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=request, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not errors and len(results) == len(seeds), errors
    for glb, png, download, status, rows in results.values():
        assert status.startswith("generated 4 parts"), status
        assert glb == download and len(rows) == 4
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert len({r[0] for r in results.values()}) == len(seeds)  # each request its own files
    for s, ref in sequential.items():  # the same seed gives the same shape under concurrency
        with open(ref[0], "rb") as a, open(results[s][0], "rb") as b:
            assert a.read() == b.read()
        assert ref[4] == results[s][4]
