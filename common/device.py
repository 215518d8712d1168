"""Where torch work runs: one helper for every app, CLI and benchmark.

A device is named the way users name it on the command line: ``auto`` (a CUDA GPU when one is
present, else the CPU), ``cpu``, ``cuda`` (the current GPU) or ``cuda:N``. A GPU asked for and
absent is a :class:`DeviceError` (one ``error:`` line from a CLI), never a silent CPU run.
Training precision is Lightning's: ``32`` (full fp32), ``bf16-mixed`` (bfloat16 autocast; CPU and
GPU) and ``16-mixed`` (float16 autocast with loss scaling; CUDA only).

    parser = ArgumentParser()
    add_device_arg(parser)                         # --device auto|cpu|cuda|cuda:N (default auto)
    add_precision_arg(parser)                      # --precision 32|bf16-mixed|16-mixed (default 32)
    args = parser.parse_args()
    device = resolve_device(args.device)           # torch.device("cpu") on a machine without a GPU
    check_precision(args.precision, device)        # 16-mixed on a CPU -> DeviceError
    model.to(device)
    with autocast(device, args.precision):         # sampling / evaluation outside Lightning
        y = model(x.to(device))
    loader = DataLoader(ds, batch_size=64, **loader_kwargs(device))

Models never build a device themselves: they follow their parameters (``x.new_zeros``,
``device=x.device``). Checkpoints hold no device: ``common.pretrained`` saves CPU tensors and loads
on the CPU; the caller moves the model.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from common.errors import InputError

if TYPE_CHECKING:  # torch is imported where it is used: parsing --device never loads it
    import torch

AUTO = "auto"
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:(\d+))$")
_default: str | None = None  # what "auto" means in this process (moe-demo --device); None: detect


class DeviceError(InputError):
    """The requested device or precision is not available on this machine."""


def _syntax(text: str) -> str:
    value = str(text).strip().lower()
    if not _DEVICE_RE.match(value):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")
    return value


def parse_device(text: str) -> str:
    """argparse type: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``. A GPU that this machine does not
    have is refused here, at parse time, before any work starts."""
    value = _syntax(text)
    if value.startswith("cuda"):
        try:
            resolve_device(value)
        except DeviceError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("--device ")) from None
    return value


def cuda_available() -> bool:
    """A CUDA GPU is usable by this torch build (``CUDA_VISIBLE_DEVICES`` respected)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def _no_gpu_reason() -> str:
    import torch

    if not torch.version.cuda:
        return f"this torch {torch.__version__} is a CPU build (see 'make setup GPU=1' in the README)"
    return "no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"


def resolve_device(spec: str | torch.device | None = AUTO) -> torch.device:
    """The ``torch.device`` for ``spec`` (None means ``auto``). ``auto`` is ``cuda`` when a GPU is
    present, else ``cpu``; ``cuda``/``cuda:N`` without that GPU raise :class:`DeviceError`.
    Selecting a GPU also turns on TF32 matmuls where the GPU has them (:func:`configure_backends`)."""
    import torch

    if isinstance(spec, torch.device):
        text = str(spec)
    else:
        text = AUTO if spec is None else str(spec)
    try:
        text = _syntax(text)
    except argparse.ArgumentTypeError as exc:
        raise DeviceError(f"--device: {exc}") from None
    if text == AUTO and _default is not None:
        text = _default
    if text == AUTO:
        device = torch.device("cuda") if cuda_available() else torch.device("cpu")
    elif text == "cpu":
        device = torch.device("cpu")
    else:
        if not cuda_available():
            raise DeviceError(f"--device {text} asked for a GPU but {_no_gpu_reason()}; use --device cpu or auto")
        device = torch.device(text)
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise DeviceError(f"--device {text}: this machine has {count} CUDA GPU(s) (cuda:0..cuda:{count - 1})")
    configure_backends(device)
    return device


def set_default_device(spec: str | None) -> None:
    """Make ``auto`` mean ``spec`` in this process (``moe-demo --device cuda:1`` for every tab);
    None restores detection. The device is checked now (:class:`DeviceError` when absent)."""
    global _default
    if spec is None or _syntax(spec) == AUTO:
        _default = None
        return
    resolve_device(spec)
    _default = _syntax(spec)


