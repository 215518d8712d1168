"""MoSAIC: online matrix completion on a drifting union of subspaces (see streaming/README.md)."""

from streaming.data import StreamConfig, generate_stream, load_stream, save_stream
from streaming.model import MoSAIC

__all__ = ["MoSAIC", "StreamConfig", "generate_stream", "load_stream", "save_stream"]
