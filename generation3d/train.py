"""Training loops for the part autoencoder and the flow-matching generator."""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from tqdm import tqdm

from common.errors import InputError
from common.seed import seed_everything
from generation3d.data import PartDataset, box_to_param, to_canonical
from generation3d.evaluate import chamfer_batch
from generation3d.model import AEConfig, GenConfig, PartAutoencoder, PartFlowTransformer
from generation3d.text import default_encoder, shape_descriptions


def warmup_cosine(opt: torch.optim.Optimizer, steps: int, warmup_frac: float = 0.05):
    """Linear warm-up then cosine decay to 0 over ``steps`` (any ``steps >= 1``)."""
    warm = max(1, int(warmup_frac * steps))
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))


def train_autoencoder(
    ds: PartDataset, config: AEConfig | None = None, steps: int = 300, batch_size: int = 64, lr: float = 2e-3,
    seed: int = 0, progress: bool = False,
) -> tuple[PartAutoencoder, list[dict]]:
    """Fit the part AE on the training parts with the squared Chamfer loss. Returns (model, history)."""
    gen = seed_everything(seed)
    model = PartAutoencoder(config)
    idx = ds.part_indices("train")
    pts = torch.from_numpy(to_canonical(ds.points[idx], ds.boxes[idx])).float()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = warmup_cosine(opt, steps)
    history = []
    model.train()
    for step in tqdm(range(steps), disable=not progress, desc="train-ae"):
        b = pts[torch.randint(len(pts), (batch_size,), generator=gen)]
        loss = chamfer_batch(model(b), b).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            history.append({"step": step, "loss": float(loss.detach())})
    model.eval()
    return model, history


@torch.no_grad()
def encode_parts(ae: PartAutoencoder, ds: PartDataset, batch_size: int = 512) -> torch.Tensor:
    """Latents of every part in the dataset: (N_parts, T, d_z)."""
    pts = torch.from_numpy(to_canonical(ds.points, ds.boxes)).float()
    return torch.cat([ae.encode(pts[i : i + batch_size]) for i in range(0, len(pts), batch_size)])


def shape_batches(ds: PartDataset, ids: np.ndarray, batch_size: int, rng: np.random.Generator, max_tokens: int | None = None):
    """Batches of shape ids with similar part counts (sorted buckets, shuffled order); a batch
    holds at most ``max_tokens`` parts in total when given."""
    ids = ids[np.argsort([ds.n_parts(i) for i in ids], kind="stable")]
    batches, cur = [], []
    for i in ids:
        cur.append(i)
        if len(cur) >= batch_size or (max_tokens and len(cur) * ds.n_parts(i) >= max_tokens):
            batches.append(cur)
            cur = []
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(ds: PartDataset, latents: torch.Tensor, ids, stats: dict, text: torch.Tensor | None = None) -> dict:
    """Pad shapes to the largest P in the batch: z (B,P,T,dz), box (B,P,6) as standardised
    ``box_to_param`` (centre, log size), valid (B,P); ``text (B, d_text)`` rows of the per-shape
    embeddings ``text (S, d_text)`` when given."""
    p_max = max(ds.n_parts(i) for i in ids)
    t, dz = latents.shape[1:]
    z = torch.zeros(len(ids), p_max, t, dz)
    box = torch.zeros(len(ids), p_max, 6)
    valid = torch.zeros(len(ids), p_max, dtype=torch.bool)
    for j, i in enumerate(ids):
        a, b = ds.offsets[i], ds.offsets[i + 1]
        z[j, : b - a] = (latents[a:b] - stats["z_mean"]) / stats["z_std"]
        box[j, : b - a] = (box_to_param(torch.from_numpy(ds.boxes[a:b])) - stats["box_mean"]) / stats["box_std"]
        valid[j, : b - a] = True
    return {
        "z": z, "box": box, "valid": valid, "category": torch.from_numpy(ds.category[ids]).long(),
        "n_parts": valid.sum(1), "text": None if text is None else text[torch.as_tensor(ids)],
    }


def latent_stats(ds: PartDataset, latents: torch.Tensor) -> dict:
    """Per-channel mean / std of the training parts' latents and box parameters (centre, log size)."""
    idx = torch.from_numpy(ds.part_indices("train"))
    z, box = latents[idx], box_to_param(torch.from_numpy(ds.boxes[idx.numpy()]))
    return {
        "z_mean": z.mean((0, 1)), "z_std": z.std((0, 1)).clamp(min=1e-4),
        "box_mean": box.mean(0), "box_std": box.std(0).clamp(min=1e-4),
    }


