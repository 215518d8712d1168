"""Building blocks shared by the diffusion backbones: Mamba (S6) mixer, adaLN-conditioned
residual blocks, timestep embedding, patchify / unpatchify.

Shape notation: ``b`` batch, ``l`` tokens (``gh * gw`` patch grid, row-major), ``d`` model width,
``e`` inner width (``expand * d``), ``n`` SSM state size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from diffusers.configuration_utils import FrozenDict
from diffusers.utils import BaseOutput
from einops import rearrange
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from common.errors import InputError
from common.pretrained import PretrainedMixin
from vision.scan import inverse_permutation, scan_order, selective_scan


@dataclass
class BackboneOutput(BaseOutput):
    """``sample (b, c, H, W)`` predicted noise; ``aux_loss`` scalar routing losses (0 for fixed
    backbones); ``route`` the routing decisions (MoH only, see ``MoHBackbone.forward``)."""

    sample: Tensor
    aux_loss: Tensor | None = None
    route: dict | None = None


class DiffusionBackbone(PretrainedMixin, nn.Module):
    """Base of the backbones: ``save_pretrained`` / ``from_pretrained`` of ``common.pretrained``,
    and ``config``, the constructor arguments with attribute and item access (as diffusers'
    ``ConfigMixin.config``, which ``MoHPipeline`` and ``UNet2DModel`` share)."""

    @property
    def config(self) -> FrozenDict:
        view = self.__dict__.get("_config_view")
        if view is None:
            view = FrozenDict(self.pretrained_config)
            object.__setattr__(self, "_config_view", view)
        return view

    @staticmethod
    def example_input(sample_size: int = 16, in_channels: int = 1) -> tuple[Tensor, Tensor]:
        """``(sample (3, c, H, W), timestep (3,))``: the registry's example input."""
        g = torch.Generator().manual_seed(0)
        return torch.randn(3, in_channels, sample_size, sample_size, generator=g), torch.tensor([5, 500, 999])

    def example_forward(self, sample: Tensor, timestep: Tensor) -> Tensor:
        return self(sample, timestep).sample

    @staticmethod
    def perturbed(model: nn.Module) -> nn.Module:
        """``model`` with every weight moved by N(0, 0.05²) noise (zero-initialised heads would
        make every output 0 in a round-trip test)."""
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
        return model


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal embedding ``(b,) -> (b, dim)`` (DDPM / Transformer positional encoding)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TimestepEmbedder(nn.Module):
    """``t (b,)`` integer/float timesteps -> ``(b, d)`` via sinusoid + 2-layer MLP."""

    def __init__(self, d: int, freq_dim: int = 64) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, d), nn.SiLU(), nn.Linear(d, d))

    def forward(self, t: Tensor) -> Tensor:
        return self.mlp(timestep_embedding(t, self.freq_dim))


def prepare_timestep(timestep: Tensor | int | float, b: int, device: torch.device) -> Tensor:
    """Broadcast a scalar or ``(b,)`` timestep to ``(b,)``."""
    t = torch.as_tensor(timestep, device=device)
    if t.dim() == 0:
        t = t.expand(b)
    if t.shape != (b,):
        raise InputError(f"timestep must be a scalar or shape ({b},), got {tuple(t.shape)}")
    return t


def check_sample(sample: Tensor, channels: int, size: int) -> None:
    """Raise InputError unless ``sample`` is ``(b, channels, size, size)`` and finite."""
    if sample.dim() != 4 or sample.shape[1] != channels or sample.shape[2:] != (size, size):
        raise InputError(
            f"expected images of shape (b, {channels}, {size}, {size}), got {tuple(sample.shape)}"
        )


class PatchEmbed(nn.Module):
    """``(b, c, H, W) -> (b, l, d)`` non-overlapping ``p x p`` patches plus a learned position
    embedding; ``l = (H/p) * (W/p)``."""

    def __init__(self, size: int, channels: int, patch: int, d: int) -> None:
        super().__init__()
        if size % patch:
            raise ValueError(f"image size {size} is not divisible by patch size {patch}")
        self.grid = size // patch
        self.proj = nn.Conv2d(channels, d, kernel_size=patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, self.grid * self.grid, d) * 0.02)

    def forward(self, x: Tensor) -> Tensor:
        return rearrange(self.proj(x), "b d h w -> b (h w) d") + self.pos


class FinalLayer(nn.Module):
    """adaLN + linear head: ``(b, l, d), c (b, d) -> (b, channels, H, W)`` (zero-initialised)."""

    def __init__(self, d: int, channels: int, patch: int, grid: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, patch * patch * channels)
        self.patch, self.grid, self.channels = patch, grid, channels
        for m in (self.ada, self.out):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale = self.ada(F.silu(c)).chunk(2, dim=-1)
        x = self.out(self.norm(x) * (1 + scale[:, None]) + shift[:, None])
        return rearrange(x, "b (h w) (p q c) -> b c (h p) (w q)", h=self.grid, p=self.patch, q=self.patch)


