"""MoCA: compositional 3D generation with component-level sparse attention.

Modules: ``data`` (dataset format), ``shapes`` (procedural shapes), ``meshes`` (mesh files),
``geometry`` (box frames), ``sources`` / ``furniture`` / ``scenes`` (real furniture, rooms),
``attention`` and ``kernels`` (MoCA, the baselines, their kernels), ``model`` (part autoencoder,
flow transformer, sizes), ``train`` (``pretrain``, ``fit``), ``sampling`` (``MoCAPipeline``),
``evaluate`` (metrics), ``classifier``, ``export`` / ``render``, ``bench``, ``cli`` (``moca``),
``quick`` (``make demo``), ``demo`` (Gradio tab), ``release`` (shipped models' report).

Importing the package registers its shipped model types (``model``), so ``common.shipped`` and
``common.pretrained.load_pretrained`` load ``moca-furniture`` by name after ``import generation3d``.
"""

import generation3d.model  # noqa: F401  (registers PartAutoencoder, PartFlowTransformer, PipelineCheckpoint)
