"""A fleet sweep's spec: read safely, checked, counted before it is expanded, then expanded to points.

Nothing a user can type makes this module allocate much or run long: the YAML file's size is capped,
alias expansion (anchors ``&a`` reused as ``*a``, the "billion laughs") is counted on the composed
node graph before any Python object is built, and the points are counted from the axes' lengths
before :func:`expand` makes one. Both limits are settings (:data:`MAX_POINTS_ENV`,
:data:`MAX_NODES_ENV`); the error says which and how to raise it.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from pathlib import Path

from ...checks import require_regular_file
from ...errors import ConfigError
from ...fusion.catalog import CATALOG
from ...settings import env_number
from ..variants import fleet_precisions

#: Axes of a spec: spec key → (config key, default values).
AXES = {
    "models": ("model", ["bert-tiny"]), "exporters": ("exporter", ["torchscript"]),
    "attention": ("attention", ["eager"]), "opsets": ("opset", [None]), "engines": ("engine", ["auto"]),
    "plans": ("plan", ["default"]), "batch": ("batch", [1]), "seq": ("seq", [128]), "threads": ("threads", [1]),
    "providers": ("provider", ["cpu"]), "precisions": ("precision", ["fp32"]),
}
OTHER_KEYS = {"runs", "warmup"}
#: The most points a sweep may have (an environment variable raises it).
MAX_POINTS_ENV, DEFAULT_MAX_POINTS = "WORKBENCH_MAX_SWEEP_POINTS", 10_000
#: The most YAML nodes a spec may hold once its aliases are expanded.
MAX_NODES_ENV, DEFAULT_MAX_NODES = "WORKBENCH_MAX_SPEC_NODES", 100_000
MAX_SPEC_BYTES = 1_000_000


def _limit(env: str, default: int) -> int:
    return env_number(env, default, integer=True, minimum=1, maximum=10**12)


def sweep_limits() -> tuple[int, int]:
    """``($WORKBENCH_MAX_SWEEP_POINTS, $WORKBENCH_MAX_SPEC_NODES)`` or their defaults; a bad value: one line."""
    return _limit(MAX_POINTS_ENV, DEFAULT_MAX_POINTS), _limit(MAX_NODES_ENV, DEFAULT_MAX_NODES)


def _expanded_size(node, memo: dict, budget: int) -> int:
    """Nodes in ``node`` once every alias is expanded (stops counting past ``budget``); iterative, memoized."""
    import yaml

    stack, visiting = [(node, False)], set()
    while stack:
        n, children_done = stack.pop()
        if id(n) in memo:
            continue
        if not children_done and id(n) in visiting:  # reached again from inside itself: a recursive alias
            return budget + 1
        visiting.add(id(n))
        kids = []
        if isinstance(n, yaml.SequenceNode):
            kids = list(n.value)
        elif isinstance(n, yaml.MappingNode):
            kids = [x for pair in n.value for x in pair]
        if not children_done:
            stack.append((n, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
            continue
        memo[id(n)] = min(budget + 1, 1 + sum(memo.get(id(k), 1) for k in kids))
        if memo[id(n)] > budget:
            return memo[id(n)]
    return memo.get(id(node), 1)


def safe_yaml(text: str, where: str):
    """YAML text → Python objects with safe types only, refusing alias bombs before building anything.

    Raises:
        ConfigError: not YAML, or its aliases expand past :data:`MAX_NODES_ENV` nodes.
    """
    import yaml

    budget = _limit(MAX_NODES_ENV, DEFAULT_MAX_NODES)
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as e:
            raise ConfigError(f"{where} is not valid YAML: {' '.join(str(e).split())[:160]}") from None
        if node is None:
            return None
        if _expanded_size(node, {}, budget) > budget:
            raise ConfigError(f"{where} expands (through its anchors and aliases) to more than {budget:,} values; "
                              f"write the axes out plainly (raise the limit with {MAX_NODES_ENV})")
        try:
            return loader.construct_document(node)
        except yaml.YAMLError as e:
            raise ConfigError(f"{where} is not valid YAML: {' '.join(str(e).split())[:160]}") from None
    finally:
        loader.dispose()


def read_spec_file(spec: str | os.PathLike) -> dict:
    """A spec file's mapping (size capped, alias-safe); one-line errors naming the file."""
    path = require_regular_file(Path(spec).expanduser(), ConfigError)
    if path.stat().st_size > MAX_SPEC_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_SPEC_BYTES // 1_000_000} MB: a sweep spec lists a few values "
                          f"per axis")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text: {e.reason} at byte {e.start}") from None
    doc = safe_yaml(text, str(path))
    if not isinstance(doc, dict):
        raise ConfigError(f"{path} does not hold a mapping of axes (models:, seq:, plans:, ...)")
    return doc


