"""The app contract of ``docs/architecture.md``, checked on every app package.

Every app has the same named roles (``cli.py`` on ``subcommand_main`` with ``cmd_<verb>`` handlers
and a ``bench --suite``; ``model.py`` or ``models/``; ``data.py``; ``train.py`` with one ``fit``;
``evaluate.py`` holding metrics only; ``bench.py``; ``demo.py``; ``quick.py``), no role that means
different things in different apps (``pipeline.py``, a ``baselines.py`` that only re-exports), no
import circle inside an app, no private name imported across modules, modules over 400 lines only
with a reason at their top, READMEs a newcomer reads in five minutes, and every command that runs
torch exposes ``--device`` (training commands ``--precision``).
"""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
APPS = ("olfaction", "retrieval", "generation3d", "vision", "streaming")
REQUIRED = ("cli", "data", "train", "evaluate", "bench", "demo", "quick")
RETIRED = {"pipeline": "a workflow belongs in train.py / the app's API, a sampling pipeline in model code"}
MAX_LINES = 400
LONG_REASON = "Why over 400 lines:"  # a module over MAX_LINES says why, in its docstring
README_MAX_LINES = 250

# Subcommands that never run torch (their reason), and the training subcommands (--precision).
NO_TORCH = {
    "olfaction": {"featurize": "Mordred descriptors with RDKit"},
    "retrieval": {"build-data": "renders the synthetic catalogue with PIL"},
    "generation3d": {"build-data": "samples point clouds with numpy / trimesh",
                     "load-mesh": "lists a mesh file's parts with trimesh"},
    "vision": {},
    "streaming": {"simulate": "writes a synthetic stream with numpy", "data": "converts MovieLens with numpy",
                  "eval": "scores a completion with numpy"},
}
TRAINING = {
    "olfaction": {"pretrain", "train", "eval"},
    "retrieval": {"train"},
    "generation3d": {"train-ae", "train"},
    "vision": {"train"},
    # MoSAIC's pretraining is k-subspaces in float64 numpy (ALS, SVD; torch only routes): no gradient
    # training, so no Lightning precision to choose
    "streaming": set(),
}


def _pkg_dir(app: str) -> Path:
    return ROOT / app


