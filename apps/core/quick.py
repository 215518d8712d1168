"""Quick run of the core: an MoE classifier vs a dense MLP on scikit-learn's digits."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from common.io import write_csv
from common.seed import seed_everything
from moe import MoE, TopKRouter, plot_expert_load, routing_stats


class MoEClassifier(nn.Module):
    """``x (N, 64) -> logits (N, 10)`` through an embedding, one MoE layer of MLP experts
    (residual), and a linear head. ``forward`` returns ``(logits, Routing)``."""

    def __init__(self, d_in: int = 64, d: int = 32, num_experts: int = 8, k: int = 2, n_classes: int = 10):
        super().__init__()
        self.embed = nn.Linear(d_in, d)
        experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)) for _ in range(num_experts)
        )
        self.moe = MoE(experts, TopKRouter(d, num_experts, k, balance_coef=0.01))
        self.head = nn.Linear(d, n_classes)

    def forward(self, x):
        h = torch.relu(self.embed(x))
        y, routing = self.moe(h)
        return self.head(h + y), routing


class DenseClassifier(nn.Module):
    """Dense baseline with the active width of ``k`` experts: ``x (N, 64) -> logits (N, 10)``."""

    def __init__(self, d_in: int = 64, d: int = 32, k: int = 2, n_classes: int = 10):
        super().__init__()
        self.embed = nn.Linear(d_in, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d * k), nn.GELU(), nn.Linear(2 * d * k, d))
        self.head = nn.Linear(d, n_classes)

    def forward(self, x):
        h = torch.relu(self.embed(x))
        return self.head(h + self.mlp(h)), None


def _train(model, x_tr, y_tr, epochs: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(epochs):
        for idx in torch.randperm(len(x_tr), generator=g).split(128):
            logits, routing = model(x_tr[idx])
            loss = nn.functional.cross_entropy(logits, y_tr[idx])
            if routing is not None:
                loss = loss + routing.aux_loss
            opt.zero_grad()
            loss.backward()
            opt.step()


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0, epochs: int = 20) -> list[dict]:
    """Train both on a seeded 75/25 split of digits; write ``moe.csv`` and the load plot."""
    out_dir = Path(out_dir)
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x / 16.0, y, test_size=0.25, random_state=seed, stratify=y)
    x_tr, x_te = (torch.tensor(a, dtype=torch.float32) for a in (x_tr, x_te))
    y_tr, y_te = (torch.tensor(a) for a in (y_tr, y_te))
    rows = []
    for name, make in (("MoE (E=8, k=2)", MoEClassifier), ("dense MLP (same active width)", DenseClassifier)):
        seed_everything(seed)
        model = make()
        _train(model, x_tr, y_tr, epochs, seed)
        model.eval()
        with torch.no_grad():
            logits, routing = model(x_te)
        acc = float((logits.argmax(1) == y_te).float().mean())
        rows.append(
            {
                "app": "moe",
                "task": "digits classification",
                "method": name,
                "metric": "accuracy",
                "value": round(acc, 4),
                "split": "digits 25% test (stratified)",
                "seed": seed,
            }
        )
        if routing is not None:
            stats = routing_stats(routing)
            rows.append(
                {
                    "app": "moe",
                    "task": "digits classification",
                    "method": name,
                    "metric": "load entropy",
                    "value": round(stats["load_entropy"], 4),
                    "split": "digits 25% test (stratified)",
                    "seed": seed,
                }
            )
            fig, ax = plt.subplots(figsize=(6, 3))
            plot_expert_load(routing.counts, ax=ax, title="MoE on digits: test assignments per expert")
            fig.tight_layout()
            out_dir.mkdir(parents=True, exist_ok=True)
            fig.savefig(out_dir / "moe_expert_load.png", dpi=100)
            plt.close(fig)
    write_csv(out_dir / "moe.csv", rows)
    return rows


__all__ = ["DenseClassifier", "MoEClassifier", "run_quick"]
