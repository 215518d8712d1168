"""The tiny blend fixture of the label experiments' tests."""

from __future__ import annotations

import json

import pytest

from olfaction import data as olf_data

# tiny blend fixture: 6 valid molecules, one invalid SMILES, one self-pair, one unlabelled pair
_PAIRS = [
    ("CCO", "CC(=O)O", "fruity;green", "train_derived"),
    ("CCO", "c1ccccc1", "fruity", "train_derived"),
    ("CC(=O)O", "CCCCO", "green;not_evaluated", "test"),
    ("CCCCO", "CCOC(C)=O", "", "test"),
    ("C1CC", "CCO", "fruity", "excluded"),  # invalid SMILES: dropped
    ("OCC", "CCO", "green", "excluded"),  # the same molecule twice: dropped
    ("CCOC(C)=O", "c1ccccc1", "floral;fruity", "train_derived"),
    ("CCCCO", "CC=O", "floral", "test"),
]


@pytest.fixture
def blend_dir(tmp_path, monkeypatch):
    root = tmp_path / "olfaction" / "blends"
    (root / "splits").mkdir(parents=True)
    lines = ["mol_a_smiles,mol_b_smiles,labels,labels_raw,split_authors_2023"]
    lines += [f"{a},{b},{lab},{lab},{s}" for a, b, lab, s in _PAIRS]
    (root / "blend_pairs.csv").write_text("\n".join(lines) + "\n")
    (root / "label_vocabulary.csv").write_text(
        "label,n_pairs,in_paper_eval_74,in_authors_failed_to_carve_27\n"
        "fruity,4,1,0\ngreen,2,1,0\nfloral,2,1,0\nnot_evaluated,1,0,1\n"
    )
    split = {"identifier": "a", "training": [0, 1, 4, 6], "testing": [2, 3, 7]}
    (root / "splits" / "authors_2023_v1.json").write_text(json.dumps(split))
    for name in list(olf_data.SHA256):  # the fixture is not the published file
        if name.startswith("blends/"):
            monkeypatch.delitem(olf_data.SHA256, name)
    return tmp_path
