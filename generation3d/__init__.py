"""MoCA: compositional 3D generation with component-level sparse attention.

Modules: ``data`` (dataset format), ``shapes`` (procedural shapes), ``meshes`` (mesh files),
``geometry`` (box frames), ``sources`` / ``furniture`` / ``scenes`` (real furniture, rooms),
``attention`` and ``kernels`` (MoCA, the baselines, their kernels), ``model`` (part autoencoder,
flow transformer, sizes), ``train`` (``pretrain``, ``fit``), ``sampling`` (``MoCAPipeline``),
``evaluate`` (metrics), ``classifier``, ``export`` / ``render``, ``bench``, ``cli`` (``moca``),
``quick`` (``make demo``), ``demo`` (Gradio tab), ``release`` (shipped models' report).
"""