def configure_backends(device: torch.device) -> None:
    """Per-device speed settings that do not change CPU results: TF32 matmuls and cuDNN
    convolutions on Ampere and newer GPUs (compute capability >= 8)."""
    import torch

    if device.type != "cuda":
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    if torch.cuda.get_device_capability(index)[0] >= 8:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")


def check_precision(precision: str, device: torch.device) -> str:
    """``precision`` when ``device`` can train in it; :class:`DeviceError` otherwise (``16-mixed``
    needs CUDA; ``bf16-mixed`` needs a GPU with bfloat16 or the CPU)."""
    import torch

    if precision not in PRECISIONS:
        raise DeviceError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "16-mixed" and device.type != "cuda":
        raise DeviceError("--precision 16-mixed needs a CUDA GPU; use bf16-mixed on the CPU")
    if precision == "bf16-mixed" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise DeviceError(f"--precision bf16-mixed: {torch.cuda.get_device_name(device)} has no bfloat16; "
                          "use 16-mixed")
    return precision


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a precision name (None for full fp32)."""
    import torch

    return {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)


@contextlib.contextmanager
def autocast(device: torch.device, precision: str = "32") -> Iterator[None]:
    """``torch.autocast`` for code outside a Lightning fit (sampling, evaluation, benches) in
    ``precision``; a no-op context for ``32``."""
    import torch

    dtype = autocast_dtype(check_precision(precision, device))
    if dtype is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


def trainer_kwargs(device: torch.device, *, world: int = 1) -> dict[str, Any]:
    """Lightning ``Trainer`` arguments (``accelerator``, ``devices``) for one process on ``device``,
    or, under ``torchrun`` (``world > 1``), for this node's ranks: one GPU per rank on CUDA, one
    process per rank on the CPU."""
    import torch

    if device.type == "cuda":
        if world > 1:
            return dict(accelerator="gpu", devices=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))
        index = device.index if device.index is not None else torch.cuda.current_device()
        return dict(accelerator="gpu", devices=[index])
    if world > 1:
        return dict(accelerator="cpu", devices=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))
    return dict(accelerator="cpu", devices=1)


def to_device(obj: Any, device: torch.device) -> Any:
    """``obj`` with every tensor in it on ``device``: tensors, dicts, lists, tuples, dataclasses and
    objects with ``.to`` (a PyG batch), Lightning's ``move_data_to_device``; other values as they are."""
    from lightning.fabric.utilities.apply_func import move_data_to_device

    return move_data_to_device(obj, device)


def loader_kwargs(device: torch.device, workers: int | None = None) -> dict[str, Any]:
    """``DataLoader`` arguments for ``device``: pinned memory and background workers on a GPU
    (``workers`` defaults to min(4, CPUs)), the main process on the CPU (the suite's CPU runs keep
    their exact batch order and do not compete with torch's threads)."""
    if device.type != "cuda":
        return {}
    n = min(4, os.cpu_count() or 1) if workers is None else workers
    return dict(pin_memory=True, num_workers=n, persistent_workers=n > 0)


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--device auto|cpu|cuda|cuda:N`` (default auto) to a (sub)parser."""
    parser.add_argument(
        "--device", type=parse_device, default=AUTO, metavar="auto|cpu|cuda|cuda:N",
        help="where torch runs: auto (a CUDA GPU when present, else the CPU), cpu, cuda or cuda:N (default auto)",
    )


def add_precision_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--precision 32|bf16-mixed|16-mixed`` (default 32) to a training (sub)parser."""
    parser.add_argument(
        "--precision", choices=PRECISIONS, default="32",
        help="training precision: 32 (fp32), bf16-mixed (bfloat16 autocast, CPU or GPU), "
             "16-mixed (float16 autocast, CUDA only) (default 32)",
    )


def describe(device: torch.device) -> str:
    """A human name for reports: ``cpu (N threads)`` or the GPU's product name."""
    import torch

    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return f"cpu ({torch.get_num_threads()} threads)"
