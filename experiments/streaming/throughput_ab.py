"""Same-run A/B of MoSAIC's per-sample speed: the code of another checkout against this one.

``python -m experiments.streaming.throughput_ab OLD_ROOT [--rounds 16] [--config 100-10-10]``

``OLD_ROOT`` is a directory holding the old ``streaming`` package (e.g. ``git archive HEAD~1 streaming |
tar -x -C /tmp/old``). The stream is the one of ``mosaic bench --throughput`` (2 epochs, one subspace
replaced at mid-stream, stream seed 1000, the bench's observed fraction), pretrained once by this
checkout's ``MoSAIC(seed=0)`` and handed to both versions by pickle. Each round times
``process`` on a fresh copy of each version's model (CPU time, one thread), alternating which goes
first; prints both versions' minimum and median µs per sample and the paired old/new ratio, after
checking that both give the same completions and routes. On a shared machine only the ratio means
something.
"""
import argparse
import copy
import pickle
import sys
import time
from pathlib import Path

import numpy as np

ROOT = str(Path(__file__).resolve().parents[2])


def _import_streaming(path: str):
    """``streaming.model`` imported from ``path`` (every ``streaming`` module imported before is dropped)."""
    for name in [m for m in sys.modules if m == "streaming" or m.startswith("streaming.")]:
        del sys.modules[name]
    sys.path.insert(0, path)
    try:
        import streaming.model as model
    finally:
        sys.path.remove(path)
    if not model.__file__.startswith(str(Path(path).resolve())):
        raise SystemExit(f"streaming was imported from {model.__file__}, not from {path}")
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old_root")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--config", default="100-10-10")
    a = p.parse_args()
    _import_streaming(ROOT)
    from experiments.streaming.standard_bench import OBS_FRAC
    from streaming.data import STANDARD_CONFIGS, StreamConfig, generate_stream
    from streaming.model import MoSAIC

    n, r, K = STANDARD_CONFIGS[a.config]
    stream = generate_stream(StreamConfig(n=n, r=r, K=K, obs_frac=OBS_FRAC.get(a.config, 0.4), drift="abrupt",
                                          epochs=2, samples_per_epoch=2000, seed=1000))
    blob = pickle.dumps(MoSAIC(r, K, seed=0).fit(stream.source_values))
    models = {}
    for label, path in (("old", str(Path(a.old_root).resolve())), ("new", ROOT)):
        _import_streaming(path)
        models[label] = pickle.loads(blob)  # resolves the classes of the version just imported
    outs = {k: copy.deepcopy(m).process(stream.values, epoch=stream.epoch) for k, m in models.items()}
    print("completions max |old - new|:", float(np.abs(outs["old"][0] - outs["new"][0]).max()),
          "routes identical:", bool((outs["old"][1] == outs["new"][1]).all()))
    T = stream.values.shape[0]
    us: dict[str, list[float]] = {"old": [], "new": []}
    for i in range(a.rounds):
        for label in ("old", "new") if i % 2 == 0 else ("new", "old"):
            m = copy.deepcopy(models[label])
            c0 = time.process_time()
            m.process(stream.values, epoch=stream.epoch)
            us[label].append((time.process_time() - c0) / T * 1e6)
    for label, v in us.items():
        print(f"{label}: µs/sample min {min(v):.1f} median {float(np.median(v)):.1f} ({1e6 / min(v):,.0f} samples/s at the min)")
    ratio = np.array(us["old"]) / np.array(us["new"])
    print(f"old/new, paired rounds: median {float(np.median(ratio)):.3f}; of the minima {min(us['old']) / min(us['new']):.3f}")


if __name__ == "__main__":
    main()
