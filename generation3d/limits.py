"""Bounds of the ``moca`` commands, checked before any work starts (README "CLI", "Limits").

Two kinds:

- **Maxima** (``int_in(1, MAX_...)`` argparse types): a value beyond is never a real request (a
  thousand sampling steps already integrate the flow far past any visible change), so it is
  refused at parse time with the maximum in the message.
- **Estimates** checked against a budget, refused with the estimate in the message unless the
  user passes ``--force``: the memory ``build-data`` holds for the surface points
  (``dataset_bytes``), the optimizer steps of ``train-ae`` / ``train`` (``check_steps``: more than
  ``STEPS_WITHOUT_FORCE`` is 40x the README's recipes), the generator passes of ``eval``
  (``check_eval_work``), a generator's training state and scores (``check_generator_memory``) and
  the score matrix of full attention in ``bench`` (``attention_bytes``).
"""

from __future__ import annotations

from common.cli import int_in
from common.errors import InputError
from common.limits import gib

MAX_POINTS = 65_536  # surface points per part (build-data --points)
MAX_PER_CATEGORY = 100_000  # procedural shapes per category
MAX_SCENES = 10_000
MAX_SCENE_PARTS = 4_096  # parts of one scene; also the largest --max-parts
MAX_TRAIN_STEPS = 10_000_000  # with --force; STEPS_WITHOUT_FORCE without
STEPS_WITHOUT_FORCE = 100_000
MAX_SAMPLING_STEPS = 1_000  # Euler steps of one sample
MAX_EVAL_SHAPES = 10_000  # eval --n
EVAL_PASSES_WITHOUT_FORCE = 100_000  # eval --n x --steps without --force
MAX_BATCH = 4_096
MAX_LATENTS = 256  # latent tokens per part, and latent width
MAX_WIDTH = 4_096  # --d-model
MAX_LAYERS = 128
MAX_TOP_K = 1_024
MAX_COMPRESSED = 64
MAX_THREADS = 256
MAX_BENCH_PARTS = 4_096
MAX_BENCH_TOKENS = 1_024
MAX_REPEATS = 1_000
MEMORY_BUDGET_BYTES = 8 * 2**30  # above this an estimate needs --force

OBJECT_PARTS_BOUND = 24  # the procedural makers give at most 19 parts per object
SCENE_EXTRA_PARTS = OBJECT_PARTS_BOUND  # a procedural scene stops at the first object past its minimum
BYTES_PER_POINT = 24 + 12  # float64 sample + float32 copy while sampling, two float32 copies when written
SAMPLE_BYTES_PER_POINT = 64  # trimesh.sample_surface's transient arrays for one part
SWEETHOME3D_ITEMS = 400  # the Debian catalogue's furniture items (an upper bound of the usable ones)


def bounded(hi: int, lo: int = 1):
    """argparse type: an integer in ``[lo, hi]`` (the maximum is in the refusal)."""
    return int_in(lo, hi)


def dataset_bytes(n_parts: int, n_points: int) -> int:
    """Estimated peak memory of building a dataset of ``n_parts`` parts with ``n_points`` surface
    points each: the finished points and their written copy, plus one part's sampling arrays."""
    return n_parts * n_points * BYTES_PER_POINT + n_points * SAMPLE_BYTES_PER_POINT


def check_memory(estimate: int, what: str, force: bool) -> None:
    """InputError naming ``estimate`` when it is over ``MEMORY_BUDGET_BYTES`` and not ``force``."""
    if estimate > MEMORY_BUDGET_BYTES and not force:
        raise InputError(f"{what} needs about {gib(estimate)} of memory (estimate), over the "
                         f"{gib(MEMORY_BUDGET_BYTES)} budget; lower it, or pass --force if this machine has the memory")


def procedural_parts(per_category: int, n_categories: int, n_scenes: int, scene_parts: int) -> int:
    """Upper bound of the parts of a procedural dataset."""
    return per_category * n_categories * OBJECT_PARTS_BOUND + n_scenes * (scene_parts + SCENE_EXTRA_PARTS)


def check_steps(steps: int, force: bool, flag: str = "--steps") -> None:
    """InputError when ``steps`` is over ``STEPS_WITHOUT_FORCE`` without ``force``."""
    if steps > STEPS_WITHOUT_FORCE and not force:
        raise InputError(f"{flag} {steps} is over {STEPS_WITHOUT_FORCE} optimizer steps (40x the README's recipes, "
                         "days on a CPU); pass --force if you mean it")