class MambaMixer(nn.Module):
    """Mamba (S6) token mixer over a 1D sequence ``(b, l, d) -> (b, l, d)``.

    ``x, z = in_proj(u)``; ``x = silu(causal_dwconv(x))``; input-dependent ``Δ, B, C`` from
    ``x``; ``y = S6(x; Δ, A, B, C, D)``; ``out = out_proj(y * silu(z))`` (Gu & Dao 2023, Fig. 3).
    ``A = -exp(A_log)`` is initialised to ``-(1..n)`` (S4D-real), ``Δ`` via softplus to
    ``[1e-3, 1e-1]`` log-uniformly. ``checkpoint_scan``: while gradients are recorded, keep only
    the scan's inputs and recompute its ``(b, l, e, n)`` states in the backward pass
    (``torch.utils.checkpoint``): the same values and gradients for a fraction of the activation
    memory, at the cost of a second scan.
    """

    def __init__(self, d: int, d_state: int = 8, expand: int = 2, d_conv: int = 4,
                 checkpoint_scan: bool = False) -> None:
        super().__init__()
        e = expand * d
        self.dt_rank = max(1, math.ceil(d / 16))
        self.d_state = d_state
        self.in_proj = nn.Linear(d, 2 * e)
        self.conv = nn.Conv1d(e, e, d_conv, groups=e, padding=d_conv - 1)
        self.x_proj = nn.Linear(e, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, e)
        dt = torch.exp(torch.rand(e) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(e, 1))
        self.D = nn.Parameter(torch.ones(e))
        self.out_proj = nn.Linear(e, d)
        self.checkpoint_scan = checkpoint_scan

    def forward(self, u: Tensor) -> Tensor:
        seq_len = u.shape[1]
        x, z = self.in_proj(u).chunk(2, dim=-1)
        x = F.silu(self.conv(x.transpose(1, 2))[..., :seq_len].transpose(1, 2))
        dt, B, C = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt))
        if self.checkpoint_scan and torch.is_grad_enabled():
            y = checkpoint(selective_scan, x, delta, -torch.exp(self.A_log), B, C, self.D, use_reentrant=False)
        else:
            y = selective_scan(x, delta, -torch.exp(self.A_log), B, C, self.D)
        return self.out_proj(y * F.silu(z))


class ScanOrders(nn.Module):
    """Holds the permutations for a grid so that a mixer can run in any 2D scan order."""

    def __init__(self, orders: tuple[str, ...], gh: int, gw: int) -> None:
        super().__init__()
        self.orders = tuple(orders)
        for name in self.orders:
            perm = scan_order(name, gh, gw)
            self.register_buffer(f"perm_{name}", perm, persistent=False)
            self.register_buffer(f"inv_{name}", inverse_permutation(perm), persistent=False)

    def apply(self, mixer: nn.Module, x: Tensor, name: str) -> Tensor:
        """Run ``mixer`` over the tokens of ``x (b, l, d)`` visited in order ``name``."""
        perm, inv = getattr(self, f"perm_{name}"), getattr(self, f"inv_{name}")
        return mixer(x[:, perm])[:, inv]


class AdaLNMambaBlock(nn.Module):
    """Residual Mamba block conditioned on ``c (b, d)`` by adaLN-Zero (DiT):
    ``x + gate(c) * mamba(LN(x) * (1 + scale(c)) + shift(c))`` with the tokens visited in scan
    order ``order``; ``bidirectional`` adds a second mixer over the reversed order (Vim);
    ``checkpoint_scan`` as in :class:`MambaMixer`."""

    def __init__(
        self, d: int, d_state: int, expand: int, order: str, grid: int, bidirectional: bool = False,
        checkpoint_scan: bool = False,
    ) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Linear(d, 3 * d)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)
        self.mixer = MambaMixer(d, d_state, expand, checkpoint_scan=checkpoint_scan)
        self.order = order
        orders = (order, order + "_rev") if bidirectional and not order.endswith("_rev") else (order,)
        self.mixer_rev = MambaMixer(d, d_state, expand, checkpoint_scan=checkpoint_scan) if len(orders) == 2 else None
        self.orders = ScanOrders(orders, grid, grid)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale, gate = self.ada(F.silu(c)).chunk(3, dim=-1)
        h = self.norm(x) * (1 + scale[:, None]) + shift[:, None]
        y = self.orders.apply(self.mixer, h, self.order)
        if self.mixer_rev is not None:
            y = y + self.orders.apply(self.mixer_rev, h, self.order + "_rev")
        return x + gate[:, None] * y


class FixedStackBackbone(DiffusionBackbone):
    """Base of the fixed-depth backbones (plain Mamba, DiT): every block at every timestep. A
    subclass builds ``t_embed``, ``patch``, ``blocks`` (each ``block(h, c)``) and ``final``."""

    def forward(self, sample: Tensor, timestep, return_dict: bool = True, route: dict | None = None):
        """Patch-embed ``sample (b, c, H, W)``, run ``blocks`` conditioned on the timestep
        embedding, project back. Returns ``BackboneOutput`` (or a tuple) with zero aux loss and the
        block count run; ``route`` is accepted for a call uniform with MoH's and ignored."""
        cfg = self.config
        check_sample(sample, cfg.in_channels, cfg.sample_size)
        t = prepare_timestep(timestep, sample.shape[0], sample.device)
        c = self.t_embed(t)
        h = self.patch(sample)
        for blk in self.blocks:
            h = blk(h, c)
        out = self.final(h, c)
        info = {"sample_layers": len(self.blocks) * sample.shape[0]}
        if not return_dict:
            return (out, out.new_zeros(()), info)
        return BackboneOutput(sample=out, aux_loss=out.new_zeros(()), route=info)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
