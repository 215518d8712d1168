"""``generation3d.augment``: variants of training shapes in latent / box terms, drawn reproducibly,
and their use in ``train.ShapeBatches`` / ``fit(..., augment=True)``."""

import numpy as np
import pytest
import torch

from generation3d.augment import MIRROR_AXIS, ShapeAugmenter
from generation3d.data import PartDataset
from generation3d.losses import collate, encode_parts, latent_stats
from generation3d.sampling import load_autoencoder
from generation3d.train import ShapeBatches, fit


@pytest.fixture(scope="module")
def parts(tiny_data, tiny_pipeline):
    ds = PartDataset.load(tiny_data)
    ae = load_autoencoder(tiny_pipeline / "ae")
    ids = ds.shape_ids("train", max_parts=40)
    return ds, ae, ids, encode_parts(ae, ds), encode_parts(ae, ds, mirror=True)


def _bounds(boxes):
    return (boxes[:, :3] - boxes[:, 3:] / 2).min(0), (boxes[:, :3] + boxes[:, 3:] / 2).max(0)


def test_variants_are_normalised_shapes_of_known_latents(parts):
    ds, _, ids, lat, mir = parts
    aug = ShapeAugmenter(ds, ids, lat, mir)
    rng = np.random.default_rng(0)
    mirrored = swapped = scaled = 0
    for _ in range(5):
        for i in ids:
            i = int(i)
            a, b = ds.offsets[i], ds.offsets[i + 1]
            z, boxes = aug(i, rng)
            assert z.shape == lat[a:b].shape and boxes.shape == (b - a, 6) and boxes.dtype == ds.boxes.dtype
            lo, hi = _bounds(boxes.astype(np.float64))
            np.testing.assert_allclose((lo + hi) / 2, 0, atol=1e-5)  # centred, largest half-extent 1
            assert (hi - lo).max() / 2 == pytest.approx(1, abs=1e-5)
            # every latent is a part's own, its mirror's, or (swapped) one of another shape of its category
            same_cat = np.concatenate([np.zeros(0, np.int64)] + [np.arange(ds.offsets[j], ds.offsets[j + 1]) for j in ids
                                       if ds.category[j] == ds.category[i] and j != i])
            flipped = bool(torch.equal(z[0], mir[a])) if not torch.equal(mir[a], lat[a]) else None
            for p in range(b - a):
                own = torch.equal(z[p], lat[a + p]) or torch.equal(z[p], mir[a + p])
                other = any(torch.equal(z[p], src[q]) for src in (lat, mir) for q in same_cat)
                assert own or other
                swapped += not own
            mirrored += bool(flipped)
            ratio = (boxes[:, 3:] / np.maximum(ds.boxes[a:b, 3:], 1e-9))
            scaled += not np.allclose(ratio / ratio[0, 0], 1, atol=1e-3)  # anisotropic
    assert mirrored and swapped and scaled


def test_draws_repeat_under_a_seed(parts):
    ds, _, ids, lat, mir = parts
    aug = ShapeAugmenter(ds, ids, lat, mir)
    one = [aug(int(i), np.random.default_rng(3)) for i in ids]
    two = [aug(int(i), np.random.default_rng(3)) for i in ids]
    for (z1, b1), (z2, b2) in zip(one, two, strict=True):
        assert torch.equal(z1, z2) and np.array_equal(b1, b2)


def test_mirror_reflects_centres(parts):
    ds, _, ids, lat, mir = parts
    aug = ShapeAugmenter(ds, ids, lat, mir)
    i = int(ids[0])
    a, b = ds.offsets[i], ds.offsets[i + 1]
    for seed in range(40):  # some seed mirrors
        rng = np.random.default_rng(seed)
        if rng.random() < 0.5:
            z, boxes = aug(i, np.random.default_rng(seed))
            orig = ds.boxes[a:b]
            # up to the common scale and shift, x runs backwards
            order_x = np.argsort(orig[:, MIRROR_AXIS], kind="stable")
            xs = boxes[order_x, MIRROR_AXIS]
            assert np.all(np.diff(xs) <= 1e-6)
            return
    pytest.fail("no seed mirrored")


def test_batches_without_augmentation_are_unchanged_and_with_it_differ(parts):
    ds, _, ids, lat, mir = parts
    stats = latent_stats(ds, lat)
    plain = list(ShapeBatches(ds, ids, lat, stats, None, 4, 512, 3, seed=0))
    aug = list(ShapeBatches(ds, ids, lat, stats, None, 4, 512, 3, seed=0, augmenter=ShapeAugmenter(ds, ids, lat, mir)))
    for p, q in zip(plain, aug, strict=True):
        assert torch.equal(p["category"], q["category"]) and torch.equal(p["valid"], q["valid"])  # same shapes
        assert torch.equal(p["noise"]["s"], q["noise"]["s"])
    assert any(not torch.equal(p["box"], q["box"]) for p, q in zip(plain, aug, strict=True))
    # a resumed stream drops the first batches' draws, augmentation included
    late = list(ShapeBatches(ds, ids, lat, stats, None, 4, 512, 3, seed=0, start=2,
                             augmenter=ShapeAugmenter(ds, ids, lat, mir)))
    assert torch.equal(late[0]["box"], aug[2]["box"]) and torch.equal(late[0]["z"], aug[2]["z"])
    ids_b = [int(i) for i in ids[:2]]
    assert torch.equal(collate(ds, lat, ids_b, stats)["z"], collate(ds, lat, ids_b, stats, replaced={})["z"])


def test_fit_with_augmentation_trains_and_repeats(parts):
    from generation3d.model import GenConfig

    ds, ae, _, _, _ = parts
    cfg = GenConfig(n_latents=4, d_latent=4, max_parts=40, d_model=32, n_layers=1)
    runs = [fit(ds, ae, cfg, steps=3, batch_size=4, augment=True)[0] for _ in range(2)]
    plain = fit(ds, ae, cfg, steps=3, batch_size=4)[0]
    for a, b in zip(runs[0].state_dict().values(), runs[1].state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any(not torch.equal(a, b) for a, b in zip(runs[0].state_dict().values(), plain.state_dict().values(),
                                                         strict=True))


def test_cli_train_augment_is_recorded_and_resumes_only_alike(tiny_data, tiny_pipeline, tmp_path, capsys):
    from common.pretrained import checkpoint_info
    from generation3d.cli import main as moca_main

    out = tmp_path / "run"
    args = ["train", "--data-dir", str(tiny_data), "--ae", str(tiny_pipeline / "ae"), "--out", str(out), "--resume",
            "--steps", "2", "--checkpoint-every", "1", "--d-model", "32", "--layers", "1", "--max-parts", "40",
            "--threads", "1"]
    assert moca_main([*args, "--augment"]) == 0
    assert checkpoint_info(out / "generator").extra["augment"] is True
    capsys.readouterr()
    assert moca_main([a if a != "2" else "3" for a in args]) == 2  # continuing it without augmentation is refused
    err = capsys.readouterr().err
    assert err.startswith("error:") and "augment" in err and len(err.strip().splitlines()) == 1
