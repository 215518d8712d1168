"""MoCAPipeline: part autoencoder + flow transformer + latent statistics; sampling, save/load.

Sampling integrates the learned velocity field with diffusers' ``FlowMatchEulerDiscreteScheduler``
(sigma from 1 to 0), optionally with classifier-free guidance against the null category, then
decodes each part's latents to points in its box frame and maps them into the generated box.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from common.checkpoint import load_checkpoint, load_into, save_checkpoint
from common.errors import CheckpointError, InputError
from generation3d.data import CATEGORIES, MIN_SIZE, check_category, from_canonical
from generation3d.model import AEConfig, GenConfig, PartAutoencoder, PartFlowTransformer


@dataclass
class GeneratedShape:
    """``points (P, M, 3)`` world coordinates per part, ``boxes (P, 6)``, the request."""

    points: np.ndarray
    boxes: np.ndarray
    category: str
    n_parts: int
    seed: int


def load_autoencoder(path: str | Path) -> PartAutoencoder:
    state, config, _ = load_checkpoint(path)
    try:
        model = PartAutoencoder(AEConfig(**config))
    except TypeError as exc:
        raise CheckpointError(f"{path} is not a part-autoencoder checkpoint: {exc}") from exc
    load_into(model, state, str(path))
    return model.eval()


def save_autoencoder(model: PartAutoencoder, path: str | Path, extra: dict | None = None) -> Path:
    return save_checkpoint(path, model.state_dict(), asdict(model.config), extra)


class MoCAPipeline:
    def __init__(self, ae: PartAutoencoder, gen: PartFlowTransformer, stats: dict):
        self.ae, self.gen = ae.eval(), gen.eval()
        self.stats = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in stats.items()}

    def save(self, path: str | Path, extra: dict | None = None) -> Path:
        path = Path(path)
        save_autoencoder(self.ae, path / "ae")
        save_checkpoint(path / "generator", self.gen.state_dict(), asdict(self.gen.config),
                        {"stats": {k: v.tolist() for k, v in self.stats.items()}, **(extra or {})})
        return path

    @classmethod
    def load(cls, path: str | Path) -> MoCAPipeline:
        path = Path(path)
        ae = load_autoencoder(path / "ae")
        state, config, extra = load_checkpoint(path / "generator")
        try:
            gen = PartFlowTransformer(GenConfig(**config))
            stats = extra["stats"]
        except (TypeError, KeyError) as exc:
            raise CheckpointError(f"{path / 'generator'} is not a MoCA generator checkpoint: {exc}") from exc
        load_into(gen, state, str(path / "generator"))
        return cls(ae, gen, stats)

    @torch.no_grad()
    def sample(
        self, category: str = "chair", n_parts: int = 8, seed: int = 0, steps: int = 25, guidance: float = 1.0,
        batch: int = 1, layout: np.ndarray | None = None,
    ) -> list[GeneratedShape]:
        """Generate ``batch`` shapes of ``n_parts`` parts; ``category='none'`` is unconditional.

        ``layout (n_parts, 6)`` optional part boxes (centre, size) to generate shapes for: the box
        channels are held on the forward-noised layout at every step (replacement conditioning)."""
        cat_idx = self.gen.config.n_categories if category == "none" else CATEGORIES.index(check_category(category))
        if not isinstance(n_parts, (int, np.integer)):
            raise InputError(f"number of parts must be an integer, got {n_parts!r}")
        self.gen.check_parts(int(n_parts))
        if steps < 1:
            raise InputError(f"steps must be >= 1, got {steps}")
        c = self.gen.config
        g = torch.Generator().manual_seed(seed)
        shape_z, shape_b = (batch, n_parts, c.n_latents, c.d_latent), (batch, n_parts, 6)
        nz = int(np.prod(shape_z[1:]))
        x = torch.randn(batch, nz + n_parts * 6, generator=g)
        sched = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000)
        sched.set_timesteps(steps)
        cat = torch.full((batch,), cat_idx, dtype=torch.long)
        null = torch.full((batch,), c.n_categories, dtype=torch.long)
        count = torch.full((batch,), n_parts, dtype=torch.long)
        layout_std = layout_noise = None
        if layout is not None:
            layout = np.asarray(layout, dtype=np.float32)
            if layout.shape != (n_parts, 6) or not np.isfinite(layout).all() or (layout[:, 3:] <= 0).any():
                raise InputError(f"layout must be finite boxes of shape ({n_parts}, 6) with positive sizes, got {layout.shape}")
            layout_std = ((torch.from_numpy(layout) - self.stats["box_mean"]) / self.stats["box_std"]).reshape(1, -1)
            layout_noise = torch.randn(batch, n_parts * 6, generator=g)
        for i, t in enumerate(sched.timesteps):
            if layout_std is not None:
                sigma = float(sched.sigmas[i])
                x[:, nz:] = (1 - sigma) * layout_std + sigma * layout_noise
            z, box = x[:, :nz].reshape(shape_z), x[:, nz:].reshape(shape_b)
            tt = t.expand(batch)
            vz, vb = self.gen(z, box, tt, cat, count)
            if guidance != 1.0 and cat_idx != c.n_categories:
                uz, ub = self.gen(z, box, tt, null, count)
                vz, vb = uz + guidance * (vz - uz), ub + guidance * (vb - ub)
            v = torch.cat([vz.reshape(batch, -1), vb.reshape(batch, -1)], 1)
            x = sched.step(v, t, x).prev_sample
        if layout_std is not None:
            x[:, nz:] = layout_std
        z = x[:, :nz].reshape(shape_z) * self.stats["z_std"] + self.stats["z_mean"]
        box = x[:, nz:].reshape(shape_b) * self.stats["box_std"] + self.stats["box_mean"]
        box[..., 3:] = box[..., 3:].clamp(min=MIN_SIZE)
        pts = self.ae.decode(z.reshape(-1, c.n_latents, c.d_latent)).reshape(batch, n_parts, -1, 3)
        world = from_canonical(pts.clamp(-1.0, 1.0), box)
        return [GeneratedShape(world[i].numpy(), box[i].numpy(), category, n_parts, seed) for i in range(batch)]
