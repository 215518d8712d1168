"""The hard built benchmark (``build-data --preset hard``): layout, determinism, two annotators'
captions, photo jitter, and its wiring into ``moa3cir bench --benchmark hard``."""

import json
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from common.data_dir import load_fashion_mnist
from retrieval.baselines import raw_pixel_embeddings
from retrieval.captions import _CHATTER, annotator_captions, split_clauses
from retrieval.cli import main
from retrieval.data import load_synthetic
from retrieval.render import GROUPS, Attributes, PhotoJitter, render, render_photo
from retrieval.synth import BuildConfig, build_benchmark, item_renderer


@pytest.fixture(scope="module")
def hard_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("hard")
    build_benchmark(root, BuildConfig.hard_tiny(seed=0))
    return root


@pytest.fixture(scope="module")
def hard_cache(hard_root, tmp_path_factory):
    """An embedding cache with hash embeddings for every text of the hard benchmark (no MiniLM)."""
    from retrieval.captions import split_sentences
    from retrieval.text import MiniLMEncoder, text_key
    from tests.retrieval.conftest import HashEncoder

    texts = set()
    for variant in ("controlled", "confounded"):
        for f in (hard_root / variant / "descriptions").glob("*.json"):
            for d in json.loads(f.read_text()).values():
                texts.update(split_sentences(d))
        for f in (hard_root / variant / "captions").glob("*.json"):
            for c in json.loads(f.read_text()):
                texts.update(split_clauses(" and ".join(c["captions"])))
    cache = tmp_path_factory.mktemp("hard_cache")
    texts = sorted(texts)
    MiniLMEncoder(cache=cache / "retrieval")._write_shard([text_key(t) for t in texts], HashEncoder().encode(texts))
    return cache


def test_hard_tiny_layout_sizes_and_two_captions(hard_root):
    for variant in ("controlled", "confounded"):
        v = hard_root / variant
        meta = json.loads((v / "meta.json").read_text())
        assert meta["preset"] == "hard-tiny" and meta["image_size"] == 64 and meta["captions_per_triplet"] == 2
        some = sorted((v / "images").glob("*.png"))[:5]
        assert all(Image.open(p).size == (64, 64) for p in some)
        for split in ("train", "val", "test"):
            for cat in ("tops", "bottoms", "accessories"):
                caps = json.loads((v / "captions" / f"cap.{cat}.{split}.json").read_text())
                assert all(len(c["captions"]) == 2 and all(s.strip() for s in c["captions"]) for c in caps)
            s = load_synthetic(hard_root, split, variant)  # the loaders read it unchanged
            assert s.images.shape[1:] == (32, 32, 3) and len(s.triplets) > 0
            # the loader joins the two annotators' captions
            assert all(" and " in t.text for t in s.triplets)
        s = load_synthetic(hard_root, "train", variant)
        extra = 0
        for t in s.triplets:
            a, b = s.attributes[s.index[t.reference]], s.attributes[s.index[t.target]]
            differ = {g for g, x, y in zip(GROUPS, a, b, strict=True) if x != y}
            assert set(t.changed) <= differ | {"scale"}
            extra += bool(differ - set(t.changed) - {"scale"})
        assert (extra == 0) if variant == "controlled" else (extra > 0.3 * len(s.triplets))


def test_hard_build_is_deterministic_under_seed(tmp_path):
    cfg = replace(BuildConfig.hard_tiny(seed=5), garments={"train": 6, "val": 4, "test": 4},
                  triplets={"train": 8, "val": 4, "test": 4})
    build_benchmark(tmp_path / "a", cfg)
    build_benchmark(tmp_path / "b", cfg)
    build_benchmark(tmp_path / "c", replace(cfg, seed=6))
    files = ["controlled/captions/cap.tops.train.json", "confounded/descriptions/desc.test.json"]
    for f in files:
        assert (tmp_path / "a" / f).read_text() == (tmp_path / "b" / f).read_text()
    images = sorted(p.name for p in (tmp_path / "a" / "controlled" / "images").iterdir())
    assert images == sorted(p.name for p in (tmp_path / "b" / "controlled" / "images").iterdir())
    for name in images:
        pa, pb = (tmp_path / x / "controlled" / "images" / name for x in "ab")
        assert pa.read_bytes() == pb.read_bytes()
    assert (tmp_path / "a" / files[0]).read_text() != (tmp_path / "c" / files[0]).read_text()


def _red_mask(img: np.ndarray) -> np.ndarray:
    x = img.astype(np.float32) / 255
    return (x[..., 0] - x[..., 1]) > 0.3


