"""Research scripts beside the product: sweeps, bounds, ceilings, validation choices (see README.md)."""
