"""A shop's catalogue: formats and bad rows, index build/resume/add/remove, product search."""

import csv
import json
import shutil

import numpy as np
import pytest
import torch

import retrieval.catalog_index as ci
from common.errors import DataError, InputError
from retrieval.catalog import read_catalog, read_triplets
from retrieval.catalog_index import CatalogIndex, add_to_index, build_catalog_index, remove_from_index
from retrieval.cli import main
from retrieval.registry import build_model, load_model, save_model


@pytest.fixture()
def cached_env(prefilled_cache, monkeypatch):
    monkeypatch.setenv("MOE_APPS_CACHE", str(prefilled_cache))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("cat_model")
    save_model(build_model("moa3cir", "XS", image_encoder="scratch"), path)
    return path


def _write_csv(path, rows, header=("id", "image", "description", "brand", "price")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture()
def shop(tiny_bench, tmp_path):
    """A catalogue CSV of 40 benchmark products (images below img/) and the same as a folder."""
    root, _ = tiny_bench
    descs = json.loads((root / "controlled" / "descriptions" / "desc.test.json").read_text())
    ids = sorted(descs)[:40]
    (tmp_path / "img").mkdir()
    rows = []
    for n, i in enumerate(ids):
        shutil.copy(root / "controlled" / "images" / f"{i}.png", tmp_path / "img" / f"{i}.png")
        rows.append([f"sku-{n}", f"img/{i}.png", descs[i], "acme" if n % 2 else "zenith", str(10 + n)])
    return tmp_path, rows, [descs[i] for i in ids]


def test_csv_catalogue_bad_rows_are_listed_not_fatal(shop, model_dir, cached_env, capsys):
    tmp, rows, _ = shop
    (tmp / "img" / "broken.png").write_text("not an image")
    bad = [
        ["sku-0", "img/other.png", "", "x", "1"],          # duplicate id (and a missing file)
        ["img/a.png", rows[1][1], "", "x", "1"],            # id that looks like a path
        ["sku-new", "img/missing.png", "", "x", "1"],       # image file not found
        ["", rows[2][1], "", "x", "1"],                     # empty id
        ["sku-noimg", "", "", "x", "1"],                    # no image path
        ["sku-broken", "img/broken.png", "", "x", "1"],     # unreadable image
    ]
    csv_path = _write_csv(tmp / "shop.csv", rows + bad)
    cat = read_catalog(csv_path)
    assert len(cat.items) == 41 and len(cat.bad) == 5
    assert cat.items[0].metadata == {"brand": "zenith", "price": "10"} and cat.items[0].path.endswith(".png")
    problems = " ".join(b.problem for b in cat.bad)
    for word in ("duplicate id", "looks like a path", "image file not found", "empty id", "no image path"):
        assert word in problems
    capsys.readouterr()
    assert main(["index", "--catalog", str(csv_path), "--model", str(model_dir), "--out", str(tmp / "ix"),
                 "--no-progress"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "40 items" in line and "6 bad rows" in line and "bad_rows.csv" in line
    with open(tmp / "ix" / "bad_rows.csv", encoding="utf-8") as f:
        listed = list(csv.DictReader(f))
    assert len(listed) == 6 and any("unreadable image" in r["problem"] and r["id"] == "sku-broken" for r in listed)
    assert not (tmp / "ix" / ".chunks").exists()
    # every row bad: fatal, one error line, the report still written
    all_bad = _write_csv(tmp / "bad.csv", bad[2:])
    assert main(["index", "--catalog", str(all_bad), "--model", str(model_dir), "--out", str(tmp / "ix2"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "no usable item" in err[0]


def test_catalogue_files_that_are_no_catalogue(tmp_path):
    (tmp_path / "a.csv").write_text("sku,picture\n1,a.png\n")
    with pytest.raises(DataError, match="no 'id' column"):
        read_catalog(tmp_path / "a.csv")
    (tmp_path / "b.csv").write_bytes(b"id,image\n\xff\xfe,\x80.png\n")
    with pytest.raises(DataError, match="not UTF-8"):
        read_catalog(tmp_path / "b.csv")
    with pytest.raises(InputError, match="does not exist"):
        read_catalog(tmp_path / "nope.csv")


def test_folder_catalogue_with_sidecar_text(shop):
    tmp, _, descs = shop
    (tmp / "img" / "sub").mkdir()
    shutil.copy(next((tmp / "img").glob("*.png")), tmp / "img" / "sub" / "x.png")
    first = sorted((tmp / "img").glob("*.png"))[0]
    first.with_suffix(".txt").write_text("Blue striped shirt.", encoding="utf-8")
    cat = read_catalog(tmp / "img")
    assert len(cat.items) == 41 and not cat.bad
    by_id = {it.id: it for it in cat.items}
    assert by_id[first.stem].description == "Blue striped shirt." and "sub__x" in by_id


def test_search_records_python_api_and_json(shop, model_dir, cached_env, capsys):
    tmp, rows, _ = shop
    csv_path = _write_csv(tmp / "shop.csv", rows)
    assert main(["index", "--catalog", str(csv_path), "--model", str(model_dir), "--out", str(tmp / "ix"),
                 "--no-progress"]) == 0
    idx = CatalogIndex.load(tmp / "ix")
    assert len(idx) == 40 and idx.vectors.shape[0] == 40
    # the stored vectors search like the faiss index
    prods = idx.search(idx.vectors[:2], 3)
    assert [p[0].id for p in prods] == ["sku-0", "sku-1"] and prods[0][0].metadata["brand"] == "zenith"
    assert prods[0][0].score >= prods[0][1].score
    capsys.readouterr()
    argv = ["search", "--model", str(model_dir), "--index", str(tmp / "ix"), "--image", str(tmp / rows[3][1]),
            "--text", "make it red", "--description", rows[3][2], "--k", "4"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["results"]) == 4 and set(out["results"][0]) == {"id", "score", "path", "title", "description",
                                                                    "metadata"}
    assert out["results"][0]["path"].endswith(".png") and len(out["routing"]) == 8
    assert main(argv) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[2] == out["results"][0]["id"] and "brand=" in text[0] and text[-1].startswith("routing:")


def test_add_and_remove_without_rebuilding(shop, model_dir, hash_encoder, monkeypatch):
    tmp, rows, _ = shop
    model = load_model(model_dir)[0]
    base, _ = build_catalog_index(read_catalog(_write_csv(tmp / "a.csv", rows[:30])), model, tmp / "ix",
                                  encoder=hash_encoder, progress=False)
    full, _ = build_catalog_index(read_catalog(_write_csv(tmp / "all.csv", rows)), model, tmp / "full",
                                  encoder=hash_encoder, progress=False)
    embedded = []
    real = ci.embed_gallery
    monkeypatch.setattr(ci, "embed_gallery", lambda m, f, *a, **k: embedded.append(len(f.images)) or real(m, f, *a, **k))
    new = _write_csv(tmp / "b.csv", rows[30:] + [rows[0]])  # sku-0 again: a bad row
    idx, bad = add_to_index(tmp / "ix", read_catalog(new, seen={it.id for it in base.items}), model,
                            encoder=hash_encoder, progress=False)
    assert embedded == [10] and len(idx) == 40 and [b.id for b in bad] == ["sku-0"]
    assert np.allclose(idx.vectors, full.vectors, atol=1e-5)
    assert [p[0].id for p in idx.search(full.vectors[35:37], 1)] == ["sku-35", "sku-36"]
    idx = remove_from_index(tmp / "ix", ["sku-35", "sku-3"])
    assert embedded == [10] and len(CatalogIndex.load(tmp / "ix")) == 38
    assert "sku-35" not in {p.id for p in idx.search(full.vectors[35:36], 5)[0]}
    with pytest.raises(InputError, match="'nope'.*nothing removed"):
        remove_from_index(tmp / "ix", ["sku-1", "nope"])
    assert len(CatalogIndex.load(tmp / "ix")) == 38


def test_resume_after_a_kill(shop, model_dir, hash_encoder, monkeypatch):
    tmp, rows, _ = shop
    model = load_model(model_dir)[0]
    cat = read_catalog(_write_csv(tmp / "a.csv", rows))
    real, calls = ci.embed_gallery, []

    def dies_on_third(m, f, *a, **k):
        calls.append(len(f.images))
        if len(calls) == 3:
            raise KeyboardInterrupt  # the process is killed mid-build
        return real(m, f, *a, **k)

    monkeypatch.setattr(ci, "embed_gallery", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        build_catalog_index(cat, model, tmp / "ix", batch_size=8, encoder=hash_encoder, progress=False)
    assert len(list((tmp / "ix" / ".chunks").glob("*.npz"))) == 2
    with pytest.raises(DataError, match="unfinished index; rerun"):
        CatalogIndex.load(tmp / "ix")
    calls.clear()
    monkeypatch.setattr(ci, "embed_gallery", lambda m, f, *a, **k: calls.append(len(f.images)) or real(m, f, *a, **k))
    idx, _ = build_catalog_index(cat, model, tmp / "ix", batch_size=8, encoder=hash_encoder, progress=False)
    assert calls == [8, 8, 8]  # only the three batches the kill left
    fresh, _ = build_catalog_index(cat, model, tmp / "fresh", batch_size=8, encoder=hash_encoder, progress=False)
    assert np.allclose(idx.vectors, fresh.vectors, atol=1e-6) and len(idx) == 40


def test_index_kind_ivfpq_from_cli_needs_enough_items(shop, model_dir, cached_env, capsys):
    tmp, rows, _ = shop
    csv_path = _write_csv(tmp / "shop.csv", rows)
    assert main(["index", "--catalog", str(csv_path), "--model", str(model_dir), "--out", str(tmp / "ix"),
                 "--kind", "ivfpq", "--no-progress"]) == 2
    assert "use --kind flat" in capsys.readouterr().err
    assert main(["index", "--out", str(tmp / "ix"), "--remove", "a"]) == 2  # nothing was built
    assert main(["index", "--root", str(tmp), "--catalog", str(csv_path), "--out", str(tmp / "o")]) == 2


def test_triplet_table_validation_names_file_row_and_problem(shop):
    tmp, rows, _ = shop
    cat = read_catalog(_write_csv(tmp / "shop.csv", rows))
    good = [["sku-0", "sku-1", "make it blue"], ["sku-2", "sku-3", "with stripes"]]
    split = read_triplets(_write_csv(tmp / "t.csv", good, header=("reference", "target", "text")), cat)
    assert len(split.triplets) == 2 and len(split.ids) == 40 and split.exclude_reference
    assert split.descriptions["sku-0"] == rows[0][2]
    bad = good + [["sku-0", "", "x"], ["sku-0", "sku-99", "x"], ["sku-4", "sku-4", "x"]]
    with pytest.raises(DataError) as e:
        read_triplets(_write_csv(tmp / "t2.csv", bad, header=("reference_id", "target_id", "request")), cat)
    msg = str(e.value)
    assert "t2.csv" in msg and "3 malformed rows" in msg
    assert "row 4: empty target" in msg and "row 5: target id 'sku-99' is not in the catalogue" in msg
    assert "row 6: reference and target are the same product" in msg
    with pytest.raises(DataError, match="no reference / reference_id column"):
        read_triplets(_write_csv(tmp / "t3.csv", good, header=("ref", "target", "text")), cat)


def test_train_from_a_triplet_table(shop, cached_env, capsys):
    tmp, rows, _ = shop
    catalog = _write_csv(tmp / "shop.csv", rows)
    trips = [[f"sku-{i}", f"sku-{(i * 7 + 3) % 40}", "make it blue with stripes"] for i in range(40)]
    table = _write_csv(tmp / "t.csv", trips, header=("reference", "target", "text"))
    out = tmp / "m"
    argv = ["train", "--triplets", str(table), "--catalog", str(catalog), "--out", str(out), "--image-encoder",
            "scratch", "--model-size", "XS", "--phase1-epochs", "1", "--phase2-epochs", "2", "--val-fraction", "0.2"]
    assert main(argv) == 0
    extra = json.loads((out / "config.json").read_text())
    assert (out / "model.safetensors").is_file() and "catalog" in json.dumps(extra)
    assert "validation" in capsys.readouterr().out.lower()
    bad = _write_csv(tmp / "bad.csv", [["sku-0", "ghost", "x"]], header=("reference", "target", "text"))
    assert main([*argv[:2], str(bad), *argv[3:6], str(tmp / "m2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.csv" in err[0] and "row 2" in err[0] and "'ghost'" in err[0]
    assert main(["train", "--triplets", str(table), "--out", str(tmp / "m3")]) == 2
