"""Long-training check (``-m slow``, a few minutes on one CPU thread): MoH trained on real
Fashion-MNIST must cut its loss markedly and sample images that the FMNIST-classifier FID
places much closer to the test set than Gaussian noise passed through the same pipeline
output range."""

import numpy as np
import pytest
import torch

from common.seed import seed_everything
from vision.classifier import get_classifier
from vision.data import fashion_mnist_images
from vision.evaluate import classifier_metrics, to_model_range
from vision.models import build_backbone
from vision.sampling import MoHPipeline, make_sampler
from vision.train import TrainConfig, fit


@pytest.mark.slow
def test_moh_learns_fashion_mnist():
    classifier, _ = get_classifier()
    x_train, _ = fashion_mnist_images("train", limit=5000, seed=0)
    x_real, _ = fashion_mnist_images("test", limit=500, seed=0)
    seed_everything(0)
    model = build_backbone("moh")
    res = fit(model, x_train, TrainConfig(steps=200, batch_size=32, checkpoint_every=0, log_every=10))
    losses = [h["loss"] for h in res.history]
    assert np.mean(losses[-5:]) < 0.3 * losses[0]

    out = MoHPipeline(model, make_sampler("ddim"))(batch_size=128, num_inference_steps=25,
                                                   generator=torch.Generator().manual_seed(1))
    fid = classifier_metrics(x_real, to_model_range(out.images), classifier)["fmnist_classifier_fid"]
    noise = torch.randn(128, 1, 32, 32, generator=torch.Generator().manual_seed(1)).clamp(-1, 1)
    noise_fid = classifier_metrics(x_real, noise, classifier)["fmnist_classifier_fid"]
    assert fid < 0.6 * noise_fid, (fid, noise_fid)