def flow_errors(
    model: PartFlowTransformer, batch: dict, s: torch.Tensor, ez: torch.Tensor, eb: torch.Tensor,
    cat: torch.Tensor, text_keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-part squared velocity errors ``(B, P)`` of latents and boxes at noise levels ``s (B,)``
    with noise ``ez, eb``: ``x_s = (1 - s) x_0 + s eps`` and target ``eps - x_0`` (rectified flow)."""
    z0, box0 = batch["z"], batch["box"]
    zs = (1 - s[:, None, None, None]) * z0 + s[:, None, None, None] * ez
    bs = (1 - s[:, None, None]) * box0 + s[:, None, None] * eb
    vz, vb = model(zs, bs, s * 1000, cat, batch["n_parts"], batch["valid"], batch.get("text"), text_keep)
    return ((vz - (ez - z0)) ** 2).mean((2, 3)), ((vb - (eb - box0)) ** 2).mean(2)


def flow_matching_loss(model: PartFlowTransformer, batch: dict, gen: torch.Generator, null_prob: float = 0.1) -> torch.Tensor:
    """Rectified-flow loss ``|| v_theta(x_s, s) - (eps - x_0) ||^2`` over valid parts,
    ``x_s = (1 - s) x_0 + s eps``, ``s ~ logit-normal`` (as in SD3). Category and text are each
    dropped to their null embedding with probability ``null_prob`` (for CFG / unconditional)."""
    z0, box0, valid = batch["z"], batch["box"], batch["valid"]
    b = z0.shape[0]
    s = torch.sigmoid(torch.randn(b, generator=gen))
    ez, eb = torch.randn(z0.shape, generator=gen), torch.randn(box0.shape, generator=gen)
    cat = batch["category"].clone()
    drop = torch.rand(b, generator=gen) < null_prob
    cat[drop] = model.config.n_categories
    text_keep = torch.rand(b, generator=gen) >= null_prob
    err_z, err_b = flow_errors(model, batch, s, ez, eb, cat, text_keep)
    m = valid.float()
    return ((err_z + err_b) * m).sum() / m.sum()


def train_generator(
    ds: PartDataset, ae: PartAutoencoder, config: GenConfig | None = None, steps: int = 300, batch_size: int = 16,
    lr: float = 1e-3, seed: int = 0, progress: bool = False, max_tokens: int = 512, text_encoder=None,
) -> tuple[PartFlowTransformer, dict, list[dict]]:
    """Train on training shapes with at most ``config.max_parts`` parts, conditioned on category,
    part count and the MiniLM embedding of each shape's description (``text.describe_shape``;
    ``text_encoder`` defaults to ``text.default_encoder()``). Returns (model, stats, history)."""
    gen = seed_everything(seed)
    rng = np.random.default_rng(seed)
    config = config or GenConfig()
    ids = ds.shape_ids("train", max_parts=config.max_parts)
    if len(ids) == 0:
        raise InputError(f"no training shapes with at most {config.max_parts} parts (raise --max-parts)")
    latents = encode_parts(ae, ds)
    stats = latent_stats(ds, latents)
    text = torch.from_numpy((text_encoder or default_encoder()).encode(shape_descriptions(ds)))
    model = PartFlowTransformer(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = warmup_cosine(opt, steps)
    history, step, t0 = [], 0, time.perf_counter()
    # DeepSeek-V3.2 recipe (off by default): dense (k = P) for the first n_dense steps, router
    # distillation loss with weight config.router_distill throughout
    distill, n_dense = config.router_distill > 0, int(round(config.dense_warmup * steps))
    model.train()
    pbar = tqdm(total=steps, disable=not progress, desc=f"train-{config.attention}")
    while step < steps:
        for ids_b in shape_batches(ds, ids, batch_size, rng, max_tokens):
            if step >= steps:
                break
            if distill or n_dense:
                model.set_sparse_training(distill=distill, dense=step < n_dense)
            loss = flow_matching_loss(model, collate(ds, latents, ids_b, stats, text), gen)
            aux = model.router_distill_loss() if distill else None
            opt.zero_grad(set_to_none=True)
            (loss if aux is None else loss + config.router_distill * aux).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % 50 == 0 or step == steps - 1:
                history.append({"step": step, "loss": float(loss.detach()), "time_s": time.perf_counter() - t0,
                                **({} if aux is None else {"router_distill": float(aux.detach())})})
            step += 1
            pbar.update(1)
    pbar.close()
    if distill or n_dense:
        model.set_sparse_training(False, False)
    model.eval()
    return model, {k: v.tolist() for k, v in stats.items()}, history
