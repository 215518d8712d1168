"""MoCAPipeline: part autoencoder + flow transformer + latent statistics; sampling, save/load.

The pipeline runs where its models are (``to(device)``; loaded on the CPU); the random draws are
made on the CPU from the seed, so a seed gives the same noise on every device.

Sampling integrates the learned velocity field with diffusers' ``FlowMatchEulerDiscreteScheduler``
(sigma from 1 to 0), optionally with classifier-free guidance against the null condition (null
category and null text), then decodes each part's latents to points in its box frame and maps
them into the generated box (the generator's box channels are centre and log size).

Shipping: ``model.PipelineCheckpoint`` holds the autoencoder, the generator, the latent
statistics, the training descriptions and the categories in one registered checkpoint, the form a
pipeline ships in (``common.shipped``: ``MoCAPipeline.load("moca-furniture")`` verifies the
shipped files by sha256 and loads them); ``smoke_sample`` is the shipped-weights test's sampler.

Text: ``sample(text=...)`` embeds the text with MiniLM (``text.default_encoder``) and conditions
on it; ``category='none'`` with a text is text-only conditioning. An empty text is an
InputError (omit it for text-unconditional sampling); any other text is accepted (MiniLM embeds
free text), and ``nearest_description`` reports how close it is to the training descriptions
(the CLI and demo warn below cosine ``FAR_TEXT_COSINE``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from common.device import resolve_device
from common.errors import CheckpointError, InputError
from common.io import signals_deferred
from common.pretrained import checkpoint_info
from generation3d.data import CATEGORIES, check_category
from generation3d.export import part_colours, shape_meshes
from generation3d.geometry import box_to_param, from_canonical, param_to_box
from generation3d.library import DECODERS, ComponentLibrary
from generation3d.limits import MAX_BATCH, MAX_SAMPLING_STEPS
from generation3d.model import PartAutoencoder, PartFlowTransformer, PipelineCheckpoint
from generation3d.text import check_text, default_encoder


@dataclass
class GeneratedShape:
    """``points (P, M, 3)`` world coordinates per part, ``boxes (P, 6)``, the request and the
    part latents ``latents (P, T, d)`` the points were decoded from."""

    points: np.ndarray
    boxes: np.ndarray
    category: str
    n_parts: int
    seed: int
    text: str | None = None
    latents: np.ndarray | None = None


def load_autoencoder(path: str | Path) -> PartAutoencoder:
    return PartAutoencoder.from_pretrained(path)


def save_autoencoder(model: PartAutoencoder, path: str | Path, extra: dict | None = None) -> Path:
    return model.save_pretrained(path, extra)


BOX_PARAM = "centre+log_size"
FAR_TEXT_COSINE = 0.5  # below this a text is reported as unlike every training description


def _check_extra(path: Path, extra: dict, d_latent: int) -> None:
    """CheckpointError naming the entry of the generator's ``extra`` that has the wrong type."""

    def bad(key: str, expected: str) -> CheckpointError:
        return CheckpointError(f"{path / 'config.json'}: extra.{key} should be {expected}")

    stats = extra["stats"]
    sizes = {"z_mean": d_latent, "z_std": d_latent, "box_mean": 6, "box_std": 6}
    if not isinstance(stats, dict):
        raise bad("stats", f"an object with {', '.join(sizes)}")
    for key, n in sizes.items():
        v = stats.get(key)
        if not (isinstance(v, list) and len(v) == n and all(isinstance(x, (int, float)) for x in v)):
            raise bad(f"stats.{key}", f"a list of {n} numbers")
    for key in ("descriptions", "categories"):
        v = extra.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise bad(key, "a list of strings")
    unknown = sorted(set(extra.get("categories") or []) - set(CATEGORIES))
    if unknown:
        raise bad("categories", f"categories of {', '.join(CATEGORIES)}, not {', '.join(unknown)}")