def load_spec(spec: dict | str | os.PathLike) -> dict:
    """A spec from a dict or a YAML file, checked, with every axis a list (one-line errors)."""
    if not isinstance(spec, dict):
        spec = read_spec_file(spec)
    unknown = sorted(map(str, set(spec) - set(AXES) - OTHER_KEYS))
    if unknown:
        raise ConfigError(f"unknown sweep key(s) {', '.join(unknown)}; axes are {', '.join(AXES)}, plus runs, warmup")
    out = {}
    for key, (_, default) in AXES.items():
        v = spec.get(key, default)
        v = v if isinstance(v, list) else [v]
        if not v:
            raise ConfigError(f"sweep axis {key} is empty")
        out[key] = v
    for key, default in (("runs", 20), ("warmup", 3)):
        v = spec.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"sweep {key} must be a whole number of at least 1, not {v!r}")
        out[key] = v
    return out


def _ablation_steps() -> list[str]:
    return [s.name for s in CATALOG if s.kind == "fusion" and s.default_on and s.in_bert]


#: The plan label of the unfused export (session optimizations off): what a per-machine plan must not be slower than.
UNFUSED_PLAN = "unfused"


def _plans(plan) -> list[tuple[str, list[str]]]:
    """``(label, disabled steps)`` for one plan entry; "ablation" becomes every fusion left out in turn, and the
    unfused export (so each machine's plan is checked against the graph it started from); "unfused" that alone."""
    if plan in ("default", None):
        return [("default", [])]
    if plan == UNFUSED_PLAN:
        return [(UNFUSED_PLAN, [])]
    if plan == "ablation":
        return [("default", [])] + [(f"without {s}", [s]) for s in _ablation_steps()] + [(UNFUSED_PLAN, [])]
    if isinstance(plan, dict) and set(plan) <= {"disable", "name"}:
        disabled = plan.get("disable") or []
        if not isinstance(disabled, list) or not all(isinstance(d, str) for d in disabled):
            raise ConfigError(f"a plan's disable is a list of step names, not {disabled!r}")
        disabled = sorted(disabled)
        return [(str(plan.get("name") or ("without " + ", ".join(disabled) if disabled else "default")), disabled)]
    raise ConfigError(f"a plan is 'default', 'ablation', 'unfused' or {{disable: [step, ...]}}, not {plan!r}")


def count_points(spec: dict) -> int:
    """How many points ``spec`` (as :func:`load_spec` returns it) expands to, at most; nothing expanded."""
    per_plan = sum(2 + len(_ablation_steps()) if p == "ablation" else 1 for p in spec["plans"])
    return per_plan * math.prod(len(spec[k]) for k in AXES if k != "plans")


def check_size(spec: dict) -> int:
    """The point count, or a one-line refusal past :data:`MAX_POINTS_ENV`."""
    n, limit = count_points(spec), _limit(MAX_POINTS_ENV, DEFAULT_MAX_POINTS)
    if n > limit:
        sizes = " x ".join(f"{len(spec[k])} {k}" for k in AXES if len(spec[k]) > 1) or "its axes"
        raise ConfigError(f"the sweep has {n:,} points ({sizes}), more than the limit of {limit:,}: "
                          f"shorten its axes (or raise {MAX_POINTS_ENV})")
    return n


def config_key(cfg: dict) -> str:
    """A stable id of one point (rows resume by it)."""
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]


def expand(spec: dict | str | os.PathLike) -> list[dict]:
    """Every point of the sweep as a plain config dict (plans expanded, duplicates dropped).

    Raises:
        ConfigError: a bad spec, or one with more points than the limit (counted before expanding).
    """
    spec = load_spec(spec)
    check_size(spec)
    axes = [k for k in AXES if k != "plans"]
    plans = [p for entry in spec["plans"] for p in _plans(entry)]
    seen, out = set(), []
    for values in itertools.product(*(spec[k] for k in axes)):
        for label, disabled in plans:
            cfg = {AXES[k][0]: v for k, v in zip(axes, values)}
            cfg.update(plan=label, disable=disabled, runs=spec["runs"], warmup=spec["warmup"])
            if label == UNFUSED_PLAN:
                cfg["unfused"] = True  # the export at session level "disable" (only this point carries the key)
            if cfg["precision"] not in fleet_precisions():  # the precisions the ONNX Runtime recipes make
                *most, last = fleet_precisions()
                raise ConfigError(f"precision {cfg['precision']!r}: choose {', '.join(most)} or {last}")
            key = config_key(cfg)
            if key not in seen:
                seen.add(key)
                out.append(cfg)
    return out


__all__ = ["AXES", "OTHER_KEYS", "UNFUSED_PLAN", "MAX_POINTS_ENV", "MAX_NODES_ENV", "sweep_limits", "safe_yaml", "read_spec_file", "load_spec",
           "count_points", "check_size", "expand", "config_key"]
