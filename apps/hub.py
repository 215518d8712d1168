"""``moe-demo``: the Gradio hub, one tab for the routing core and one per landed app."""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr

from apps.registry import APPS, CORE
from common.cli import ArgumentParser, cli_main, int_in


def build_hub() -> gr.Blocks:
    """The hub's ``gr.Blocks`` with a tab for the core and each registered app."""
    with gr.Blocks(title="moe-apps demo hub") as hub:
        gr.Markdown("# moe-apps\nFive research applications on one shared Mixture-of-Experts routing core.")
        with gr.Tabs():
            for entry in (CORE, *APPS):
                with gr.Tab(entry.title, id=entry.name):
                    entry.build_tab()
    return hub


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="moe-demo", description="Serve the moe-apps Gradio demo hub.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int_in(1, 65535), default=7860, help="port (default 7860)")
    args = parser.parse_args(argv)
    build_hub().launch(server_name=args.host, server_port=args.port, show_error=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
