"""MixScentNet: mixture odour prediction with Mordred pretraining and a mixture-as-graph GATv2.

Modules: ``data`` (loading, validation, splits), ``blends`` (the blend-pair data), ``features``
(RDKit graphs, Mordred cache, fingerprints), ``molecules`` (featurize, molecule-level inputs),
``model`` (molecule encoder, mixture GATv2, distance / label heads), ``train`` (``pretrain``,
``fit``), ``labels`` (label-network training), ``fitting`` (the Lightning plumbing they share),
``mixture_index`` (mixtures as index lists, keyed predictions), ``encoder`` (the saved encoder),
``predictor`` (the product model), ``inference`` / ``onnx_export`` (torch-free prediction),
``set_features`` / ``set_models`` (set regressors), ``minimol``, ``evaluate`` (metrics, protocols),
``baselines`` (RF on pair features, Snitz angle), ``white``, ``cli``, ``bench``, ``quick``, ``demo``.
"""
