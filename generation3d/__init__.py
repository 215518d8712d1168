"""MoCA: compositional 3D generation with component-level sparse attention.

Modules: ``data`` (procedural part-labelled dataset, GLB/OBJ loader), ``attention`` (MoCA and the
baseline attentions), ``model`` (part autoencoder, flow transformer), ``train``, ``evaluate``
(metrics), ``pipeline`` (sampling, save/load), ``export`` (GLB/PLY/OBJ, previews), ``bench``,
``cli`` (``moca``), ``quick`` (``make demo``), ``demo`` (Gradio tab).
"""
