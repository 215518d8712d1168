"""Quick run of the core: an MoE classifier vs a dense MLP on scikit-learn's digits."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import lightning.pytorch as L
import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import TensorDataset

from common.engine import make_trainer, shuffled_loader
from common.io import write_csv
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


class DigitsModule(L.LightningModule):
    """Cross-entropy (plus the router's auxiliary loss for the MoE) of a ``(logits, Routing)``
    classifier on batches ``(x (b, 64), y (b,))``, Adam."""

    def __init__(self, model: nn.Module, lr: float = 3e-3) -> None:
        super().__init__()
        self.model, self.lr = model, lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits, routing = self.model(x)
        loss = nn.functional.cross_entropy(logits, y)
        if routing is not None:
            loss = loss + routing.aux_loss
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=self.lr)


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0, epochs: int = 20) -> list[dict]:
    """Train both on a seeded 75/25 split of digits; write ``moe.csv`` and the load plot."""
    out_dir = Path(out_dir)
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x / 16.0, y, test_size=0.25, random_state=seed, stratify=y)
    x_tr, x_te = (torch.tensor(a, dtype=torch.float32) for a in (x_tr, x_te))
    y_tr, y_te = (torch.tensor(a) for a in (y_tr, y_te))
    rows = []
    for name, make in (("MoE (E=8, k=2)", MoEClassifier), ("dense MLP (same active width)", DenseClassifier)):
        trainer = make_trainer(None, max_epochs=epochs, seed=seed, progress=False)
        model = make()  # initialised after seeding
        trainer.fit(DigitsModule(model), shuffled_loader(TensorDataset(x_tr, y_tr), 128, seed))
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


__all__ = ["DenseClassifier", "DigitsModule", "MoEClassifier", "run_quick"]
