"""MixScentNet models: molecule GNN encoder, mixture-as-graph GATv2 encoder with attention
readout, symmetric distance head and multi-label odour head.

Shapes: a batch holds ``U`` unique molecules (a PyG ``Batch`` of atom graphs) and ``M``
mixtures given as a flat index vector ``comp (C,)`` into the ``U`` molecules with
``comp_batch (C,)`` naming each entry's mixture (0..M-1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_geometric.data import Batch
from torch_geometric.nn import GATConv, GATv2Conv, GINEConv, global_mean_pool
from torch_geometric.utils import scatter
from torch_geometric.utils import softmax as segment_softmax

from common.pretrained import PretrainedMixin, register_model, register_to_config
from moe import MoE, TopKRouter

from .features import ATOM_DIM, BOND_DIM, mol_graph

TINY_SMILES = ("CCO", "c1ccccc1O", "CC(=O)OC")  # molecules of the registry's tiny examples


def segment_max(x: torch.Tensor, index: torch.Tensor | None, size: int | None = None) -> torch.Tensor:
    """Max over the rows of ``x (N, F)`` in each of the ``size`` segments named by ``index (N,)``
    -> ``(size, F)`` (every segment non-empty; ``index`` None: one segment). Equal to PyG's
    ``global_max_pool`` but exportable to ONNX: a ``-inf``-initialised ``scatter_reduce(amax)``
    (PyG's ONNX branch of scatter-max starts from zeros, so an all-negative segment would come out 0)."""
    if index is None:
        return x.max(dim=0, keepdim=True).values
    size = int(index.max()) + 1 if size is None else size
    out = x.new_full((size, x.shape[1]), float("-inf"))
    return out.scatter_reduce(0, index[:, None].expand_as(x), x, reduce="amax", include_self=True)


def graph_view(tensors: dict[str, torch.Tensor]) -> SimpleNamespace:
    """The PyG-batch view :meth:`MixScentNet.embed` reads (``x``, ``edge_index``, ``edge_attr``,
    ``batch``, ``num_graphs``, optional ``mol_extra``) of the tensors of
    :func:`olfaction.inference.mixture_inputs` (``num_graphs`` from ``mol_ids``' length, so it
    stays a traced size in the ONNX export). The torch predictor and the ONNX export both read it."""
    graph = SimpleNamespace(x=tensors["atom_x"], edge_index=tensors["edge_index"], edge_attr=tensors["edge_attr"],
                            batch=tensors["atom_mol"], num_graphs=tensors["mol_ids"].shape[0])
    if "mol_extra" in tensors:
        graph.mol_extra = tensors["mol_extra"]
    return graph


def _tiny_graph():
    """PyG batch of :data:`TINY_SMILES` (the registry's example input)."""
    return Batch.from_data_list([mol_graph(s) for s in TINY_SMILES])


@dataclass
class MolEncoderConfig:
    hidden: int = 128
    layers: int = 3
    emb_dim: int = 128
    dropout: float = 0.0


@register_model("mol_encoder")
class MolEncoder(PretrainedMixin, nn.Module):
    """GINE message passing with bond features (Hu et al. 2020):
    ``h_i' = MLP((1 + eps) h_i + sum_j ReLU(h_j + W_e e_ij))``, residual, then
    ``[mean_pool ; max_pool] -> Linear -> emb``.

    Input: PyG batch with ``x (n_atoms, ATOM_DIM)``, ``edge_index (2, E)``,
    ``edge_attr (E, BOND_DIM)``, ``batch (n_atoms,)`` (and ``num_graphs``, the number of molecules,
    where the batch has it). Output: ``(n_mols, emb_dim)``."""

    @register_to_config
    def __init__(self, cfg: MolEncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Linear(ATOM_DIM, cfg.hidden)
        self.convs = nn.ModuleList(
            GINEConv(
                nn.Sequential(
                    nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.hidden)
                ),
                edge_dim=BOND_DIM,
            )
            for _ in range(cfg.layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.hidden) for _ in range(cfg.layers))
        self.out = nn.Sequential(
            nn.Linear(2 * cfg.hidden, cfg.emb_dim), nn.ReLU(), nn.Linear(cfg.emb_dim, cfg.emb_dim)
        )

    def forward(self, graph) -> torch.Tensor:
        h = self.inp(graph.x)
        for conv, norm in zip(self.convs, self.norms, strict=False):
            h = h + F.dropout(
                F.relu(norm(conv(h, graph.edge_index, graph.edge_attr))), self.cfg.dropout, self.training
            )
        size = getattr(graph, "num_graphs", None)  # a traced size when exported to ONNX
        pooled = torch.cat([global_mean_pool(h, graph.batch, size), segment_max(h, graph.batch, size)], dim=-1)
        return self.out(pooled)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(MolEncoderConfig(hidden=8, layers=2, emb_dim=8)), (_tiny_graph(),)


@register_model("descriptor_pretrainer")
class DescriptorPretrainer(PretrainedMixin, nn.Module):
    """Self-supervised pretraining model: ``MolEncoder`` + linear head predicting the cleaned
    Mordred vector ``(n_mols, n_desc)``."""

    @register_to_config
    def __init__(self, cfg: MolEncoderConfig, n_desc: int):
        super().__init__()
        self.encoder = MolEncoder(cfg)
        self.head = nn.Linear(cfg.emb_dim, n_desc)

    def forward(self, graph) -> torch.Tensor:
        return self.head(self.encoder(graph))

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(MolEncoderConfig(hidden=8, layers=1, emb_dim=8), n_desc=5), (_tiny_graph(),)


def fully_connected_edges(comp_batch: torch.Tensor) -> torch.Tensor:
    """All ordered pairs ``(i, j), i != j`` of component slots in the same mixture:
    ``comp_batch (C,)`` -> ``edge_index (2, E)``. GATv2Conv adds the self loops."""
    slot = torch.arange(comp_batch.shape[0], device=comp_batch.device)
    same = (comp_batch[:, None] == comp_batch[None, :]) & (slot[:, None] != slot[None, :])  # no in-place op: ONNX-traceable
    return same.nonzero().t().contiguous()


@dataclass
class MixScentConfig:
    """``in_dim``: molecule feature size fed to the mixture level; ``conv``: ``gatv2`` | ``gat``
    | ``none`` (no mixture graph); ``readout``: ``attention`` | ``mean``; ``desc_dim`` > 0: the
    distance head also reads the symmetric pair features of mixture-mean molecule descriptors
    (``desc (U, desc_dim)``, e.g. the RF baseline's standardised RDKit + Morgan vectors)."""

    in_dim: int = 128
    hidden: int = 64
    heads: int = 4
    mix_layers: int = 1
    conv: str = "gatv2"
    readout: str = "attention"
    dropout: float = 0.1
    n_labels: int = 0
    label_experts: int = 0  # > 0: label head is a routed mixture of expert MLPs (MoELabelHead)
    label_top_k: int = 2
    n_datasets: int = 0
    desc_dim: int = 0
    set_dim: int = 0  # > 0: the distance head also reads K set-level pair features (set_features.py)
    mol_encoder: dict | None = None  # MolEncoderConfig fields when the GNN is part of the model
    extra: dict = field(default_factory=dict)


@dataclass
class DistanceTrainConfig:
    """Training of the distance network (:func:`olfaction.train.fit`): at most ``epochs``,
    early stopping after ``patience`` rounds on the validation criterion ``select`` (``"rmse"``
    lower / ``"pearson"`` higher). Here, not in ``train.py``, so loading a model needs no
    Lightning."""

    epochs: int = 150
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 32
    patience: int = 12
    seed: int = 0
    select: str = "rmse"


class MixtureEncoder(nn.Module):
    """Mixture-as-graph encoder. Nodes are component molecules ``x (C, in_dim)``; edges connect
    every pair of components of the same mixture; ``mix_layers`` of ``GATv2Conv`` (Brody et al.
    2022, ``a^T LeakyReLU(W [h_i ; h_j])``) with residuals; then attention readout
    ``z_m = sum_{i in m} alpha_i V h_i``, ``alpha = softmax_{i in m}(w^T tanh(U h_i))``.

    Permutation invariant in the components and defined for any number of them.
    Returns ``z (M, hidden)`` and ``alpha (C,)`` (per-component readout weights, summing to 1 per
    mixture)."""

    def __init__(self, cfg: MixScentConfig):
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Sequential(nn.Linear(cfg.in_dim, cfg.hidden), nn.ReLU())
        conv_cls = {"gatv2": GATv2Conv, "gat": GATConv}.get(cfg.conv)
        if cfg.conv not in ("gatv2", "gat", "none"):
            raise ValueError(f"unknown mixture conv {cfg.conv!r}")
        if cfg.readout not in ("attention", "mean"):
            raise ValueError(f"unknown readout {cfg.readout!r}")
        self.convs = nn.ModuleList(
            conv_cls(cfg.hidden, cfg.hidden // cfg.heads, heads=cfg.heads, add_self_loops=True)
            for _ in range(cfg.mix_layers if conv_cls else 0)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.hidden) for _ in self.convs)
        self.gate = nn.Sequential(nn.Linear(cfg.hidden, cfg.hidden), nn.Tanh(), nn.Linear(cfg.hidden, 1))
        self.value = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(
        self, x: torch.Tensor, comp_batch: torch.Tensor, n_mix: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.dropout(self.inp(x), self.cfg.dropout, self.training)
        if len(self.convs):
            edges = fully_connected_edges(comp_batch)
            for conv, norm in zip(self.convs, self.norms, strict=False):
                h = norm(h + F.elu(conv(h, edges)))
        if self.cfg.readout == "attention":
            alpha = segment_softmax(self.gate(h).squeeze(-1), comp_batch, num_nodes=h.shape[0], dim=0)
        else:
            counts = torch.bincount(comp_batch, minlength=n_mix).clamp(min=1).to(h.dtype)
            alpha = 1.0 / counts[comp_batch]
        # scatter-sum, not index_add: ONNX exports index_add as a scatter that drops repeated indices
        z = scatter(alpha[:, None] * self.value(h), comp_batch, 0, n_mix, reduce="sum")
        return z, alpha


class MoELabelHead(nn.Module):
    """Multi-label head with routed experts (``moe.TopKRouter`` + ``moe.MoE``): each mixture
    embedding ``z (M, h)`` goes to ``k`` of ``E`` expert MLPs ``h -> h -> L`` and
    ``logits = W z + sum_{e in topk} w_e(z) expert_e(z)``. The shared linear term keeps the plain
    head as a special case; the experts let groups of odour labels get their own nonlinearity.
    ``last_aux_loss`` holds the router's load-balance + z loss of the last forward."""

    def __init__(self, hidden: int, n_labels: int, n_experts: int, k: int, dropout: float = 0.0):
        super().__init__()
        self.shared = nn.Linear(hidden, n_labels)
        experts = nn.ModuleList(
            nn.Sequential(
                nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, n_labels)
            )
            for _ in range(n_experts)
        )
        self.moe = MoE(experts, TopKRouter(hidden, n_experts, k=min(k, n_experts)))
        self.last_aux_loss = torch.zeros(())
        self.last_routing = None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """``z (M, hidden)`` -> logits ``(M, n_labels)``."""
        routed, routing = self.moe(z)
        self.last_aux_loss, self.last_routing = routing.aux_loss, routing
        return self.shared(z) + routed


@register_model("mixscent")
class MixScentNet(PretrainedMixin, nn.Module):
    """Molecule features -> mixture embeddings -> symmetric distance / multi-label logits.

    Molecule features come either from an internal ``MolEncoder`` (``cfg.mol_encoder`` set; then
    ``forward`` takes a PyG batch of the ``U`` unique molecules) or are given directly as
    ``mol_x (U, in_dim)``.

    Distance (symmetric by construction): ``d(a, b) = sigmoid(MLP([|z_a - z_b| ; z_a * z_b ;
    z_a + z_b ; onehot(dataset)]))``, so ``d(a, b) == d(b, a)`` exactly. With ``cfg.desc_dim``
    the head input also gets ``P([|m_a - m_b| ; m_a + m_b])``, ``m = mean_{i in mix} desc_i``
    (the RF baseline's pair features, ``P`` = dropout -> linear -> ReLU to ``hidden``), so the
    learned mixture embedding and the pooled-descriptor signal meet in one head. With
    ``cfg.set_dim`` it also gets ``Q((s - mu) / sigma)`` of the pair's set-level features
    ``s (P, set_dim)`` (overlap, set distances; symmetric by construction), standardised by the
    buffers ``set_mean``/``set_std`` that training fits on its training pairs."""

    @register_to_config
    def __init__(self, cfg: MixScentConfig):
        super().__init__()
        self.cfg = cfg
        self.mol_encoder = MolEncoder(MolEncoderConfig(**cfg.mol_encoder)) if cfg.mol_encoder else None
        self.mixture = MixtureEncoder(cfg)
        h = cfg.hidden
        self.desc_proj = (
            nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(2 * cfg.desc_dim, h), nn.ReLU())
            if cfg.desc_dim
            else None
        )
        self.set_proj = (
            nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(cfg.set_dim, h), nn.ReLU()) if cfg.set_dim else None
        )
        if cfg.set_dim:
            self.register_buffer("set_mean", torch.zeros(cfg.set_dim))
            self.register_buffer("set_std", torch.ones(cfg.set_dim))
        n_in = 3 * h + cfg.n_datasets + (h if cfg.desc_dim else 0) + (h if cfg.set_dim else 0)
        self.dist = nn.Sequential(nn.Linear(n_in, h), nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(h, 1))
        if cfg.n_labels and cfg.label_experts:
            self.labels = MoELabelHead(h, cfg.n_labels, cfg.label_experts, cfg.label_top_k, cfg.dropout)
        else:
            self.labels = nn.Linear(h, cfg.n_labels) if cfg.n_labels else None

    def molecule_features(self, mols) -> torch.Tensor:
        """``(U, in_dim)`` from a PyG batch (internal encoder) or passthrough of a tensor. A batch
        carrying ``mol_extra (U, k)`` (per-molecule vectors beside the graphs, e.g. MiniMol
        embeddings) gets them appended to the encoder's output: ``in_dim = emb_dim + k``."""
        if self.mol_encoder is not None and not torch.is_tensor(mols):
            x = self.mol_encoder(mols)
            extra = getattr(mols, "mol_extra", None)
            return x if extra is None else torch.cat([x, extra.to(x.dtype)], dim=-1)
        return mols

    def embed(self, mols, comp: torch.Tensor, comp_batch: torch.Tensor, n_mix: int):
        """Mixture embeddings ``(M, hidden)`` and per-component attention ``(C,)``."""
        x = self.molecule_features(mols)[comp]
        return self.mixture(x, comp_batch, n_mix)

    def distance_from_embeddings(
        self,
        za: torch.Tensor,
        zb: torch.Tensor,
        dataset_onehot: torch.Tensor | None = None,
        ma: torch.Tensor | None = None,
        mb: torch.Tensor | None = None,
        pair_set: torch.Tensor | None = None,
    ):
        """``za, zb (P, hidden)`` (and, with ``cfg.desc_dim``, the mixture-mean descriptors
        ``ma, mb (P, desc_dim)``; with ``cfg.set_dim``, the raw set features ``pair_set (P,
        set_dim)``) -> ``(P,)`` distances in (0, 1)."""
        feats = [torch.abs(za - zb), za * zb, za + zb]
        if self.cfg.n_datasets:
            if dataset_onehot is None:
                dataset_onehot = za.new_zeros(za.shape[0], self.cfg.n_datasets)
            feats.append(dataset_onehot)
        if self.desc_proj is not None:
            if ma is None or mb is None:
                raise ValueError("this model's distance head needs mixture descriptors (desc_dim > 0)")
            feats.append(self.desc_proj(torch.cat([torch.abs(ma - mb), ma + mb], dim=-1)))
        if self.set_proj is not None:
            if pair_set is None:
                raise ValueError("this model's distance head needs set features (set_dim > 0)")
            feats.append(self.set_proj((pair_set.to(za.dtype) - self.set_mean) / self.set_std))
        return torch.sigmoid(self.dist(torch.cat(feats, dim=-1))).squeeze(-1)

    @staticmethod
    def mixture_descriptors(desc: torch.Tensor, comp: torch.Tensor, comp_batch: torch.Tensor, n_mix: int):
        """Mean molecule descriptor of each mixture: ``desc (U, D)`` -> ``(M, D)``."""
        counts = torch.bincount(comp_batch, minlength=n_mix).clamp(min=1).to(desc.dtype)
        total = torch.zeros(n_mix, desc.shape[1], dtype=desc.dtype, device=desc.device)
        return total.index_add(0, comp_batch, desc[comp]) / counts[:, None]

    def forward(self, mols, comp, comp_batch, n_mix, pair_a, pair_b, dataset_onehot=None, desc=None, pair_set=None):
        """Distances ``(P,)`` for mixture index pairs ``pair_a, pair_b (P,)`` into the M mixtures;
        ``desc (U, desc_dim)``: per-molecule descriptors, needed when ``cfg.desc_dim > 0``;
        ``pair_set (P, set_dim)``: set-level pair features, needed when ``cfg.set_dim > 0``."""
        z, _ = self.embed(mols, comp, comp_batch, n_mix)
        ma = mb = None
        if self.cfg.desc_dim:
            if desc is None:
                raise ValueError("this model needs per-molecule descriptors desc (U, desc_dim)")
            m = self.mixture_descriptors(desc, comp, comp_batch, n_mix)
            ma, mb = m[pair_a], m[pair_b]
        return self.distance_from_embeddings(z[pair_a], z[pair_b], dataset_onehot, ma, mb, pair_set)

    def label_logits(self, mols, comp, comp_batch, n_mix) -> torch.Tensor:
        """Multi-label logits ``(M, n_labels)``."""
        if self.labels is None:
            raise ValueError("model was built without a label head (n_labels=0)")
        z, _ = self.embed(mols, comp, comp_batch, n_mix)
        return self.labels(z)

    def label_aux_loss(self) -> torch.Tensor:
        """Router auxiliary loss of the last :meth:`label_logits` call (0 without MoE head)."""
        aux = getattr(self.labels, "last_aux_loss", None)
        return aux if aux is not None else self.dist[0].weight.new_zeros(())

    def config_dict(self) -> dict:
        return asdict(self.cfg)

    @classmethod
    def tiny_example(cls):
        """Encoder-backed net with descriptor and set-feature paths and a label head; input: 2 mixtures of the
        :data:`TINY_SMILES` and the pair (0, 1)."""
        torch.manual_seed(0)
        enc = asdict(MolEncoderConfig(hidden=8, layers=1, emb_dim=8))
        net = cls(MixScentConfig(in_dim=8, hidden=8, heads=2, n_labels=3, n_datasets=2, desc_dim=4, set_dim=2,
                                 mol_encoder=enc))
        net.set_mean.copy_(torch.tensor([0.5, -1.0]))  # fitted buffers travel with the weights
        net.set_std.copy_(torch.tensor([2.0, 0.25]))
        comp, comp_batch = torch.tensor([0, 1, 1, 2]), torch.tensor([0, 0, 1, 1])
        desc, pair_set = torch.randn(len(TINY_SMILES), 4), torch.randn(1, 2)
        onehot = torch.tensor([[1.0, 0.0]])
        return net, (_tiny_graph(), comp, comp_batch, 2, torch.tensor([0]), torch.tensor([1]), onehot, desc, pair_set)
