"""Bounds on the counts and sizes ``moh`` accepts, checked before any work starts.

Each count has a documented maximum (the table below, also in vision/README.md) that ``--force``
lifts, and every command also checks a lower bound of the memory it will hold against the
machine's RAM, which ``--force`` does not lift (that run could only end in an allocation error).

=====================  =========  ====================================================
option                 maximum    why
=====================  =========  ====================================================
train/bench --steps    200,000    about 6 h at model size XS, batch 32, one CPU thread
--batch-size           4,096      activations grow with it; GPUs rarely fit more at S
--size                 512        tokens grow with its square (16k at patch 4)
--limit / --n-real     1,000,000  the training / reference images are held in memory
sample/eval --n        4,096      one batch: the samples are denoised together
--n-samples            4,096      the bench's samples are one batch too
sampling --steps       1,000      the training schedule has 1,000 timesteps (hard)
--threads              256
=====================  =========  ====================================================
"""

from __future__ import annotations

from common.errors import InputError
from common.limits import gib, physical_memory_bytes

MAX_TRAIN_STEPS = 200_000
MAX_BATCH_SIZE = 4096
MAX_IMAGE_SIZE = 512
MAX_IMAGES = 1_000_000
MAX_SAMPLES = 4096
MAX_SAMPLING_STEPS = 1000  # NUM_TRAIN_TIMESTEPS of vision.sampling: a hard limit
MAX_THREADS = 256
MAX_BUDGET_MIN = 24 * 60  # bench --suite compute: training minutes per model
FLOAT_BYTES = 4


def check_max(flag: str, value: int | None, maximum: int, why: str, force: bool = False) -> None:
    """InputError when ``value`` exceeds the documented ``maximum`` of ``flag`` (unless ``force``);
    ``why`` is the estimate that makes the maximum, quoted in the message."""
    if value is not None and value > maximum and not force:
        raise InputError(f"{flag} {value:,} is over the documented maximum of {maximum:,} ({why}); "
                         "pass --force if you really mean it")


def check_hard_max(flag: str, value: int | None, maximum: int, why: str) -> None:
    """InputError when ``value`` exceeds ``maximum``, which ``--force`` cannot lift."""
    if value is not None and value > maximum:
        raise InputError(f"{flag} {value:,} is over the maximum of {maximum:,} ({why})")


def check_memory(what: str, n_bytes: float) -> None:
    """InputError when ``n_bytes`` (a lower bound of what a command holds) exceeds the RAM."""
    ram = physical_memory_bytes()
    if ram is not None and n_bytes > ram:
        raise InputError(f"{what} needs at least {gib(n_bytes)} of memory, more than this machine's "
                         f"{gib(ram)}; use a smaller count or size")


def images_bytes(n: int, channels: int, size: int, copies: int = 1) -> int:
    """Bytes of ``copies`` float32 tensors ``(n, channels, size, size)``."""
    return n * channels * size * size * FLOAT_BYTES * copies


def check_training(*, steps: int | None, batch_size: int | None, size: int, channels: int, limit: int | None,
                   force: bool) -> None:
    """The bounds of a training run (``moh train``, the benches): steps, batch, image size, images
    held (their memory is checked by the loaders, which know how many there are)."""
    check_max("--steps", steps, MAX_TRAIN_STEPS, "about 6 h at model size XS, batch 32, one CPU thread", force)
    check_max("--batch-size", batch_size, MAX_BATCH_SIZE, "activations grow with the batch", force)
    check_max("--size", size, MAX_IMAGE_SIZE, f"{(size // 4) ** 2:,} tokens per image at patch 4", force)
    check_max("--limit", limit, MAX_IMAGES, "the training images are held in memory", force)
    if batch_size is not None:  # one batch: clean images, noise, noisy images
        check_memory(f"--batch-size {batch_size:,} at {channels}x{size}x{size}",
                     images_bytes(batch_size, channels, size, copies=3))


def check_sampling(*, n: int, steps: int, channels: int, size: int, force: bool, flag: str = "--n") -> None:
    """The bounds of one sampling batch (``moh sample``, ``moh eval``): samples and denoising steps."""
    check_max(flag, n, MAX_SAMPLES, "the samples are denoised as one batch", force)
    check_hard_max("--steps", steps, MAX_SAMPLING_STEPS, "the training schedule has 1,000 timesteps")
    # the noisy batch, the prediction, the scheduler's update and the output
    check_memory(f"{flag} {n:,} samples of {channels}x{size}x{size}", images_bytes(n, channels, size, copies=4))
