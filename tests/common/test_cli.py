import argparse

from common.cli import add_common_args, cli_main
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