class MoCAPipeline:
    """Part autoencoder + generator + latent statistics; ``descriptions`` are the training texts
    (for ``nearest_description``); ``categories`` the categories it was trained on (default: the
    first ``n_categories`` of ``data.CATEGORIES``, as saved before the list was kept); ``library``
    the training components for the retrieve decoder (``library.ComponentLibrary``, None without)."""

    def __init__(self, ae: PartAutoencoder, gen: PartFlowTransformer, stats: dict, descriptions: list[str] | None = None,
                 text_encoder=None, categories: list[str] | None = None, library: ComponentLibrary | None = None):
        self.ae, self.gen, self.library = ae.eval(), gen.eval(), library
        self.categories = list(categories) if categories else list(CATEGORIES[: gen.config.n_categories])
        self.stats = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in stats.items()}
        self.descriptions = sorted(set(descriptions or []))
        self._encoder = text_encoder

    @property
    def device(self) -> torch.device:
        """Where the generator's parameters are."""
        return next(self.gen.parameters()).device

    def to(self, device: str | torch.device) -> MoCAPipeline:
        """Move the autoencoder and the generator to ``device`` (a ``torch.device`` or a
        ``common.device`` name: auto, cpu, cuda, cuda:N); returns self."""
        dev = resolve_device(device)
        self.ae.to(dev)
        self.gen.to(dev)
        return self

    @property
    def encoder(self):
        return self._encoder or default_encoder()

    def save(self, path: str | Path, extra: dict | None = None, ae_extra: dict | None = None) -> Path:
        """Write ``path/ae`` (with ``ae_extra``), ``path/generator`` (with ``extra``) and the
        component library ``path/library.npz`` (each file atomic); a SIGINT/SIGTERM meanwhile takes
        effect once all are written, so an interrupted save never pairs a new autoencoder with an
        old generator."""
        path = Path(path)
        with signals_deferred():
            if self.library is not None:
                path.mkdir(parents=True, exist_ok=True)
                self.library.save(path)
            save_autoencoder(self.ae, path / "ae", ae_extra)
            self.gen.save_pretrained(path / "generator", {
                "stats": {k: v.tolist() for k, v in self.stats.items()}, "box_param": BOX_PARAM,
                "descriptions": self.descriptions, "categories": self.categories, **(extra or {})})
        return path

    @classmethod
    def load(cls, path: str | Path) -> MoCAPipeline:
        """The pipeline saved in ``path`` (``ae/`` + ``generator/``, as ``save`` writes it), or a
        ``PipelineCheckpoint``: a directory or the name of a shipped one (verified by sha256); with
        the component library beside it when there is one."""
        from common.shipped import resolve_checkpoint

        path = resolve_checkpoint(path)
        if not (path / "generator").is_dir() and not (path / "ae").is_dir():
            pipe = cls.from_checkpoint(PipelineCheckpoint.from_pretrained(path))
            pipe.library = ComponentLibrary.load(path)
            return pipe
        ae = load_autoencoder(path / "ae")
        extra = checkpoint_info(path / "generator").extra
        if "stats" not in extra:
            raise CheckpointError(f"{path / 'generator'} is not a MoCA generator checkpoint: no latent statistics")
        if extra.get("box_param") != BOX_PARAM:
            raise CheckpointError(f"{path / 'generator'} was trained with an older box parameterisation; retrain it with `moca train`")
        gen = PartFlowTransformer.from_pretrained(path / "generator")
        _check_extra(path / "generator", extra, gen.config.d_latent)
        return cls(ae, gen, extra["stats"], extra.get("descriptions"), categories=extra.get("categories"),
                   library=ComponentLibrary.load(path))

    @classmethod
    def from_checkpoint(cls, ckpt: PipelineCheckpoint) -> MoCAPipeline:
        """The pipeline of a ``PipelineCheckpoint`` (sharing its modules); CheckpointError for one
        of another box parameterisation."""
        if ckpt.box_param != BOX_PARAM:
            raise CheckpointError(f"a pipeline checkpoint with boxes as {ckpt.box_param!r}, not {BOX_PARAM!r}; "
                                  "retrain it with `moca train`")
        return cls(ckpt.ae, ckpt.gen, ckpt.stats, ckpt.descriptions, categories=ckpt.categories)

    def checkpoint(self) -> PipelineCheckpoint:
        """This pipeline as one ``PipelineCheckpoint`` (copies of the weights), e.g. to ship it."""
        ckpt = PipelineCheckpoint(self.ae.config, self.gen.config, {k: v.tolist() for k, v in self.stats.items()},
                                  self.descriptions, self.categories, BOX_PARAM)
        ckpt.ae.load_state_dict(self.ae.state_dict())
        ckpt.gen.load_state_dict(self.gen.state_dict())
        return ckpt.eval()

    def meshes(self, g: GeneratedShape, decoder: str = "retrieve") -> tuple[list, list[dict]]:
        """The part meshes of ``g`` a user gets (real components in their materials' colours, else
        one colour per part) and the source items of the components used (``[]`` for points).
        ``retrieve``: real training components fitted into the boxes (``library.py``); ``points``:
        the decoded points meshed (``export.shape_meshes``), also what ``retrieve`` falls back to
        without a library (``self.library is None``)."""
        if decoder not in DECODERS:
            raise InputError(f"unknown decoder {decoder!r}; choose from {', '.join(DECODERS)}")
        if decoder == "points" or self.library is None or g.latents is None:
            return shape_meshes(g.points, g.boxes), []
        meshes, used = self.library.decode(g.latents, g.boxes, g.category, g.seed)
        for m, i, colour in zip(meshes, used, part_colours(len(meshes)), strict=True):
            if not self.library.coloured(int(i)):  # a component without materials: one colour per part
                m.visual.face_colors = np.tile(colour, (len(m.faces), 1))
        return meshes, self.library.attribution(used)

    def embed_text(self, text: str) -> torch.Tensor:
        """MiniLM embedding ``(1, 384)`` of a non-empty text (InputError for an empty one)."""
        return torch.from_numpy(self.encoder.encode([check_text(text)]))

    def nearest_description(self, text: str) -> tuple[str, float]:
        """The training description closest to ``text`` and its cosine similarity (("", 0.0) without any)."""
        if not self.descriptions:
            return "", 0.0
        emb = self.encoder.encode([check_text(text)] + self.descriptions)
        sims = emb[1:] @ emb[0]
        j = int(sims.argmax())
        return self.descriptions[j], float(sims[j])

    @torch.no_grad()
    def sample(
        self, category: str = "chair", n_parts: int = 8, seed: int = 0, steps: int = 25, guidance: float = 1.0,
        batch: int = 1, layout: np.ndarray | None = None, text: str | None = None,
    ) -> list[GeneratedShape]:
        """Generate ``batch`` shapes of ``n_parts`` parts; ``category='none'`` and ``text=None``
        is unconditional.

        ``text``: a description to condition on (MiniLM-embedded; empty text is an InputError).
        ``layout (n_parts, 6)`` optional part boxes (centre, size) to generate shapes for: the box
        channels are held on the forward-noised layout at every step (replacement conditioning)."""
        text_emb = None if text is None else self.embed_text(text).expand(batch, -1)
        cat_idx = self.gen.config.n_categories if category == "none" else CATEGORIES.index(check_category(category))
        if category != "none" and (category not in self.categories or cat_idx >= self.gen.config.n_categories):
            raise InputError(f"unknown category {category!r} for this model; it was trained on "
                             f"{', '.join(self.categories)} (or 'none')")
        if not isinstance(n_parts, (int, np.integer)):
            raise InputError(f"number of parts must be an integer, got {n_parts!r}")
        self.gen.check_parts(int(n_parts))
        if not 1 <= steps <= MAX_SAMPLING_STEPS:
            raise InputError(f"sampling steps must be in 1..{MAX_SAMPLING_STEPS}, got {steps}")
        if not 1 <= batch <= MAX_BATCH:
            raise InputError(f"batch must be in 1..{MAX_BATCH}, got {batch}")
        c = self.gen.config
        dev = self.device
        stats = {k: v.to(dev) for k, v in self.stats.items()}
        g = torch.Generator().manual_seed(seed)
        shape_z, shape_b = (batch, n_parts, c.n_latents, c.d_latent), (batch, n_parts, 6)
        nz = int(np.prod(shape_z[1:]))
        x = torch.randn(batch, nz + n_parts * 6, generator=g).to(dev)
        sched = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000)
        sched.set_timesteps(steps)
        cat = torch.full((batch,), cat_idx, dtype=torch.long, device=dev)
        null = torch.full((batch,), c.n_categories, dtype=torch.long, device=dev)
        count = torch.full((batch,), n_parts, dtype=torch.long, device=dev)
        text_emb = None if text_emb is None else text_emb.to(dev)
        layout_std = layout_noise = None
        if layout is not None:
            layout = np.asarray(layout, dtype=np.float32)
            if layout.shape != (n_parts, 6) or not np.isfinite(layout).all() or (layout[:, 3:] <= 0).any():
                raise InputError(f"layout must be finite boxes of shape ({n_parts}, 6) with positive sizes, got {layout.shape}")
            layout_std = ((box_to_param(torch.from_numpy(layout).to(dev)) - stats["box_mean"]) / stats["box_std"]).reshape(1, -1)
            layout_noise = torch.randn(batch, n_parts * 6, generator=g).to(dev)
        for i, t in enumerate(sched.timesteps):
            if layout_std is not None:
                sigma = float(sched.sigmas[i])
                x[:, nz:] = (1 - sigma) * layout_std + sigma * layout_noise
            z, box = x[:, :nz].reshape(shape_z), x[:, nz:].reshape(shape_b)
            tt = t.expand(batch).to(dev)
            vz, vb = self.gen(z, box, tt, cat, count, text=text_emb)
            if guidance != 1.0 and (cat_idx != c.n_categories or text_emb is not None):
                uz, ub = self.gen(z, box, tt, null, count)
                vz, vb = uz + guidance * (vz - uz), ub + guidance * (vb - ub)
            v = torch.cat([vz.reshape(batch, -1), vb.reshape(batch, -1)], 1)
            x = sched.step(v, t, x).prev_sample
        if layout_std is not None:
            x[:, nz:] = layout_std
        z = x[:, :nz].reshape(shape_z) * stats["z_std"] + stats["z_mean"]
        box = param_to_box(x[:, nz:].reshape(shape_b) * stats["box_std"] + stats["box_mean"])
        pts = self.ae.decode(z.reshape(-1, c.n_latents, c.d_latent)).reshape(batch, n_parts, -1, 3)
        world = from_canonical(pts.clamp(-1.0, 1.0), box).detach().cpu()
        box, z = box.detach().cpu(), z.detach().cpu()
        return [GeneratedShape(world[i].numpy(), box[i].numpy(), category, n_parts, seed, text, z[i].numpy())
                for i in range(batch)]


def smoke_sample(model: PipelineCheckpoint) -> np.ndarray:
    """Points ``(P, M, 3)`` of one 4-step sample of a shipped pipeline's first category at 4
    parts (the shipped-weights test)."""
    return MoCAPipeline.from_checkpoint(model).sample(model.categories[0], 4, seed=0, steps=4)[0].points
