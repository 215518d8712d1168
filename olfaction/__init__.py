"""MixScentNet: mixture odour prediction with Mordred pretraining and a mixture-as-graph GATv2.

Modules: ``data`` (loading, validation, splits), ``features`` (RDKit graphs, Mordred cache,
pooled descriptors), ``model`` (molecule encoder, mixture GATv2, distance / label heads),
``train`` (pretraining and fitting), ``evaluate`` (metrics, bootstrap CI), ``baselines``
(RF on pair features, Snitz angle distance), ``cli``, ``bench``, ``quick``, ``demo``.
"""
