"""``moe-demo``: the Gradio hub, one tab for the routing core and one per landed app.

Requests are served by Gradio's queue, up to ``--concurrency`` at once for each tab action (event
handlers run in worker threads; torch releases the GIL; a model shared by requests is guarded in
its tab). Checkpoint paths typed into a tab must lie inside the allowed
roots of ``common.allowlist`` (extend them with ``--allow-root``). On a non-loopback ``--host``
the hub warns on stderr; ``--auth``/``--auth-file`` turn on Gradio's login.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr

from apps.registry import APPS, CORE
from common.allowlist import ROOTS_ENV, add_allowed_roots
from common.cli import ArgumentParser, cli_main, int_in, positive_int
from common.device import add_device_arg, set_default_device
from common.errors import InputError

DEFAULT_CONCURRENCY = 4


def build_hub(concurrency: int = DEFAULT_CONCURRENCY) -> gr.Blocks:
    """The hub's ``gr.Blocks`` with a tab for the core and each registered app; its queue runs up
    to ``concurrency`` requests of each event (button action) at once."""
    with gr.Blocks(title="moe-apps demo hub") as hub:
        gr.Markdown("# moe-apps\nFive research applications on one shared Mixture-of-Experts routing core.")
        with gr.Tabs():
            for entry in (CORE, *APPS):
                with gr.Tab(entry.title, id=entry.name):
                    entry.build_tab()
    return hub.queue(default_concurrency_limit=concurrency)


def is_loopback(host: str) -> bool:
    """True when ``host`` (an IP or ``localhost``) only accepts connections from this machine;
    other names and ``0.0.0.0``/``::`` (every interface) are not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_auth(value: str, source: str = "--auth") -> tuple[str, str]:
    """``"user:password"`` -> ``(user, password)`` (split at the first ``:``); raises
    ``InputError`` when the user or the password is empty or the ``:`` is missing."""
    user, sep, password = value.partition(":")
    if not sep or not user.strip() or not password:
        raise InputError(f"{source}: expected user:password with a non-empty user and password")
    return user.strip(), password


def read_auth_file(path: str | os.PathLike) -> list[tuple[str, str]]:
    """``(user, password)`` pairs of an auth file: one ``user:password`` per line; blank lines and
    lines starting with ``#`` are skipped. Raises ``InputError`` on an unreadable, non-UTF-8 or
    empty file or a malformed line (named by number, never echoing the password)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"--auth-file {path} is not UTF-8 text") from exc
    except OSError as exc:
        raise InputError(f"--auth-file {path}: cannot read it ({exc.strerror or exc})") from exc
    pairs = [
        parse_auth(line.rstrip("\r"), f"--auth-file {path} line {i}")
        for i, line in enumerate(text.split("\n"), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not pairs:
        raise InputError(f"--auth-file {path} has no user:password line")
    return pairs


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="moe-demo", description="Serve the moe-apps Gradio demo hub.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int_in(1, 65535), default=7860, help="port (default 7860)")
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        default=DEFAULT_CONCURRENCY,
        help=f"requests of each tab action served at once (default {DEFAULT_CONCURRENCY}); the rest wait "
        "in the queue",
    )
    parser.add_argument(
        "--allow-root",
        action="append",
        default=[],
        metavar="DIR",
        help="also allow checkpoint paths under DIR in the tabs (repeatable; besides results/, the cache "
        f"directory and ${ROOTS_ENV})",
    )
    parser.add_argument(
        "--auth",
        action="append",
        default=[],
        metavar="USER:PASSWORD",
        help="require this login (repeatable; visible in the process list, --auth-file is not); use a "
        "login whenever --host is not loopback",
    )
    parser.add_argument("--auth-file", metavar="FILE", help="logins, one user:password per line")
    add_device_arg(parser)
    return parser


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    auth = [parse_auth(a) for a in args.auth]
    if args.auth_file:
        auth += read_auth_file(args.auth_file)
    add_allowed_roots(*args.allow_root)
    set_default_device(args.device)  # every tab's "auto" is this device
    if not is_loopback(args.host):
        login = "login required" if auth else "no login: anyone who reaches it can use it; pass --auth"
        print(
            f"warning: --host {args.host} makes the hub reachable from the network ({login})",
            file=sys.stderr,
        )
    build_hub(args.concurrency).launch(
        server_name=args.host, server_port=args.port, show_error=True, auth=auth or None
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
