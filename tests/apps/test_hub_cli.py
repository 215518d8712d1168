"""``moe-demo`` options: host warning, auth parsing, concurrency and allowed roots reach Gradio.

``gr.Blocks.launch`` is replaced by a recorder here (the real launch blocks until interrupted);
the served hub itself is exercised in test_hub_load.py and the browser tests."""

import gradio as gr
import pytest

from apps import hub
from common.allowlist import check_allowed_path, clear_allowed_roots
from common.errors import InputError


@pytest.fixture()
def launched(monkeypatch, tmp_path):
    """Runs ``hub.main`` with a one-button Blocks and a recording launch; returns the launches."""
    calls = []

    def small_hub(concurrency):
        with gr.Blocks() as blocks:
            gr.Button("x")
        blocks.queue(default_concurrency_limit=concurrency)
        calls.append({"concurrency": concurrency})
        return blocks

    def record_launch(self, **kwargs):
        calls[-1].update(kwargs, blocks=self)

    monkeypatch.setattr(hub, "build_hub", small_hub)
    monkeypatch.setattr(gr.Blocks, "launch", record_launch)
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    clear_allowed_roots()
    yield calls
    clear_allowed_roots()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org"])
def test_non_loopback_host_warns_on_stderr(launched, capsys, host):
    assert hub.main(["--host", host]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "reachable from the network" in err and "--auth" in err
    assert launched[0]["server_name"] == host and launched[0]["auth"] is None


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_loopback_host_is_quiet(launched, capsys, host):
    assert hub.main(["--host", host]) == 0
    assert capsys.readouterr().err == ""


def test_auth_options_reach_gradio(launched, capsys, tmp_path):
    f = tmp_path / "logins"
    f.write_text("# operators\ncarol:pa:ss:w\n\n  dave:secret \n", encoding="utf-8")
    assert hub.main(["--host", "0.0.0.0", "--auth", "alice:pw1", "--auth", "bob:x", "--auth-file", str(f)]) == 0
    assert launched[0]["auth"] == [("alice", "pw1"), ("bob", "x"), ("carol", "pa:ss:w"), ("dave", "secret ")]
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "login required" in err


@pytest.mark.parametrize("value", ["alice", "alice:", ":pw", "  :pw", ""])
def test_malformed_auth_is_one_error_line(launched, capsys, value):
    assert hub.main(["--auth", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --auth") and err.count("\n") == 1
    assert launched == []


def test_malformed_auth_file_is_one_error_line(launched, capsys, tmp_path):
    bad = tmp_path / "bad"
    cases = {
        "missing": (tmp_path / "nope", "cannot read"),
        "not utf-8": (bad, "not UTF-8"),
        "empty": (tmp_path / "empty", "no user:password line"),
        "bad line": (tmp_path / "line3", "line 3"),
        "directory": (tmp_path, "cannot read"),
    }
    bad.write_bytes(b"al\xffce:pw\n")
    (tmp_path / "empty").write_text("# nobody\n\n")
    (tmp_path / "line3").write_text("a:1\n\nhunter2\n")  # a password typed without its user
    for path, msg in cases.values():
        assert hub.main(["--auth-file", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --auth-file") and msg in err and err.count("\n") == 1, err
        assert "hunter2" not in err  # a malformed line is named by number, never echoed
    assert launched == []


def test_parse_auth_splits_at_the_first_colon():
    assert hub.parse_auth("u:a:b") == ("u", "a:b")
    with pytest.raises(InputError):
        hub.parse_auth("nocolon")


def test_concurrency_reaches_the_queue(launched):
    assert hub.main([]) == 0
    assert launched[0]["concurrency"] == hub.DEFAULT_CONCURRENCY
    assert hub.main(["--concurrency", "7"]) == 0
    assert launched[1]["concurrency"] == 7 and launched[1]["blocks"]._queue.default_concurrency_limit == 7


@pytest.mark.parametrize("value", ["0", "-1", "x", "2.5"])
def test_bad_concurrency_exits_2(launched, value, capsys):
    assert hub.main(["--concurrency", value]) == 2 and launched == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: argument --concurrency")


def test_allow_root_extends_the_allow_list(launched, tmp_path, capsys):
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(InputError):
        check_allowed_path(str(models / "m"))
    assert hub.main(["--allow-root", str(models)]) == 0
    assert check_allowed_path(str(models / "m")) == (models / "m").resolve()
    assert hub.main(["--allow-root", str(tmp_path / "missing")]) == 2
    assert "error: allowed root" in capsys.readouterr().err
