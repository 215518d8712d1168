"""ONNX export of a :class:`~olfaction.predictor.MixturePredictor`'s networks, for the torch-free
:class:`olfaction.inference.OnnxPredictor`.

``export_onnx(predictor, path)`` writes into the saved model folder ``path``:

- ``distance_net.onnx``: the distance MixScentNet (GINE molecule encoder, GATv2 mixture graph,
  attention readout, distance head) on the inputs :data:`olfaction.inference.DISTANCE_INPUTS`
  (+ ``mol_extra (U, 512)`` with MiniMol, ``dataset_onehot (P, n_datasets)`` when the head reads
  it); outputs ``distance (P,)`` and ``alpha (C,)``;
- ``label_net.onnx`` (with a label network): inputs :data:`olfaction.inference.LABEL_INPUTS`,
  output ``probability (M, L)``;
- ``onnx.json``: the files, the opset and the ``weights_id`` of ``config.json`` (an export of
  another save is never used).

TorchScript-based exporter (``dynamo=False``), opset 18 (PyG's scatter reductions become
``ScatterElements`` with a reduction); every size (atoms, bonds, molecules, components, mixtures,
pairs) is a dynamic axis. Each export is run in onnxruntime on :data:`CHECK_MIXTURES` (sizes
other than the traced example's) and compared with torch; an export that fails or differs by
more than :data:`TOLERANCE` is not written (a warning on stderr; prediction then takes the torch
path).
"""

from __future__ import annotations

import copy
import io
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from common.io import atomic_write

from .data import DATASETS, dataset_one_hot
from .inference import (
    DISTANCE_FILE,
    DISTANCE_INPUTS,
    LABEL_FILE,
    LABEL_INPUTS,
    MANIFEST,
    label_inputs,
    mixture_inputs,
    onnx_session,
)
from .model import MixScentNet, graph_view

OPSET = 18
TOLERANCE = 1e-5
# the traced example, then mixtures of other sizes (1 to 6 components, a one-atom molecule, rings,
# charges) on which each export is checked against torch
TRACE_MIXTURES = [("CCO", "CC(=O)O"), ("c1ccccc1",), ("CC(C)=O",), ("CCO", "CCCO", "CC(=O)OC")]
CHECK_MIXTURES = [
    ("CC1=CCC(CC1)C(=C)C", "CC(C)=CCCC(C)=CC=O", "CC(C)=CCCC(C)(O)C=C"),
    ("COc1cc(C=O)ccc1O",),
    ("C", "O=C([O-])CCC(=O)O", "CCOC(C)=O", "c1ccc2ccccc2c1", "CC(C)CC(C)(C)O", "CCS"),
    ("CC1=CCC(CC1)C(=C)C",),
    ("CCCCCCCCCC=O", "N#Cc1ccccc1"),
]


class DistanceGraph(nn.Module):
    """ONNX view of an encoder-backed :class:`MixScentNet`: ``forward(*inputs)`` in the order of
    :attr:`names` -> ``(distance (P,), alpha (C,))`` for the pairs ``(pair_a[p], pair_b[p])`` of
    the ``M`` mixtures (:func:`olfaction.inference.mixture_inputs`)."""

    def __init__(self, net: MixScentNet, minimol: bool):
        super().__init__()
        self.net = net
        self.names = list(DISTANCE_INPUTS) + (["mol_extra"] if minimol else []) + \
            (["dataset_onehot"] if net.cfg.n_datasets else [])

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = dict(zip(self.names, inputs, strict=True))
        z, alpha = self.net.embed(graph_view(t), t["comp"], t["comp_batch"], t["mix_ids"].shape[0])
        dist = self.net.distance_from_embeddings(z[t["pair_a"]], z[t["pair_b"]], t.get("dataset_onehot"))
        return dist, alpha


class LabelGraph(nn.Module):
    """ONNX view of a label :class:`MixScentNet` (molecule vectors in): ``forward(mol_x (U, d),
    comp (C,), comp_batch (C,), mix_ids (M,))`` -> label probabilities ``(M, L)``."""

    names = list(LABEL_INPUTS)

    def __init__(self, net: MixScentNet):
        super().__init__()
        self.net = net

    def forward(self, mol_x, comp, comp_batch, mix_ids) -> torch.Tensor:
        return torch.sigmoid(self.net.label_logits(mol_x, comp, comp_batch, mix_ids.shape[0]))


