import os

import torch

# 2 shared cores: one intra-op thread keeps the tiny tests from oversubscribing
torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
