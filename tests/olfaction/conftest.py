import os

import pytest
import torch

# 2 shared cores: one intra-op thread keeps the tiny tests from oversubscribing
torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_predictor():
    """``MixturePredictor.tiny_example()`` (fitted once per session): ``(model, (mix_a, mix_b, datasets))``."""
    from olfaction.predictor import MixturePredictor

    return MixturePredictor.tiny_example()
