"""The demo's path allow-list: inside a root is served; outside, via a symlink or via `..` is refused."""

import os

import pytest

from common import allowlist
from common.allowlist import (
    ROOTS_ENV,
    add_allowed_roots,
    allowed_roots,
    check_allowed_path,
    clear_allowed_roots,
)
from common.errors import InputError


@pytest.fixture()
def root(tmp_path, monkeypatch):
    """An operator root ``tmp/root`` (holding ``ckpt/``) given through the env var; the cache root
    points elsewhere so only this root and results/ are allowed."""
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(ROOTS_ENV, str(tmp_path / "root"))
    (tmp_path / "root" / "ckpt").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    clear_allowed_roots()
    yield tmp_path / "root"
    clear_allowed_roots()


def test_path_inside_a_root_is_allowed_and_resolved(root):
    assert check_allowed_path(str(root / "ckpt")) == (root / "ckpt").resolve()
    # a path inside that does not exist yet is allowed too: the loader reports it as missing
    assert check_allowed_path(str(root / "ckpt" / "nope")) == (root / "ckpt" / "nope").resolve()
    # `..` that stays inside the root is fine
    assert check_allowed_path(f"{root}/ckpt/../ckpt") == (root / "ckpt").resolve()


@pytest.mark.parametrize("path", ["/etc", "/", "/etc/passwd", "~"])
def test_system_paths_are_refused(root, path):
    with pytest.raises(InputError, match="outside the directories this server allows"):
        check_allowed_path(path)


def test_dotdot_escaping_a_root_is_refused(root):
    with pytest.raises(InputError, match="outside"):
        check_allowed_path(f"{root}/../outside")
    with pytest.raises(InputError, match="outside"):
        check_allowed_path(f"{root}/ckpt/../../../../../etc")


def test_symlink_escaping_a_root_is_refused(root, tmp_path):
    (root / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    (root / "etc").symlink_to("/etc", target_is_directory=True)
    for p in (root / "link", root / "etc", root / "link" / "x"):
        with pytest.raises(InputError, match="outside"):
            check_allowed_path(str(p))
    # a symlink that stays inside the root is followed and allowed
    (root / "inner").symlink_to(root / "ckpt", target_is_directory=True)
    assert check_allowed_path(str(root / "inner")) == (root / "ckpt").resolve()


def test_prefix_of_a_root_name_is_not_inside_it(root, tmp_path):
    (tmp_path / "root2").mkdir()
    with pytest.raises(InputError):
        check_allowed_path(str(tmp_path / "root2"))


def test_blank_path_is_refused(root):
    for p in ("", "   ", None):
        with pytest.raises(InputError, match="no checkpoint directory given"):
            check_allowed_path(p)


def test_error_names_the_typed_path_not_the_roots(root):
    with pytest.raises(InputError) as info:
        check_allowed_path("/etc")
    assert "'/etc'" in str(info.value) and str(root) not in str(info.value)


def test_default_roots_are_results_and_the_cache(root, tmp_path):
    roots = allowed_roots()
    assert (allowlist.PROJECT_ROOT / "results").resolve() in roots
    assert (tmp_path / "cache").resolve() in roots
    assert check_allowed_path(str(tmp_path / "cache" / "vision" / "demo_model"))
    assert check_allowed_path(str(allowlist.PROJECT_ROOT / "results" / "demo" / "x"))


def test_operator_roots_env_list_and_extra(root, tmp_path, monkeypatch):
    other = tmp_path / "outside"
    with pytest.raises(InputError):
        check_allowed_path(str(other))
    assert check_allowed_path(str(other), extra_roots=[str(other)]) == other.resolve()
    monkeypatch.setenv(ROOTS_ENV, os.pathsep.join([str(root), str(other)]))
    assert check_allowed_path(str(other / "m")) == (other / "m").resolve()


def test_add_allowed_roots(root, tmp_path):
    other = tmp_path / "outside"
    with pytest.raises(InputError):
        check_allowed_path(str(other))
    add_allowed_roots(other)
    assert check_allowed_path(str(other)) == other.resolve()
    with pytest.raises(InputError, match="is not a directory"):
        add_allowed_roots(tmp_path / "missing")
