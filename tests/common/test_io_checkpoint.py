import json

import pytest
import torch
from torch import nn

from common.checkpoint import load_checkpoint, load_into, save_checkpoint
from common.errors import CheckpointError
from common.io import atomic_write, read_json, write_csv, write_json


def test_atomic_write_keeps_old_file_on_error(tmp_path):
    p = tmp_path / "r.json"
    write_json(p, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_write(p) as f:
            f.write('{"a": 2')
            raise RuntimeError("crash mid-write")
    assert read_json(p) == {"a": 1}
    assert [x.name for x in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_write_json_nan_and_csv_union_of_columns(tmp_path):
    write_json(tmp_path / "x.json", {"v": float("nan"), "t": torch.tensor(2.5)})
    assert json.loads((tmp_path / "x.json").read_text()) == {"v": None, "t": 2.5}
    write_csv(tmp_path / "x.csv", [{"a": 1}, {"a": 2, "b": 3}])
    assert (tmp_path / "x.csv").read_text().splitlines() == ["a,b", "1,", "2,3"]


def test_checkpoint_round_trip_gives_identical_outputs(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    save_checkpoint(tmp_path / "ck", model.state_dict(), {"width": 8}, {"epoch": 3})
    state, config, extra = load_checkpoint(tmp_path / "ck")
    clone = nn.Sequential(nn.Linear(4, config["width"]), nn.ReLU(), nn.Linear(config["width"], 2))
    load_into(clone, state)
    x = torch.randn(5, 4)
    assert torch.equal(model(x), clone(x)) and extra == {"epoch": 3}


def test_corrupt_or_mismatched_checkpoints_raise(tmp_path):
    model = nn.Linear(3, 2)
    save_checkpoint(tmp_path / "ck", model.state_dict(), {})
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="does not match"):
        load_into(nn.Linear(4, 2), load_checkpoint(tmp_path / "ck")[0])
    (tmp_path / "ck" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="corrupt checkpoint weights"):
        load_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt checkpoint config"):
        load_checkpoint(tmp_path / "ck")