_AXES = {"atom_x": {0: "atoms"}, "edge_index": {1: "edges"}, "edge_attr": {0: "edges"}, "atom_mol": {0: "atoms"},
         "mol_ids": {0: "mols"}, "mol_extra": {0: "mols"}, "mol_x": {0: "mols"}, "comp": {0: "slots"},
         "comp_batch": {0: "slots"}, "mix_ids": {0: "mixtures"}, "pair_a": {0: "pairs"}, "pair_b": {0: "pairs"},
         "dataset_onehot": {0: "pairs"}, "distance": {0: "pairs"}, "alpha": {0: "slots"},
         "probability": {0: "mixtures"}}


def _distance_feeds(mixtures, minimol_dim: int, seed: int) -> dict[str, np.ndarray]:
    """Inputs of :class:`DistanceGraph` for ``mixtures`` paired first-half with second-half, with
    deterministic random MiniMol rows (the export is checked on any input, not on real ones)."""
    rng = np.random.default_rng(seed)
    extra = (lambda mols: rng.normal(size=(len(mols), minimol_dim)).astype(np.float32)) if minimol_dim else None
    _, feeds = mixture_inputs(mixtures, extra)
    n = len(mixtures) // 2
    feeds["pair_a"], feeds["pair_b"] = np.arange(n, dtype=np.int64), np.arange(n, 2 * n, dtype=np.int64)
    feeds["dataset_onehot"] = dataset_one_hot([DATASETS[i % len(DATASETS)] for i in range(n)])
    return feeds


def _export(module: nn.Module, feeds: dict[str, np.ndarray], outputs: list[str]) -> bytes:
    args = tuple(torch.from_numpy(feeds[k]) for k in module.names)
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
        torch.onnx.export(module, args, buffer, dynamo=False, opset_version=OPSET, input_names=module.names,
                          output_names=outputs, dynamic_axes={k: _AXES[k] for k in [*module.names, *outputs]})
    return buffer.getvalue()


def max_deviation(blob: bytes, module: nn.Module, feeds: dict[str, np.ndarray], outputs: list[str]) -> float:
    """Largest absolute difference between onnxruntime on the exported ``blob`` and torch's
    ``module`` over all ``outputs`` for the inputs ``feeds``."""
    got = onnx_session(blob).run(outputs, {k: feeds[k] for k in module.names})
    with torch.no_grad():
        want = module(*(torch.from_numpy(feeds[k]) for k in module.names))
    want = want if isinstance(want, tuple) else (want,)
    return max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want, strict=True))


def export_onnx(predictor, path: str | Path) -> dict | None:
    """Export ``predictor``'s networks into its saved folder ``path`` (module docstring); returns
    the manifest written, or None (a warning on stderr) when an export fails its check."""
    path = Path(path)
    (path / MANIFEST).unlink(missing_ok=True)  # an older save's export must not outlive it
    weights_id = json.loads((path / "config.json").read_text(encoding="utf-8"))["weights_id"]
    minimol_dim = 0 if predictor.minimol_scale is None else len(predictor.minimol_scale[0])
    # the export traces and checks CPU copies, wherever the predictor's networks are
    distance_net = copy.deepcopy(predictor.distance_net).cpu()
    parts = [("distance", DISTANCE_FILE, DistanceGraph(distance_net, bool(minimol_dim)),
              ["distance", "alpha"],
              lambda mixes, seed: _distance_feeds(mixes, minimol_dim, seed))]
    if predictor.label_net is not None:
        parts.append(("labels", LABEL_FILE, LabelGraph(copy.deepcopy(predictor.label_net).cpu()), ["probability"],
                      lambda mixes, seed: label_inputs(mixes, predictor.labels_cfg.features)))
    files = {}
    for name, file, module, outputs, feeds in parts:
        module.eval()
        try:
            blob = _export(module, feeds(TRACE_MIXTURES, 0), outputs)
            worst = max(max_deviation(blob, module, feeds(mixes, seed), outputs)
                        for seed, mixes in enumerate((CHECK_MIXTURES, CHECK_MIXTURES[1:], TRACE_MIXTURES), start=1))
        except Exception as exc:  # exporter and onnxruntime errors have many types; the torch path still works
            print(f"warning: ONNX export of the {name} network failed ({type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}); `mixscent predict` will use torch",
                  file=sys.stderr)
            return None
        if not worst <= TOLERANCE:
            print(f"warning: ONNX export of the {name} network differs from torch by {worst:.2e}; not written, "
                  "`mixscent predict` will use torch", file=sys.stderr)
            return None
        with atomic_write(path / file, "wb") as fh:
            fh.write(blob)
        files[name] = file
    manifest = {"weights_id": weights_id, "opset": OPSET, "torch": torch.__version__, "files": files}
    with atomic_write(path / MANIFEST, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
    return manifest
