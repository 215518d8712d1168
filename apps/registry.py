"""The apps that have landed: their demo tab and quick-run entry points.

An app is listed here only once its ``demo.build_tab`` and ``quick.run_quick`` work end to end;
there are no placeholder tabs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class AppEntry:
    name: str  # short id, also the CSV name in results/demo/
    title: str  # tab title
    package: str  # python package with demo.py and quick.py

    def build_tab(self):
        return importlib.import_module(f"{self.package}.demo").build_tab()

    def run_quick(self, *args, **kwargs):
        return importlib.import_module(f"{self.package}.quick").run_quick(*args, **kwargs)


CORE = AppEntry("moe", "MoE core", "apps.core")

APPS: list[AppEntry] = [
    AppEntry("olfaction", "Olfaction (MixScentNet)", "olfaction"),
    AppEntry("retrieval", "Retrieval (MoA³CIR)", "retrieval"),
    AppEntry("generation3d", "3D parts (MoCA)", "generation3d"),
    AppEntry("vision", "Vision (MoH diffusion)", "vision"),
    AppEntry("streaming", "Streaming (MoSAIC)", "streaming"),
]
