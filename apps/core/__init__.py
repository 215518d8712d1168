"""Demo tab and quick run of the shared routing core itself."""
