"""Older MoSAIC checkpoints: the config fields and state layouts of earlier config versions.

Config versions: 1 the first ``common.pretrained`` one (0: a ``common.checkpoint`` directory, its
config flat beside ``"model": "MoSAIC"``); 2 drift prediction deleted; 3 the stream repair and the
knobs nobody set deleted; 4 the state split into components (``streaming.state``); 5 the drift
floor; 6 ``n`` learned at fit (the bases' shape) instead of a constructor argument. Every older
model loads and continues its stream as it was trained: its deleted fields are dropped, the drift
floor is off (coefficient 0) and its reference level is the slow level.
"""

from __future__ import annotations

import torch

from common.errors import CheckpointError
from streaming.change import ChangeBuffer, ProvisionalFit
from streaming.experts import ExpertBank, ExpertStats, StreamStats
from streaming.schedule import EpochReset, StepSchedule
from streaming.state import StateComponent

#: config fields deleted in each config version (dropped when an older checkpoint loads): 2 the drift
#: prediction; 3 the stream repair of a defective expert and the knobs nobody set (now module constants
#: at their defaults, or the sublinear schedule's fixed ``tau = 2 r``)
REMOVED_FIELDS_BY_VERSION = {
    2: ("drift_predict", "predict_check", "predict_max_angle"),
    3: ("repair_factor", "tau", "novelty", "spike_factor", "reseed_min", "drift_factor", "reset_check",
        "reset_factor", "fit_shrink", "warm_iters", "provisional_rank", "provisional_accept",
        "provisional_min_ratio", "pretrain_passes", "pretrain_iters", "pretrain_spectral", "pretrain_em"),
}
REMOVED_FIELDS = tuple(f for fields in REMOVED_FIELDS_BY_VERSION.values() for f in fields)


def upgrade_config(config: dict, from_version: int) -> dict | None:
    """The current config (the constructor arguments) of a checkpoint of config version
    ``from_version`` (0: ``common.checkpoint``); None for a version this module does not know."""
    if from_version == 0:
        if config.get("model") != "MoSAIC":
            return None
        config = {k: v for k, v in config.items() if k != "model"}
    elif from_version not in (1, 2, 3, 4, 5):
        return None
    if from_version <= 4:
        config = {"drift_floor": 0.0, **{k: v for k, v in config.items() if k not in REMOVED_FIELDS}}
    return {k: v for k, v in config.items() if k != "n"}  # n: the bases' shape


def upgrade_component_state(state: dict) -> dict:
    """The component state of config version 4 (no drift floor: ``steps`` without ``level_ref``) with
    the reference level set to the slow level; a current state unchanged."""
    steps, expert_stats = state.get("steps"), state.get("expert_stats")
    if (isinstance(steps, dict) and "level_ref" not in steps and "t" in steps
            and isinstance(expert_stats, dict) and "level_slow" in expert_stats):
        return {**state, "steps": {**steps, "level_ref": expert_stats["level_slow"]}}
    return state


def load_flat_state(tensors: dict[str, torch.Tensor], state: dict, K: int, source: str) -> dict[str, StateComponent]:
    """The components (``streaming.model.COMPONENTS``) of a checkpoint in the flat layout of config
    versions <= 3 (older fields default as they were trained); CheckpointError when one is missing."""
    try:
        arr = {k: v.numpy().copy() for k, v in tensors.items()}
        bank = ExpertBank(bases=arr["bases"], ridge=float(state["ridge"]))
        expert_stats = ExpertStats(
            level=arr["level"], level_slow=arr["level_slow"], mature=arr["mature"].astype(bool),
            n_updates=arr["n_updates"], long_counts=arr["long_counts"], last_update=arr["last_update"],
            reseeded_at=arr["reseeded_at"])
        steps = StepSchedule(t=arr["t"], level_ref=arr["level_slow"].copy())  # no drift floor before 5
        epochs = EpochReset.new(K)
        epochs.epoch = int(state["epoch"])
        if "reset_pending" in arr:  # older checkpoints: no pending epoch-reset decision
            epochs.pending = arr["reset_pending"].astype(bool)
            epochs.sum, epochs.count = arr["reset_sum"], arr["reset_count"]
        stream_stats = StreamStats(
            n_seen=int(state["n_seen"]), mean_m=float(state["mean_m"]),
            entry_energy=float(state.get("entry_energy", 0.0)),  # older checkpoints: no floor
            pretrained=bool(state["pretrained"]))
        buffer_t = state["buffer_t"]
        B = state.get("buffer_len", len(buffer_t))
        change_buffer = ChangeBuffer(
            idx=[arr[f"buffer_idx_{j}"] for j in range(B)], values=[arr[f"buffer_val_{j}"] for j in range(B)],
            stamps=[int(t) for t in buffer_t[:B]], next_try=int(state["next_try"]),
            last_novel=int(state.get("last_novel", -(10**12))), reseeds=[tuple(x) for x in state["reseeds"]])
        noise = state.get("provisional_noise")
        provisional_fit = ProvisionalFit(
            basis=arr.get("provisional"), at=int(state.get("provisional_at", 0)),
            loadings=arr.get("provisional_loadings"), noise=None if noise is None else float(noise),
            si_stamps=arr.get("soft_impute_stamps"), si_Z=arr.get("soft_impute_Z"))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"incomplete MoSAIC checkpoint {source}: {exc}") from exc
    return {"bank": bank, "expert_stats": expert_stats, "steps": steps, "epochs": epochs,
            "stream_stats": stream_stats, "change_buffer": change_buffer, "provisional_fit": provisional_fit}
