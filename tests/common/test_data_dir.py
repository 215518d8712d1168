import gzip

import numpy as np
import pytest

from common.data_dir import load_fashion_mnist, require_file, resolve_data_dir
from common.errors import DataError
from common.io import sha256_file


def test_resolution_order(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    monkeypatch.setenv("MOE_APPS_DATA", str(b))
    assert resolve_data_dir(a) == a
    assert resolve_data_dir() == b
    monkeypatch.setenv("MOE_APPS_DATA", str(tmp_path / "missing"))
    with pytest.raises(DataError, match="MOE_APPS_DATA"):
        resolve_data_dir()
    with pytest.raises(DataError, match="--data-dir"):
        resolve_data_dir(tmp_path / "nope")


def test_require_file_checks_presence_and_checksum(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("a,b\n1,2\n")
    good = sha256_file(f)
    assert require_file(tmp_path, "x.csv", good) == f
    with pytest.raises(DataError, match="missing data file y.csv"):
        require_file(tmp_path, "y.csv")
    f.write_text("a,b\n1,3\n")
    with pytest.raises(DataError, match="checksum mismatch"):
        require_file(tmp_path, "x.csv", good)


def _idx(path, arr):
    header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def test_fashion_mnist_reader_on_a_tiny_idx_folder(tmp_path):
    imgs = np.arange(3 * 28 * 28).reshape(3, 28, 28) % 256
    _idx(tmp_path / "t10k-images-idx3-ubyte.gz", imgs)
    _idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.array([9, 0, 3]))
    x, y = load_fashion_mnist("test", folder=tmp_path)
    assert x.shape == (3, 28, 28) and np.array_equal(x, imgs) and y.tolist() == [9, 0, 3]
    with pytest.raises(DataError, match="missing Fashion-MNIST file train-images"):
        load_fashion_mnist("train", folder=tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x05ab"))
    with pytest.raises(DataError, match="truncated"):
        load_fashion_mnist("test", folder=tmp_path)
