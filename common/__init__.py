"""Plumbing shared by every app: errors, data directory, seeding, atomic I/O, checkpoints,
training loop, CLI conventions and reports."""
