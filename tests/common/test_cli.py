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
