"""The scripts in benchmarks/ against korch's API as it is now, read without running them.

BENCHMARKS.md quotes their commands; nothing else runs them. When korch's API changes under a script,
it fails at the next benchmark, sometimes sessions later: `plan_breakdown.load_work` passed `rtol=` to
`run_fission` after it had come to take an accuracy policy, and every script built on it failed at its
first line. So every korch name a script imports must exist, every module attribute it reads from a
korch module it imported must exist, and every call of a korch function or class by such a name must
bind to its signature (argument count and keyword names; not types).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


@dataclass(frozen=True)
class Finding:
    script: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"benchmarks/{self.script}:{self.line}: {self.what}"


def _resolve(module: str, name: str) -> object:
    """`from module import name`: the object, or a submodule; raises ImportError/AttributeError."""
    mod = importlib.import_module(module)
    if hasattr(mod, name):
        return getattr(mod, name)
    return importlib.import_module(f"{module}.{name}")


def _bindable(target: object) -> inspect.Signature | None:
    if not callable(target):
        return None
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):          # a builtin or extension without one
        return None


def check_script(path: Path) -> list[Finding]:
    """What in `path` does not match korch's API (module doc)."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[Finding] = []
    names: dict[str, object] = {}            # a local name -> the korch object it was imported as

    def note(node: ast.AST, what: str) -> None:
        found.append(Finding(path.name, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                node.module.split(".")[0] == "korch":
            for alias in node.names:
                try:
                    names[alias.asname or alias.name] = _resolve(node.module, alias.name)
                except (ImportError, AttributeError) as e:
                    note(node, f"from {node.module} import {alias.name}: {type(e).__name__}: {e}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "korch":
                    continue
                try:
                    module = importlib.import_module(alias.name)
                except ImportError as e:
                    note(node, f"import {alias.name}: {e}")
                    continue
                if alias.asname:
                    names[alias.asname] = module

    def target_of(func: ast.expr) -> tuple[object, str] | None:
        """The korch object a call's function expression names, and how the script spells it."""
        if isinstance(func, ast.Name) and func.id in names:
            return names[func.id], func.id
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                isinstance(names.get(func.value.id), ModuleType):
            module = names[func.value.id]
            spelled = f"{func.value.id}.{func.attr}"
            if not hasattr(module, func.attr):
                return None
            return getattr(module, func.attr), spelled
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                isinstance(names.get(node.value.id), ModuleType) and isinstance(node.ctx, ast.Load):
            module = names[node.value.id]
            if not hasattr(module, node.attr):
                note(node, f"{node.value.id}.{node.attr}: module {module.__name__} has no {node.attr!r}")
        if not isinstance(node, ast.Call):
            continue
        hit = target_of(node.func)
        if hit is None:
            continue
        target, spelled = hit
        sig = _bindable(target)
        if sig is None:
            continue
        starred = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        if starred:                          # *args or **kwargs at the call: the keyword names only
            params = sig.parameters
            if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
                for k in node.keywords:
                    if k.arg is not None and k.arg not in params:
                        note(node, f"{spelled}(): no parameter {k.arg!r} in {sig}")
            continue
        try:
            sig.bind(*[None] * len(node.args), **{k.arg: None for k in node.keywords if k.arg is not None})
        except TypeError as e:
            note(node, f"{spelled}(...) does not fit {spelled}{sig}: {e}")
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_matches_korchs_api(script: Path) -> None:
    findings = check_script(script)
    assert not findings, "\n".join(map(str, findings))


def test_the_check_finds_a_call_that_no_longer_fits(tmp_path: Path) -> None:
    """The drift this guards against, written as a script: each line is found, and a fitting call is not."""
    script = tmp_path / "drifted.py"
    script.write_text(
        "from korch.pipeline import run_fission, no_such_function\n"
        "import korch.profile.boundaries as b\n"
        "def main():\n"
        "    run_fission(model, rtol=1e-4)\n"
        "    run_fission(model, accuracy=None)\n"
        "    b.no_such_name\n"
        "    b.chain_model('plain', 2, 16, 0, 1, 2)\n"
        "    b.chain_model('plain', 2, side=16)\n")
    lines = sorted(f.line for f in check_script(script))
    assert lines == [1, 4, 6, 7], [str(f) for f in check_script(script)]
