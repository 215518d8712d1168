import json

import pytest
import torch

from common.errors import DataError
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


def test_jsonl_progress_file_tolerates_only_a_torn_tail(tmp_path, capsys):
    from common.io import append_jsonl, read_jsonl_resumable

    path = tmp_path / "p.jsonl"
    assert read_jsonl_resumable(path) == []
    append_jsonl(path, {"a": 1})
    append_jsonl(path, {"a": float("nan")})
    assert read_jsonl_resumable(path) == [{"a": 1}, {"a": None}]
    with open(path, "a") as f:
        f.write('{"a": 3, "b"')  # torn by a kill
    assert read_jsonl_resumable(path) == [{"a": 1}, {"a": None}]
    assert "skipped the torn last line 3" in capsys.readouterr().err
    path.write_text('{"a": 1}\n{oops\n{"a": 2}\n')
    with pytest.raises(DataError, match="line 2 is not JSON"):
        read_jsonl_resumable(path)
    path.write_text('[1, 2]\n')
    with pytest.raises(DataError, match="line 1 is not a JSON object"):
        read_jsonl_resumable(path)
    path.write_bytes(b'{"a": "\xff"}\n')
    with pytest.raises(DataError, match="not UTF-8"):
        read_jsonl_resumable(path)
