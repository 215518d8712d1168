"""``mixscent``'s device and precision options: the names the parser spells out agree with the
modules they stand for, and every command hands ``--device`` / ``--precision`` down to the Python
API unchanged."""

from __future__ import annotations

import pytest

from olfaction import cli


class Called(Exception):
    """Raised by a stand-in for the API to end the command once its arguments are seen."""


def test_parser_names_agree_with_the_api():
    from olfaction.bench import SUITES

    assert cli.BENCH_SUITES == tuple(SUITES)


@pytest.mark.parametrize("verb, target, extra", [
    ("pretrain", "olfaction.encoder.pretrain_encoder", ["--encoder", "{tmp}/enc"]),
    ("bench", "olfaction.bench.run_bench", ["--out", "{tmp}/b.json"]),
    ("quick", "olfaction.quick.run_quick", ["--out", "{tmp}/q"]),
    ("train", "olfaction.predictor.MixturePredictor.fit", ["--out", "{tmp}/m"]),
    ("eval", "olfaction.predictor.MixturePredictor.fit", []),
])
def test_training_commands_pass_device_and_precision_down(verb, target, extra, tmp_path, monkeypatch):
    seen = {}

    def stand_in(*args, **kwargs):
        seen.update(kwargs)
        raise Called

    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(f"{module}.{name}", stand_in)
    monkeypatch.setattr("olfaction.encoder.load_encoder", lambda path: None)  # bench reads an encoder
    monkeypatch.setattr(cli, "resolve_data_dir", lambda value: tmp_path)
    monkeypatch.setattr(cli, "_split", lambda data_dir, value, n_rows: None)  # train / eval read no files
    monkeypatch.setattr("olfaction.data.load_pairs", lambda data_dir: [])
    monkeypatch.setattr("olfaction.data.load_gslf", lambda data_dir: None)
    args = cli.build_parser().parse_args(
        [verb, "--device", "cpu", "--precision", "bf16-mixed", *(a.format(tmp=tmp_path) for a in extra)])
    with pytest.raises(Called):
        args.fn(args)
    assert (seen["device"], seen["precision"]) == ("cpu", "bf16-mixed")


def test_device_defaults_to_auto_and_precision_to_32():
    args = cli.build_parser().parse_args(["train", "--out", "m"])
    assert (args.device, args.precision) == ("auto", "32")
    assert cli.build_parser().parse_args(["predict", "--model", "m", "--device", "CPU"]).device == "cpu"


def test_onnx_backend_refuses_a_gpu_before_reading_the_model(tmp_path):
    from common.errors import InputError

    with pytest.raises(InputError, match="--backend onnx runs on the CPU"):
        cli.load_for_predict(tmp_path / "missing", backend="onnx", device="cuda")
