"""Text conditioning: descriptions from parts, the cached MiniLM encoder, and its effect on sampling."""

import numpy as np
import pytest
import torch

from common.errors import InputError
from generation3d.cli import main
from generation3d.data import PartDataset
from generation3d.model import GenConfig, PartFlowTransformer
from generation3d.sampling import MoCAPipeline
from generation3d.shapes import make_shape
from generation3d.text import MiniLMEncoder, describe_shape, shape_descriptions

BOX = np.tile(np.array([[0, 0, 0, 0.5, 0.5, 0.5]], np.float32), (30, 1))


@pytest.mark.parametrize("category, names, expected", [
    ("chair", ["seat", "leg0", "leg1", "leg2", "leg3", "back_rail", "slat0", "slat1", "slat2", "arm_support+1",
               "arm+1", "arm_support-1", "arm-1"], "a chair with arms and a slatted back with three slats"),
    ("chair", ["seat", "leg0", "leg1", "leg2", "leg3", "back", "stretcher0", "stretcher1"],
     "a chair with a solid back and two stretchers"),
    ("table", ["top", "leg0", "leg1", "leg2"], "a three-legged round table"),
    ("table", ["top", "leg0", "leg1", "leg2", "leg3", "lower_shelf", "drawer0"],
     "a four-legged table with a lower shelf and one drawer"),
    ("table", ["top", "column", "base"], "a round pedestal table"),
    ("shelf", ["side_left", "side_right", "bottom", "top", "shelf0", "shelf1", "back", "divider0"],
     "a bookshelf with two shelves, a back panel and one divider"),
    ("lamp", ["base", "pole0", "joint0", "pole1", "shade", "bulb"],
     "a lamp with a jointed pole of two segments, a cone shade and a bulb"),
    ("scene", ["chair0/seat", "chair0/leg0", "table1/top", "chair2/seat", "lamp3/base"],
     "a room with two chairs, one lamp and one table"),
    ("chair", ["node_a", "node_b"], "a chair made of 2 parts"),  # user mesh with foreign names
])
def test_describe_shape_from_part_names(category, names, expected):
    assert describe_shape(category, names, BOX[: len(names)]) == expected


def test_shelf_aspect_words_come_from_the_boxes():
    names = ["side_left", "side_right", "bottom", "top", "shelf0"]
    tall = np.array([[-0.3, 0, 0, 0.05, 0.3, 2.0]] * 5, np.float32)  # 0.3 wide, 2.0 high
    wide = np.array([[0, 0, 0, 2.0, 0.3, 0.5]] * 5, np.float32)
    assert describe_shape("shelf", names, tall).startswith("a tall bookshelf")
    assert describe_shape("shelf", names, wide).startswith("a low wide bookshelf")


def test_procedural_shapes_get_matching_descriptions(tiny_data):
    rng = np.random.default_rng(0)
    for _ in range(6):
        s = make_shape("chair", rng, n_points=8)
        names = [p.name for p in s.parts]
        d = describe_shape("chair", names, s.boxes)
        assert ("arms" in d) == any(n.startswith("arm+") for n in names)
        assert ("slatted" in d) == ("back_rail" in names)
    ds = PartDataset.load(tiny_data)
    descs = shape_descriptions(ds)
    assert len(descs) == len(ds) and all(d.startswith("a ") for d in descs)


def test_encoder_embeds_caches_and_rejects_empty_text(tmp_path):
    cache = tmp_path / "text"
    enc = MiniLMEncoder(cache)
    texts = ["a chair with arms", "a chair with armrests", "a tall bookshelf with five shelves"]
    e = enc.encode(texts)
    assert e.shape == (3, 384) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2]  # paraphrase closer than another object
    again = MiniLMEncoder(cache)
    np.testing.assert_array_equal(again.encode(texts[::-1]), e[::-1])
    assert again._model is None  # served from the on-disk cache, the model was never loaded
    for bad in ["", "   "]:
        with pytest.raises(InputError, match="non-empty"):
            enc.encode([bad])
    for shard in (cache / MiniLMEncoder.model_tag).glob("shard-*.npz"):
        shard.write_bytes(b"not an npz")  # a corrupt cache is ignored, not fatal
    np.testing.assert_allclose(MiniLMEncoder(cache).encode(texts[:1]), e[:1], atol=1e-5)


def test_text_embedding_changes_the_velocity_and_null_is_the_default():
    torch.manual_seed(0)
    model = PartFlowTransformer(GenConfig(n_latents=2, d_latent=3, max_parts=6, d_model=16, n_heads=2, n_layers=1))
    for p in model.parameters():
        p.data.add_(0.05 * torch.randn_like(p))
    model.eval()
    args = (torch.randn(2, 4, 2, 3), torch.randn(2, 4, 6), torch.tensor([500.0, 500.0]), torch.tensor([0, 0]),
            torch.tensor([4, 4]))
    text = torch.nn.functional.normalize(torch.randn(2, 384), dim=1)
    none = model(*args)
    with_text = model(*args, text=text)
    other = model(*args, text=text.flip(0))
    dropped = model(*args, text=text, text_keep=torch.tensor([False, True]))
    assert not torch.allclose(none[0], with_text[0]) and not torch.allclose(with_text[0], other[0])
    torch.testing.assert_close(dropped[0][0], none[0][0], rtol=0, atol=0)  # dropped row == no text
    torch.testing.assert_close(dropped[0][1], with_text[0][1], rtol=0, atol=0)


def test_pipeline_text_changes_samples_and_empty_text_is_an_error(tiny_pipeline, tmp_path, capsys):
    pipe = MoCAPipeline.load(tiny_pipeline)
    base = pipe.sample("none", 5, seed=1, steps=2)[0]
    a = pipe.sample("none", 5, seed=1, steps=2, text="a chair with arms and a slatted back")[0]
    b = pipe.sample("none", 5, seed=1, steps=2, text="a tall bookshelf with five shelves")[0]
    assert a.text == "a chair with arms and a slatted back"
    # sampling is bitwise deterministic (test_models), so any difference comes from the text; after
    # 3 training steps the text's effect can be below allclose's tolerance, hence exact comparison
    assert not np.array_equal(a.boxes, base.boxes) and not np.array_equal(a.boxes, b.boxes)
    near, sim = pipe.nearest_description("a chair with arms")
    assert near in pipe.descriptions and 0 < sim <= 1 + 1e-6
    with pytest.raises(InputError, match="non-empty"):
        pipe.sample("chair", 5, text="  ")
    out = tmp_path / "t.glb"
    assert main(["sample", "--ckpt", str(tiny_pipeline), "--text", "", "--out", str(out)]) == 2
    assert "non-empty" in capsys.readouterr().err and not out.exists()
    assert main(["sample", "--ckpt", str(tiny_pipeline), "--category", "none", "--parts", "4", "--steps", "2",
                 "--text", "a red sports car", "--renderer", "matplotlib", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "nearest training description" in printed and "unlike every training description" in printed
    assert out.is_file()
