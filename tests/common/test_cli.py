import argparse

import pytest

from common.cli import add_common_args, cli_main, whole_number
from common.errors import InputError


def test_cli_main_turns_input_errors_into_exit_2(capsys):
    @cli_main
    def bad():
        raise InputError("invalid SMILES 'C1CC' at position 0")

    assert bad() == 2
    assert capsys.readouterr().err.strip() == "error: invalid SMILES 'C1CC' at position 0"


def test_cli_main_passes_return_codes():
    assert cli_main(lambda: None)() == 0
    assert cli_main(lambda: 3)() == 3


def test_common_args():
    p = argparse.ArgumentParser()
    add_common_args(p, out_default="results")
    a = p.parse_args(["--seed", "4"])
    assert (a.seed, a.out, a.data_dir) == (4, "results", None)


def test_subcommand_main_dispatches_and_reports_errors(capsys):
    from common.cli import subcommand_main

    def build():
        p = argparse.ArgumentParser()
        sub = p.add_subparsers(dest="cmd", required=True)
        sub.add_parser("ok").set_defaults(fn=lambda a: 0)
        sub.add_parser("three").set_defaults(fn=lambda a: 3)

        def bad(a):
            raise InputError("no such thing")

        sub.add_parser("bad").set_defaults(fn=bad)
        return p

    main = subcommand_main(build)
    assert main(["ok"]) == 0 and main(["three"]) == 3
    assert main(["bad"]) == 2 and capsys.readouterr().err.strip() == "error: no such thing"


def test_number_types_accept_the_interval_and_refuse_the_rest():
    from common.cli import float_in, fraction, int_in, int_list, positive_float, positive_int, probability

    def refused(parse, text):
        try:
            parse(text)
        except argparse.ArgumentTypeError:
            return True
        return False

    assert positive_int("3") == 3 and all(refused(positive_int, t) for t in ("0", "-1", "1.5", "x", ""))
    assert int_in(2, 4)("4") == 4 and refused(int_in(2, 4), "5") and refused(int_in(2, 4), "1")
    assert positive_float("1e-4") == 1e-4
    assert all(refused(positive_float, t) for t in ("0", "-1", "nan", "inf", "-inf", "x"))
    assert fraction("1") == 1.0 and refused(fraction, "0") and refused(fraction, "1.0001")
    assert probability("0") == 0.0 and probability("1") == 1.0 and refused(probability, "-0.1")
    half_open = float_in(0.0, 1.0, hi_open=True)
    assert half_open("0") == 0.0 and refused(half_open, "1")
    assert int_list(0)("0, 2,8") == (0, 2, 8) and refused(int_list(1), "4,0") and refused(int_list(1), ",")


def test_parser_errors_are_one_line_and_exit_2(capsys):
    from common.cli import ArgumentParser, positive_int, subcommand_main

    def build():
        p = ArgumentParser(prog="tool")
        sub = p.add_subparsers(dest="cmd", required=True)
        s = sub.add_parser("run")
        s.add_argument("--steps", type=positive_int, default=1)
        s.set_defaults(fn=lambda a: 0)
        return p

    main = subcommand_main(build)
    assert main(["run", "--steps", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "error: argument --steps: must be an integer >= 1, got '0' (see 'tool run --help')\n"
    assert main(["walk"]) == 2 and capsys.readouterr().err.count("\n") == 1
    assert main(["run", "--steps", "2"]) == 0


def test_sigterm_kills_a_process_forked_inside_a_cli_outright():
    """A worker forked while a CLI runs (e.g. a multiprocessing pool) inherits the CLI's SIGTERM
    handler; ``Pool.terminate()`` must still end it by the signal, not by unwinding Python code in
    the child (which can block in inherited finalizers and keep the parent's pipes open)."""
    import os
    import signal
    import time

    seen = {}

    @cli_main
    def run() -> int:
        pid = os.fork()
        if pid == 0:  # the child: wait to be terminated
            time.sleep(30)
            os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        seen["status"] = os.waitpid(pid, 0)[1]
        return 0

    assert run() == 0
    assert os.WIFSIGNALED(seen["status"]) and os.WTERMSIG(seen["status"]) == signal.SIGTERM


@pytest.mark.parametrize("value, expected", [(3, 3), (3.0, 3), ("7", 7), (" 0 ", 0), (10, 10)])
def test_whole_number_takes_what_a_page_sends(value, expected):
    assert whole_number(value, "seed", 0, 10) == expected


@pytest.mark.parametrize("value", [2.5, float("nan"), float("inf"), 1e30, -1, 11, True, None, "three", "", [3]])
def test_whole_number_refuses_with_what_to_enter(value):
    with pytest.raises(InputError, match=r"^seed must be a whole number from 0 to 10, got "):
        whole_number(value, "seed", 0, 10)
