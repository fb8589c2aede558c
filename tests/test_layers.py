"""The package's imports run one way (docs/architecture.md, "Layers"), with no circles.

Walks every ``import`` in ``workbench/`` with :mod:`ast`, lazy imports inside functions included,
since a lazy import that runs against the layering is the same tangle, only deferred.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "workbench"

#: Layer of each top-level part of the package, bottom first. A module may import its own layer
#: (other modules of the same package) or any lower one, never a higher one.
LAYERS = {
    "errors": 0, "concurrency": 0, "config": 0, "checks": 0, "path_checks": 0, "families": 0, "settings": 0,
    "limits": 0, "folder_checks": 0, "__init__": 0, "__main__": 9,
    "models": 1, "model_types": 1, "modelio": 1, "cache": 1,
    "ort": 2,
    "export": 3, "export_parity": 3, "graph": 3, "text": 3,
    "fusion": 4,
    "measure": 5,
    "viz": 6, "report": 6, "workshop": 6,
    "cli": 7, "ui": 7,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [] if node.module else [a.name for a in node.names]
            else:
                target, names = node.module or "", []
            if target.split(".")[0] != "workbench":
                continue
            out.update(f"{target}.{n}" for n in names) if names else out.add(target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "workbench")
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for mod, path in files.items():
        deps = set()
        for target in _imports(path):
            while target not in files and "." in target:  # `from pkg import name` → pkg
                target = target.rsplit(".", 1)[0]
            if target in files and target != mod:
                deps.add(target)
        graph[mod] = deps
    return graph


def _layer(mod: str) -> int:
    part = mod.split(".")[1] if "." in mod else "__init__"
    assert part in LAYERS, f"{mod}: add its package to LAYERS here and to docs/architecture.md"
    return LAYERS[part]


def test_no_import_runs_against_the_layers():
    graph = _graph()
    wrong = [f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
             for m, deps in graph.items() for d in sorted(deps)
             if m != "workbench" and _layer(d) > _layer(m)]
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_no_import_circles():
    graph = _graph()
    # Package __init__ files re-export their children; an edge parent→child is not a circle.
    edges = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, "import circles:\n" + "\n".join(" → ".join(c) for c in cycles)


#: The stages inside ``workbench.measure``, bottom first (docs/architecture.md): the worker process, the
#: parent's timing harness, the variants it times, then tuning; fleet sweeps sit beside tune (they use the harness
#: and the variants). A module imports its own stage or a lower one; tune and fleet never import each other.
ORDER = "worker ← harness ← variants ← tune"
STAGES = {"worker": 0, "harness": 1, "variants": 2, "tune": 3, "fleet": 3}


def _stage(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "measure" else None


def test_measure_is_one_package_per_stage():
    flat = sorted(p.name for p in (ROOT / "measure").glob("*.py") if p.name != "__init__.py")
    assert not flat, f"measure/ holds stages only (worker, harness, variants, tune, fleet); move {flat} into one"
    packages = {p.parent.name for p in (ROOT / "measure").glob("*/__init__.py")}
    assert packages == set(STAGES), f"add {sorted(packages - set(STAGES))} to STAGES here and to docs/architecture.md"
    for name in STAGES:  # each stage says the order it sits in
        assert ORDER in ast.get_docstring(ast.parse((ROOT / "measure" / name / "__init__.py").read_text())), name


def test_measure_stages_import_one_way():
    graph = _graph()
    wrong = [f"{m} ({_stage(m)}) imports {d} ({_stage(d)})" for m, deps in graph.items() if _stage(m)
             for d in sorted(deps) if _stage(d) and _stage(d) != _stage(m)
             and STAGES[_stage(d)] >= STAGES[_stage(m)]]
    assert not wrong, f"measure's stages run {ORDER} (fleet beside tune):\n" + "\n".join(wrong)


@pytest.mark.parametrize("low", ["ort"])
def test_bottom_layer_imports_nothing_above_it(low):
    graph = _graph()
    bad = {m: sorted(d for d in deps if d.split(".")[1] in ("export", "export_parity", "fusion", "measure", "graph"))
           for m, deps in graph.items() if m.startswith(f"workbench.{low}")}
    assert not any(bad.values()), bad
