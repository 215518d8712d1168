"""Run by test_trainer under ``torchrun --nproc_per_node 2``: fit a linear model with DDP."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from common.trainer import Trainer, exit_distributed, shard_indices

out = Path(sys.argv[1])
torch.manual_seed(0)
x = torch.randn(256, 3)
y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
trainer = Trainer(
    model,
    opt,
    loss_fn=lambda m, idx: nn.functional.mse_loss(m(x[idx]).squeeze(1), y[idx]),
    make_batches=lambda epoch: shard_indices(256, epoch, 0, 32, dist.get_rank(), dist.get_world_size()),
    max_epochs=15,
    progress=False,
    ckpt_dir=out / "ck",
)
result = trainer.fit()
w = torch.cat([model.weight.detach().flatten(), model.bias.detach()])
gathered = [torch.zeros_like(w) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, w)
if dist.get_rank() == 0:
    torch.save({"weights": gathered, "loss": result.history[-1]["train_loss"]}, out / "result.pt")
exit_distributed(0)  # barrier, destroy, os._exit: see its docstring for the gloo teardown race
