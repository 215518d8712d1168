"""Training schedule pieces: EMA update, learning-rate schedule, prediction targets."""

import math

import pytest
import torch
from diffusers import DDPMScheduler
from torch import nn

from common.errors import InputError
from tests.vision.conftest import tiny_moh
from vision.sampling import backbone_call, make_train_scheduler, min_snr_weights, training_target
from vision.train import DiffusionModule, TrainConfig, _ema_update, _lr_at, fit


def _const_linear(value: float) -> nn.Linear:
    m = nn.Linear(2, 1)
    with torch.no_grad():
        m.weight.fill_(value)
        m.bias.fill_(value)
    return m


def test_ema_update_by_hand():
    ema, model = _const_linear(0.0), _const_linear(1.0)
    _ema_update(ema, model, step=0, decay=0.9)  # warm-up decay min(0.9, 1/10) = 0.1
    assert torch.allclose(ema.weight, torch.full_like(ema.weight, 0.9))
    ema, model = _const_linear(0.0), _const_linear(1.0)
    _ema_update(ema, model, step=10_000, decay=0.9)  # full decay 0.9
    assert torch.allclose(ema.bias, torch.full_like(ema.bias, 0.1))


def test_lr_warmup_then_cosine_to_final_fraction():
    cfg = TrainConfig(steps=120, lr=1e-2, warmup=20, lr_final_frac=0.1)
    assert _lr_at(0, cfg) == pytest.approx(1e-2 / 20)
    assert _lr_at(19, cfg) == pytest.approx(1e-2)
    assert _lr_at(20, cfg) == pytest.approx(1e-2)
    assert _lr_at(70, cfg) == pytest.approx(1e-2 * (0.1 + 0.9 * 0.5))  # halfway: cos(pi/2) = 0
    assert _lr_at(119, cfg) == pytest.approx(1e-2 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 99 / 100))))
    assert _lr_at(120, cfg) == pytest.approx(1e-3)


def test_training_targets_invert_the_forward_process():
    sched = make_train_scheduler()
    g = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(3, 1, 4, 4, generator=g), torch.randn(3, 1, 4, 4, generator=g)
    t = torch.tensor([10, 500, 990])
    a = sched.alphas_cumprod[t].view(-1, 1, 1, 1)
    xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
    for kind in ("epsilon", "v_prediction", "sample"):
        s = DDPMScheduler.from_config(sched.config, prediction_type=kind)
        target = training_target(s, x0, eps, t)
        # x0 recovered from x_t and the target (DDIM's pred_original_sample formulas)
        rec = {"epsilon": (xt - (1 - a).sqrt() * target) / a.sqrt(),
               "v_prediction": a.sqrt() * xt - (1 - a).sqrt() * target,
               "sample": target}[kind]
        assert torch.allclose(rec, x0, atol=1e-3), kind


def test_train_returns_ema_weights_and_rejects_bad_decay():
    torch.manual_seed(0)
    model = tiny_moh()
    x = torch.rand(16, 1, 16, 16, generator=torch.Generator().manual_seed(0)) * 2 - 1
    seen = []
    res = fit(model, x, TrainConfig(steps=3, batch_size=4, ema_decay=0.99),
                callback=lambda step, m, sm: seen.append(sm is not m))
    assert seen == [True, True, True] and res.ema_model is not None
    for p, pe in zip(model.parameters(), res.ema_model.parameters(), strict=True):
        assert torch.equal(p, pe)
    with pytest.raises(InputError, match="ema_decay"):
        fit(tiny_moh(), x, TrainConfig(steps=1, ema_decay=1.0))


def _x0_error_factor(kind: str, snr: torch.Tensor) -> torch.Tensor:
    """||target error||² per unit ||x0 error||² at a fixed x_t: ε-error = √SNR · x0-error, v-error = √(SNR+1) ·."""
    return {"sample": torch.ones_like(snr), "epsilon": snr, "v_prediction": snr + 1}[kind]


def test_min_snr_weights_weight_the_x0_error_alike_for_every_target():
    a = make_train_scheduler().alphas_cumprod
    snr = (a / (1 - a)).double()
    x0_weight = snr.clamp(max=5.0)
    w = {kind: min_snr_weights(a, kind, 5.0).double() for kind in ("sample", "epsilon", "v_prediction")}
    for kind, weight in w.items():
        assert weight.shape == a.shape and weight.mean().item() == pytest.approx(1.0, rel=1e-5), kind
        assert torch.isfinite(weight).all() and (weight > 0).all(), kind
        # in x0 terms every target gets min(SNR_t, 5), up to one constant over all timesteps
        ratio = weight * _x0_error_factor(kind, snr) / x0_weight
        assert torch.allclose(ratio, ratio.mean().expand_as(ratio), rtol=1e-4), kind
    assert torch.allclose(w["sample"], (x0_weight / x0_weight.mean()), rtol=1e-6)
    low_noise = w["sample"][snr >= 5.0]  # capped at γ: the low-noise steps share one weight, the largest
    assert len(low_noise) > 10 and torch.allclose(low_noise, w["sample"].max().expand_as(low_noise))
    assert min_snr_weights(a, "sample", 0.0) is None
    with pytest.raises(ValueError, match="min_snr_gamma"):
        min_snr_weights(a, "sample", -1.0)
    with pytest.raises(ValueError, match="prediction_type"):
        min_snr_weights(a, "flow", 5.0)


@pytest.mark.parametrize("gamma", [0.0, 5.0])
def test_training_loss_is_the_weighted_per_sample_error(gamma):
    torch.manual_seed(0)
    model = tiny_moh()
    x = torch.rand(8, 1, 16, 16, generator=torch.Generator().manual_seed(0)) * 2 - 1
    module = DiffusionModule(model, x, TrainConfig(steps=1, batch_size=4, ema_decay=0, min_snr_gamma=gamma))
    module.log = lambda *args, **kwargs: None  # outside a Trainer
    g = torch.Generator().manual_seed(1)
    x0, noise, t = x[:4], torch.randn(4, 1, 16, 16, generator=g), torch.tensor([0, 10, 500, 999])
    loss = module.training_step((x0, noise, t), 0)
    a = module.alphas_cumprod[t].view(-1, 1, 1, 1)
    pred, aux, _ = backbone_call(model, a.sqrt() * x0 + (1 - a).sqrt() * noise, t)
    per_sample = (pred - x0).pow(2).flatten(1).mean(1)
    weight = torch.ones(4) if gamma == 0 else min_snr_weights(module.alphas_cumprod, "sample", gamma)[t]
    assert loss.item() == pytest.approx(float((weight * per_sample).mean() + aux), rel=1e-5)
    assert (module.loss_weight is None) == (gamma == 0)