def test_photo_jitter_moves_scales_and_recolours_the_garment():
    sil = load_fashion_mnist("test")[0][0]
    red = Attributes(0, 0, 0, -1, 0, 0)  # solid matte red: garment pixels are the red ones
    rng = np.random.default_rng(0)
    still = [render_photo(sil, red, rng, 64, PhotoJitter.none()) for _ in range(6)]
    moved = [render_photo(sil, red, rng, 64, PhotoJitter(backgrounds=0.0)) for _ in range(30)]

    def centroid_area(img):
        ys, xs = np.nonzero(_red_mask(img))
        return xs.mean(), ys.mean(), len(xs)

    s, m = np.array([centroid_area(i) for i in still]), np.array([centroid_area(i) for i in moved])
    assert s[:, :2].std(0).max() < 0.3 and s[:, 2].max() - s[:, 2].min() < 0.05 * s[:, 2].mean()
    assert m[:, :2].std(0).min() > 1.5  # position jitter (shift and crop), pixels at 64 px
    assert m[:, 2].max() / m[:, 2].min() > 1.4  # scale jitter (0.62..0.95 of the height: area x2.3)
    # pose: the garment's principal axis turns
    angles = []
    for img in moved:
        ys, xs = np.nonzero(_red_mask(img))
        cov = np.cov(np.stack([xs - xs.mean(), ys - ys.mean()]))
        angles.append(0.5 * np.arctan2(2 * cov[0, 1], cov[0, 0] - cov[1, 1]))
    assert np.ptp(angles) > np.deg2rad(10)
    # backdrops: with backgrounds=1 the corner colour varies; without, it is studio grey
    corners = [render_photo(sil, red, rng, 64, PhotoJitter(shift=0.0, backgrounds=1.0))[:4, :4].mean((0, 1))
               for _ in range(20)]
    plain = [render_photo(sil, red, rng, 64, PhotoJitter.none())[:4, :4].mean((0, 1)) for _ in range(5)]
    assert np.std(corners, 0).max() > 20 and np.std(plain, 0).max() < 10  # studio: a slight tint only


def test_built_hard_images_vary_where_small_ones_do_not(hard_root, tiny_bench):
    small_root, _ = tiny_bench
    for root, lo, hi in ((hard_root, 12, None), (small_root, None, 3)):
        paths = sorted((root / "controlled" / "images").glob("*.png"))[:60]
        corners = np.array([np.asarray(Image.open(p))[:3, :3].reshape(-1, 3).mean(0) for p in paths])
        spread = corners.std(0).max()
        assert (lo is None or spread > lo) and (hi is None or spread < hi)


def test_annotator_captions_split_the_change_between_two_annotators():
    ref, tgt = Attributes(0, 0, 1, 0, 0, 0), Attributes(2, 5, 1, 1, 1, 0)
    groups = ["colour", "scale", "finish"]
    rng = np.random.default_rng(0)
    partial = full = 0
    for _ in range(300):
        caps = annotator_captions(ref, tgt, groups, rng, chatter=0.3, typo=0.0)
        assert len(caps) == 2
        counts = [len([c for c in split_clauses(t) if c not in _CHATTER and not c.startswith("instead of")])
                  for t in caps]  # "is red instead of blue": one change in two clauses
        # each annotator describes at least one change; together they cover all, at most twice
        assert all(n >= 1 for n in counts) and len(groups) <= sum(counts) <= 2 * len(groups)
        partial += min(counts) < len(groups)
        full += max(counts) == len(groups)
    assert partial > 100 and full > 10
    with pytest.raises(ValueError):
        annotator_captions(ref, tgt, [], rng)


def test_item_renderer_matches_the_benchmark_look(hard_root, tiny_bench):
    small_root, _ = tiny_bench
    assert item_renderer(small_root / "controlled") is render
    draw = item_renderer(hard_root / "controlled")
    img = draw(load_fashion_mnist("test")[0][0], Attributes(0, 0, 0, -1, 0, 0), np.random.default_rng(0))
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8


def test_raw_pixel_embeddings_are_centred_cosines():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (4, 2, 2, 3), dtype=np.uint8)
    imgs[3] = imgs[0]
    e = raw_pixel_embeddings(imgs)
    x = imgs.reshape(4, -1) / 255.0
    x = x - x.mean(0)
    expected = (x @ x.T) / np.outer(np.linalg.norm(x, axis=1), np.linalg.norm(x, axis=1))
    np.testing.assert_allclose(e @ e.T, expected, atol=1e-5)
    assert abs(float(e[0] @ e[3]) - 1) < 1e-6


def test_bench_hard_wiring(hard_root, hard_cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MOE_APPS_CACHE", str(hard_cache))
    out = tmp_path / "bench"
    argv = ["bench", "--benchmark", "hard", "--root", str(hard_root), "--out", str(out), "--variants", "controlled",
            "--phase1-epochs", "0", "--phase2-epochs", "1", "--methods", "no-desc", "raw-pixel",
            "--image-encoders", "scratch"]
    assert main([*argv, "--json", str(tmp_path / "rows.json")]) == 0
    doc = json.loads((tmp_path / "rows.json").read_text())
    assert doc["config"]["benchmark"] == "hard"
    assert [(r["method"], r["image_encoder"]) for r in doc["rows"]] == [
        ("MoA3CIR w/o descriptions", "scratch"), ("raw-pixel cosine", "pixels")]
    assert all(0 <= r["R@1"] <= r["R@10"] <= r["R@50"] <= 100 for r in doc["rows"])
    # a root of the other benchmark is refused, nothing written
    assert main(["bench", "--benchmark", "small", "--root", str(hard_root), "--out", str(tmp_path / "b2")]) == 2
    assert "holds the 'hard-tiny' benchmark" in capsys.readouterr().err and not (tmp_path / "b2").exists()
