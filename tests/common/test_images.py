"""``common.images``: every kind of image file a user may hand an app becomes 8-bit RGB / L by the
documented rules, or one ``ImageError`` naming the file. Expected pixels are computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from common.errors import InputError
from common.images import ImageError, read_image, read_image_array


def test_16_bit_png_is_scaled_not_clipped(tmp_path):
    values = np.array([[0, 257, 32896, 65535]], dtype=np.uint16)
    Image.fromarray(values).save(tmp_path / "g16.png")
    arr = read_image_array(tmp_path / "g16.png", mode="L")
    assert arr.dtype == np.uint8 and arr.tolist() == [[0, 1, 128, 255]]  # v * 255 / 65535


def test_16_bit_tiff_and_32_bit_integer_tiff(tmp_path):
    values = np.array([[0, 65535], [13107, 26214]], dtype=np.uint16)
    Image.fromarray(values).save(tmp_path / "g16.tif")
    assert read_image_array(tmp_path / "g16.tif", mode="L").tolist() == [[0, 255], [51, 102]]
    Image.fromarray(values.astype(np.int32)).save(tmp_path / "i32.tif")
    assert read_image_array(tmp_path / "i32.tif", mode="L").tolist() == [[0, 255], [51, 102]]
    wide = np.array([[-10, 0], [90, 500]], dtype=np.int32)  # not 16-bit data: min-max, (v + 10) / 2
    Image.fromarray(wide).save(tmp_path / "wide.tif")
    assert read_image_array(tmp_path / "wide.tif", mode="L").tolist() == [[0, 5], [50, 255]]


def test_float_images(tmp_path):
    unit = np.array([[0.0, 0.5], [0.25, 1.0]], dtype=np.float32)
    Image.fromarray(unit).save(tmp_path / "unit.tif")
    assert read_image_array(tmp_path / "unit.tif", mode="L").tolist() == [[0, 128], [64, 255]]
    other = np.array([[10.0, 20.0], [30.0, 50.0]], dtype=np.float32)
    Image.fromarray(other).save(tmp_path / "other.tif")
    assert read_image_array(tmp_path / "other.tif", mode="L").tolist() == [[0, 64], [128, 255]]
    bad = np.array([[0.0, np.nan]], dtype=np.float32)
    Image.fromarray(bad).save(tmp_path / "nan.tif")
    with pytest.raises(ImageError, match="NaN"):
        read_image(tmp_path / "nan.tif")


def test_transparency_is_composited_on_white(tmp_path):
    rgba = np.zeros((1, 3, 4), dtype=np.uint8)
    rgba[0, 0] = (200, 0, 0, 255)  # opaque red
    rgba[0, 1] = (0, 0, 0, 0)      # transparent -> white
    rgba[0, 2] = (0, 0, 0, 128)    # half black over white
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    arr = read_image_array(tmp_path / "a.png")
    assert arr[0, 0].tolist() == [200, 0, 0] and arr[0, 1].tolist() == [255, 255, 255]
    assert arr[0, 2].tolist() == [127, 127, 127]  # 255 * (1 - 128/255)
    la = Image.fromarray(np.array([[[0, 0], [50, 255]]], dtype=np.uint8), "LA")
    la.save(tmp_path / "la.png")
    assert read_image_array(tmp_path / "la.png", mode="L").tolist() == [[255, 50]]


def test_palette_cmyk_and_bilevel(tmp_path):
    p = Image.new("P", (2, 1))
    p.putpalette([0, 0, 255, 0, 255, 0] + [0] * 762)
    p.putdata([0, 1])
    p.save(tmp_path / "p.png")
    assert read_image_array(tmp_path / "p.png").tolist() == [[[0, 0, 255], [0, 255, 0]]]
    Image.new("CMYK", (2, 2), (0, 255, 255, 0)).save(tmp_path / "c.tif")  # CMYK red
    assert read_image_array(tmp_path / "c.tif")[0, 0].tolist() == [255, 0, 0]
    Image.new("1", (2, 2), 1).save(tmp_path / "b.png")
    assert read_image_array(tmp_path / "b.png", mode="L").tolist() == [[255, 255], [255, 255]]


def test_rgb_to_gray_and_gray_to_rgb(tmp_path):
    Image.new("RGB", (1, 1), (255, 0, 0)).save(tmp_path / "r.png")
    assert read_image_array(tmp_path / "r.png", mode="L").tolist() == [[76]]  # 0.299 * 255
    Image.new("L", (1, 1), 9).save(tmp_path / "g.png")
    assert read_image_array(tmp_path / "g.png").tolist() == [[[9, 9, 9]]]
    assert read_image_array((tmp_path / "g.png").read_bytes(), mode="L").tolist() == [[9]]


def test_exif_orientation_is_applied(tmp_path):
    img = Image.new("L", (3, 1), 0)
    img.putpixel((0, 0), 255)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    img.save(tmp_path / "o.jpg", exif=exif, quality=100)
    arr = read_image_array(tmp_path / "o.jpg", mode="L")
    assert arr.shape == (3, 1) and arr[0, 0] > 200 and arr[2, 0] < 50


def test_bad_files_are_one_line_errors(tmp_path):
    with pytest.raises(ImageError, match="no such image file"):
        read_image(tmp_path / "missing.png")
    (tmp_path / "text.png").write_text("not an image")
    with pytest.raises(ImageError, match="not an image"):
        read_image(tmp_path / "text.png")
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "t.png")
    data = (tmp_path / "t.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match="truncated|unreadable") as info:
        read_image(tmp_path / "cut.png")
    assert "\n" not in str(info.value) and "cut.png" in str(info.value)
    assert issubclass(ImageError, InputError)


def test_decompression_bomb_is_refused_before_decoding(tmp_path):
    Image.new("1", (4000, 3000)).save(tmp_path / "big.png")  # tiny file, 12 megapixels
    with pytest.raises(ImageError, match="12,000,000 pixels, over the limit of 1,000,000"):
        read_image(tmp_path / "big.png", max_pixels=1_000_000)
    assert read_image(tmp_path / "big.png", mode="L").size == (4000, 3000)  # under the default limit


def test_animated_file_gives_its_first_frame(tmp_path):
    frames = [Image.new("L", (2, 2), v) for v in (10, 200)]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    assert read_image_array(tmp_path / "a.gif", mode="L").tolist() == [[10, 10], [10, 10]]
