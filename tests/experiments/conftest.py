import torch

# 2 shared cores: one intra-op thread keeps the tiny tests from oversubscribing
torch.set_num_threads(1)
