"""The package layers of docs/architecture.md: no module imports a later layer.

Reads every module's imports with ``ast``: module-level ones, and those inside
functions too (a function-level import is how a cycle used to be hidden).  Imports
for type checking only are allowed anywhere; the CLI and the front ends are the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "kai"

# Lower index: lower layer.  A module may import its own layer and lower ones.
LAYERS: list[tuple[str, ...]] = [
    (
        "kai._dataclasses",
        "kai.api",
        "kai.backends",
        "kai._fast",
        "kai._native",
        "kai.fairshare",
        "kai.memory",
    ),
    ("kai.snapshot",),
    ("kai.framework",),
    ("kai.plugins",),
    ("kai.actions",),
    ("kai.config", "kai.engine", "kai.output", "kai.bench", "kai.bench_clusters"),
    ("kai.cli", "kai.k8s", "kai.replay", "kai.fairshare_prometheus"),
]


def _layer(module: str) -> int | None:
    for index, packages in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return index
    return None  # the kai package itself, which re-exports the engine


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module) -> list[tuple[str, int]]:
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "kai":  # from kai import _fast: the submodules named
                found += [(f"kai.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((node.module, node.lineno))
    return [(name, line) for name, line in found if name.startswith("kai.")]


def test_every_module_has_a_layer() -> None:
    missing = [
        _module_name(p)
        for p in SRC.rglob("*.py")
        if _module_name(p) != "kai" and _layer(_module_name(p)) is None
    ]
    assert not missing


def test_no_module_imports_a_later_layer() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        own = _layer(module)
        if own is None:
            continue
        for name, line in _imports(ast.parse(path.read_text())):
            target = _layer(name)
            if target is not None and target > own:
                wrong.append(f"{path.relative_to(SRC.parent)}:{line}: {module} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_plugins_never_import_actions() -> None:
    for path in (SRC / "plugins").rglob("*.py"):
        for name, line in _imports(ast.parse(path.read_text())):
            assert not name.startswith("kai.actions"), f"{path}:{line} imports {name}"
