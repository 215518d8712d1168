"""The shared bad-input checks (``tests/bad_input.py``) fail where they must."""

from __future__ import annotations

import signal

import pytest

from apps.hub import main as hub_main
from tests.bad_input import assert_refused, assert_stops_on_signal

LOOP = ("from common.cli import cli_main\nimport sys, time\n@cli_main\ndef main():\n"
        "    print('ready', file=sys.stderr, flush=True)\n    while True:\n        time.sleep(0.05)\n"
        "raise SystemExit(main())\n")


def test_assert_refused_accepts_a_one_line_error_and_rejects_success(tmp_path):
    assert assert_refused(hub_main, ["--port", "0"], tmp_path, match="--port").startswith("error: ")
    with pytest.raises(AssertionError):
        assert_refused(lambda argv: 0, [], tmp_path)
    with pytest.raises(AssertionError, match="still running"):
        assert_refused(lambda argv: __import__("time").sleep(5), [], tmp_path, timeout_s=0.5)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_cli_loop_stops_on_a_signal(tmp_path, sig):
    assert_stops_on_signal(["-c", LOOP], tmp_path, sig, ready="ready", within_s=10)


def test_a_process_that_ignores_the_signal_fails_the_check(tmp_path):
    ignore = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ready', flush=True, file=__import__('sys').stderr)\ntime.sleep(30)\n"
    with pytest.raises(AssertionError, match="still running"):
        assert_stops_on_signal(["-c", ignore], tmp_path, signal.SIGINT, ready="ready", within_s=2)