def _modules(app: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the app package."""
    out = {}
    for path in sorted(_pkg_dir(app).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


@pytest.mark.parametrize("app", APPS)
def test_roles_present(app):
    names = {p.stem for p in _pkg_dir(app).glob("*.py")} | {p.name for p in _pkg_dir(app).iterdir() if p.is_dir()}
    missing = [r for r in REQUIRED if r not in names]
    assert not missing, f"{app} lacks the contract modules {missing}"
    assert "model" in names or "models" in names, f"{app} has neither model.py nor models/"
    retired = sorted(set(RETIRED) & names)
    assert not retired, f"{app} still has retired roles {retired}: {[RETIRED[r] for r in retired]}"


@pytest.mark.parametrize("app", APPS)
def test_baselines_module_defines_baselines(app):
    path = _pkg_dir(app) / "baselines.py"
    if not path.exists():
        pytest.skip(f"{app} keeps its baselines beside its models")
    tree = ast.parse(path.read_text())
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert defs, f"{app}/baselines.py only re-exports; define the baselines there or import them from their modules"


@pytest.mark.parametrize("app", APPS)
def test_cli_contract(app):
    cli = importlib.import_module(f"{app}.cli")
    source = Path(cli.__file__).read_text()
    assert "subcommand_main(" in source, f"{app}.cli.main must be common.cli.subcommand_main(build_parser)"
    assert callable(getattr(cli, "build_parser", None)), f"{app}.cli has no build_parser()"
    subs = _subparsers(cli.build_parser())
    assert subs, f"{app}.cli has no subcommands"
    for verb, sub in subs.items():
        handler = sub.get_default("fn")
        assert handler is not None, f"{app} {verb}: no set_defaults(fn=cmd_...)"
        assert handler.__name__ == f"cmd_{verb.replace('-', '_')}", \
            f"{app} {verb}: handler {handler.__name__} should be cmd_{verb.replace('-', '_')}"
    assert "bench" in subs, f"{app}.cli has no 'bench' subcommand"
    assert "--suite" in _options(subs["bench"]), f"{app} bench has no --suite"


@pytest.mark.parametrize("app", APPS)
def test_every_torch_command_takes_device(app):
    subs = _subparsers(importlib.import_module(f"{app}.cli").build_parser())
    stale = set(NO_TORCH[app]) - set(subs)
    assert not stale, f"NO_TORCH names {app} commands that do not exist: {stale}"
    for verb, sub in subs.items():
        if verb in NO_TORCH[app]:
            assert "--device" not in _options(sub), f"{app} {verb} is listed as torch-free but takes --device"
            continue
        assert "--device" in _options(sub), f"{app} {verb} runs torch but has no --device"
    for verb in TRAINING[app]:
        assert verb in subs, f"{app} has no training command {verb!r}"
        assert "--precision" in _options(subs[verb]), f"{app} {verb} trains but has no --precision"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
@pytest.mark.parametrize("app", APPS)
def test_cuda_without_gpu_is_one_line_error(app, capsys):
    cli = importlib.import_module(f"{app}.cli")
    subs = _subparsers(cli.build_parser())
    for verb in subs:
        if verb in NO_TORCH[app]:
            continue
        assert cli.main([verb, "--device", "cuda"]) == 2, f"{app} {verb} --device cuda"
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and "GPU" in err[0], (app, verb, err)


@pytest.mark.parametrize("app", APPS)
def test_train_has_one_fit(app):
    train = importlib.import_module(f"{app}.train")
    assert callable(getattr(train, "fit", None)), f"{app}.train has no fit(...) entry point"
    old = [n for n in ("fit_distance", "train_model", "train_autoencoder", "pretrain_experts") if hasattr(train, n)]
    assert not old, f"{app}.train keeps the old entry point names {old}"


@pytest.mark.parametrize("app", APPS)
def test_evaluate_holds_metrics_only(app):
    tree = ast.parse((_pkg_dir(app) / "evaluate.py").read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)
               and any(ast.unparse(b).split(".")[-1] in {"Module", "LightningModule", "PretrainedMixin"}
                       for b in n.bases)]
    assert not classes, f"{app}/evaluate.py defines models {[c.name for c in classes]}; move them to classifier.py"


@pytest.mark.parametrize("app", APPS)
def test_demo_and_quick_entry_points(app):
    assert callable(importlib.import_module(f"{app}.demo").build_tab)
    assert callable(importlib.import_module(f"{app}.quick").run_quick)


def _imports(path: Path, module: str) -> list[tuple[str, list[str]]]:
    """(imported module, names) for every import in a file, at any depth; relative imports resolved."""
    out = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, [a.name for a in node.names]))
    return out


def _graph(app: str) -> dict[str, set[str]]:
    mods = _modules(app)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for target, names in _imports(path, mod):
            if target in mods and target != mod:
                graph[mod].add(target)
            for name in names:  # "from pkg import module"
                sub = f"{target}.{name}"
                if sub in mods and sub != mod:
                    graph[mod].add(sub)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


@pytest.mark.parametrize("app", APPS)
def test_no_import_circles(app):
    graph = {m: {t for t in deps if not m.startswith(t + ".") and t != app} for m, deps in _graph(app).items()}
    cycle = _cycle(graph)
    assert cycle is None, f"import circle in {app}: {' -> '.join(cycle)}"


@pytest.mark.parametrize("app", APPS)
def test_no_private_names_across_modules(app):
    mods = _modules(app)
    bad = []
    for mod, path in mods.items():
        for target, names in _imports(path, mod):
            if target.split(".")[0] == app and target != mod:
                bad += [f"{mod} imports {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad, f"private names used across modules of {app}: {bad}"


@pytest.mark.parametrize("app", APPS)
def test_long_modules_say_why(app):
    long = []
    for mod, path in _modules(app).items():
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            if LONG_REASON not in doc:
                long.append(f"{mod} ({lines} lines)")
    assert not long, f"modules over {MAX_LINES} lines without '{LONG_REASON}' in their docstring: {long}"


@pytest.mark.parametrize("app", APPS)
def test_readme_is_short(app):
    n = (_pkg_dir(app) / "README.md").read_text().count("\n")
    assert n <= README_MAX_LINES, f"{app}/README.md has {n} lines (at most {README_MAX_LINES}; tables move to docs/results/{app}/)"


#: what users run: the console script, the hub tab, ``make demo`` and the README's benchmark; with the
#: package itself (its ``__init__``: the Python API) and the product code outside the apps that calls
#: into them (the hub in apps/, the release scripts in scripts/)
ENTRY_POINTS = ("cli", "demo", "quick", "bench")
CALLERS = ("apps", "scripts")


def _reachable(app: str) -> set[str]:
    """The app's modules reached by imports (at any depth) from its entry points."""
    graph, mods = _graph(app), _modules(app)
    todo = [app, *(f"{app}.{e}" for e in ENTRY_POINTS)]
    for caller in CALLERS:
        for path in sorted((ROOT / caller).rglob("*.py")):
            for target, names in _imports(path, caller):
                todo += [m for m in (target, *(f"{target}.{n}" for n in names)) if m in mods]
    seen: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod in seen or mod not in graph:
            continue
        seen.add(mod)
        todo += graph[mod]
    return seen


@pytest.mark.parametrize("app", APPS)
def test_every_product_module_is_reached_from_what_users_run(app):
    """The product boundary: a module that only experiments or tests import belongs in experiments/
    (or is deleted), not in the package."""
    unreached = sorted(set(_modules(app)) - _reachable(app))
    assert unreached == [], f"only tests or experiments reach {unreached}: move them to experiments/{app}/"