def check_eval_work(n_shapes: int, steps: int, force: bool) -> None:
    """InputError (unless ``force``) when ``eval`` would run more than ``EVAL_PASSES_WITHOUT_FORCE``
    generator passes (shapes x sampling steps; 640 by default)."""
    if n_shapes * steps > EVAL_PASSES_WITHOUT_FORCE and not force:
        raise InputError(f"--n {n_shapes} x --steps {steps} is {n_shapes * steps} generator passes, over "
                         f"{EVAL_PASSES_WITHOUT_FORCE} (hours on a CPU); lower them, or pass --force if you mean it")


def check_generator_memory(d_model: int, n_layers: int, n_heads: int, max_parts: int, tokens_per_part: int,
                           force: bool) -> None:
    """Refuse (unless ``force``) a generator whose training needs more than ``MEMORY_BUDGET_BYTES``:
    its weights, gradients and AdamW state (16 bytes per parameter, ``12 * d_model**2`` parameters
    per layer) plus one layer's full-attention scores of a shape of ``max_parts`` parts (the dense
    phase; fused kernels need less, so this errs high)."""
    n_bytes = 16 * 12 * d_model**2 * n_layers + attention_bytes(max_parts * tokens_per_part, n_heads)
    check_memory(n_bytes, f"a generator of width {d_model}, {n_layers} layers and up to {max_parts} parts of "
                          f"{tokens_per_part} tokens", force)


def attention_bytes(n_tokens: int, n_heads: int = 4) -> int:
    """Bytes of full attention's float32 score matrix over ``n_tokens`` tokens (what a non-fused
    kernel materialises, the bench's ``attn_matrix_mb`` column)."""
    return 4 * n_heads * n_tokens * n_tokens


def check_build_memory(source: str, n_points: int, *, per_category: int, scenes: int, scene_parts: int,
                       scene_max_parts: int, max_parts: int, force: bool) -> None:
    """Refuse (unless ``force``) a ``build-data`` run whose surface points would not fit
    ``MEMORY_BUDGET_BYTES``: an upper bound of the parts of ``source`` times ``dataset_bytes``."""
    if source == "procedural":
        n_parts = procedural_parts(per_category, 4, scenes, scene_parts)
    elif source in ("sweethome3d", "scenes"):
        n_parts = SWEETHOME3D_ITEMS * max_parts + (scenes * scene_max_parts if source == "scenes" else 0)
    else:
        from pathlib import Path

        from generation3d.sources import folder_entries

        n_parts = len(folder_entries(Path(source))) * max_parts
    check_memory(dataset_bytes(n_parts, n_points), f"--points {n_points} over up to {n_parts} parts", force)


def check_bench_memory(suite: str, parts: tuple[int, ...], tokens: tuple[int, ...], force: bool) -> None:
    """Refuse P over ``MAX_BENCH_PARTS`` or T over ``MAX_BENCH_TOKENS``, and (unless ``force``)
    a ``bench`` suite whose largest full-attention score matrix (``attention_bytes``) is over
    ``MEMORY_BUDGET_BYTES``; the sizes suite counts the largest size's T and heads."""
    if max(parts) > MAX_BENCH_PARTS or max(tokens, default=1) > MAX_BENCH_TOKENS:
        raise InputError(f"bench --parts must be at most {MAX_BENCH_PARTS} and --tokens at most {MAX_BENCH_TOKENS}, "
                         f"got {max(parts)} and {max(tokens, default=1)}")
    if suite == "sizes":
        from generation3d.model import MODEL_SIZES

        n_bytes = max(attention_bytes(max(parts) * s.tokens_per_part, s.n_heads) for s in MODEL_SIZES.values())
    else:
        n_bytes = attention_bytes(max(parts) * max(tokens))
    check_memory(n_bytes, f"bench --suite {suite} with P = {max(parts)}", force)


def check_build_options(source: str, out, furniture_dir, scenes: int, scene_parts: int, scene_max_parts: int) -> list:
    """``build-data``'s source and scene options (InputError naming the bad one); returns its inputs."""
    from pathlib import Path

    if source not in ("procedural", "sweethome3d", "scenes"):
        if not Path(source).is_dir():
            raise InputError(f"--source must be procedural, sweethome3d, scenes or an existing folder; {source!r} is none")
        if Path(out).resolve().is_relative_to(Path(source).resolve()):
            raise InputError(f"--out {out} is inside the source folder {source}; choose another path")
    if source == "scenes" and not 1 <= scene_parts <= scene_max_parts:
        raise InputError(f"--scene-parts ({scene_parts}) must not exceed --scene-max-parts ({scene_max_parts})")
    if source == "scenes" and scenes < 1:
        raise InputError("--scenes must be at least 1 for --source scenes")
    return [furniture_dir] if source in ("sweethome3d", "scenes") else [] if source == "procedural" else [source]
