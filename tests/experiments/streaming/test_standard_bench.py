"""The in-house benchmark's offline reference (experiments.streaming.standard_bench)."""

from experiments.streaming.standard_bench import offline_kss
from streaming.data import StreamConfig, generate_stream
from streaming.evaluate import summarize


def test_offline_kss_and_summary_columns():
    cfg = StreamConfig(n=20, r=2, K=3, obs_frac=0.6, noise_std=0.01, epochs=1, samples_per_epoch=300,
                       drift="none", source_per_class=10, seed=5)
    s = generate_stream(cfg)
    completed, routes, bases = offline_kss(s.values, 3, 2, restarts=2)
    row = summarize(s, completed, routes)
    assert row["nrmse"] < 0.1 and row["routing_acc"] > 0.95
