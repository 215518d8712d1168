"""MoA³CIR: e-commerce composed image retrieval with item descriptions (see README.md)."""
