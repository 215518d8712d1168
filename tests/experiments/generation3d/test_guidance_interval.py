"""The interval-guidance wrapper: guidance on every step equals plain CFG, on no step equals no guidance."""

import numpy as np

from experiments.generation3d.guidance_interval import IntervalGuidance
from generation3d.pipeline import MoCAPipeline
from tests.generation3d.conftest import tiny_data, tiny_pipeline  # noqa: F401  (fixtures)


def test_interval_guidance_limits(tiny_pipeline):  # noqa: F811
    pipe = MoCAPipeline.load(tiny_pipeline)
    gen = pipe.gen
    plain = pipe.sample("chair", 5, seed=1, steps=4, guidance=3.0)[0].points
    none = pipe.sample("chair", 5, seed=1, steps=4, guidance=1.0)[0].points
    pipe.gen = IntervalGuidance(gen, 0.0, 1.0)
    np.testing.assert_allclose(pipe.sample("chair", 5, seed=1, steps=4, guidance=3.0)[0].points, plain, atol=1e-6)
    pipe.gen = IntervalGuidance(gen, 2.0, 3.0)  # sigma never in [2, 3]
    np.testing.assert_allclose(pipe.sample("chair", 5, seed=1, steps=4, guidance=3.0)[0].points, none, atol=1e-6)
    pipe.gen = IntervalGuidance(gen, 0.6, 1.0)  # guided early steps only: between the two
    mixed = pipe.sample("chair", 5, seed=1, steps=4, guidance=3.0)[0].points
    assert not np.allclose(mixed, plain) and not np.allclose(mixed, none)
