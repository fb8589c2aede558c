"""Every step there is, in one registry: the engines' own steps and the registered rules, the chains, the catalog.

A chain is a list of step names: the engine's own steps in the engine's order
(``ort_engine.ORT_STEPS``, ``onnxscript_engine.onnxscript_steps``), with each
rule put in after the step it names (``Rule.after``; rules that follow the same
step keep their registration order). The catalog is the engines' rows
(``steps.ENGINE_ROWS``) and each registered rule's own row, in one display
order. The package's rules (``rules.builtin()``) are registered on first use;
:func:`register_rule` adds one at run time (the notebook app's ``add_rule``),
and every chain, step list and row built before is rebuilt.
"""

from __future__ import annotations

import dataclasses
import hashlib

from ..concurrency import new_lock
from ..errors import FusionError

CHAINS = ("ort", "onnxscript")

_LOCK = new_lock(reentrant=True)
_RULES: list = []  # registered rules, in order
_BUILTIN: set[str] = set()  # names of the package's own rules (their code is in the timeline store's key)
_MEMO: dict = {}


def _own_steps(engine: str) -> tuple:
    """The engine's own steps, in its order (without rules)."""
    if engine == "ort":
        from .ort_engine import ORT_STEPS  # lazy: a cycle (fusion/__init__ imports this module first)

        return ORT_STEPS
    from .onnxscript_engine import onnxscript_steps  # lazy: a cycle (fusion/__init__ imports this module first)

    if "own:onnxscript" not in _MEMO:
        _MEMO["own:onnxscript"] = onnxscript_steps()
    return _MEMO["own:onnxscript"]


def _rules() -> list:
    with _LOCK:
        if not _BUILTIN:
            from .rules import builtin  # lazy: a cycle (fusion/__init__ imports this module first)

            found = builtin()
            _BUILTIN.update(r.name for r in found)
            _RULES[:0] = list(found)
        return list(_RULES)


def rules() -> tuple:
    """Every registered rule, in registration order."""
    return tuple(_rules())


def _memo(key, build):
    with _LOCK:
        if key not in _MEMO:
            _MEMO[key] = build()
        return _MEMO[key]


def chain(engine: str) -> tuple[str, ...]:
    """The step names of ``engine``'s chain, in run order, the rules in their places."""
    return _memo(("chain", engine), lambda: _place(engine))


def _place(engine: str) -> tuple[str, ...]:
    names = [s.name for s in _own_steps(engine)]
    followers: dict[str, list[str]] = {}
    pending = [r for r in _rules() if engine in r.after]
    while pending:
        ready = [r for r in pending if r.after[engine] in names]
        if not ready:
            r = pending[0]
            raise FusionError(f"rule {r.name!r} follows {r.after[engine]!r}, which is no step of the {engine} chain "
                              f"(its steps: {', '.join(names)})")
        for r in ready:
            block = _block(r.after[engine], followers)
            names.insert(names.index(block[-1]) + 1, r.name)
            followers.setdefault(r.after[engine], []).append(r.name)
            pending.remove(r)
    return tuple(names)


def _block(name: str, followers: dict[str, list[str]]) -> list[str]:
    """``name`` and every rule placed after it, and after those, in chain order."""
    out = [name]
    for f in followers.get(name, []):
        out += _block(f, followers)
    return out


def steps(engine: str) -> tuple:
    """The ``EngineStep`` objects of ``engine``'s chain, in run order."""

    def build():
        from .rule_steps import rule_step  # lazy: a cycle (fusion/__init__ imports this module first)

        own = {s.name: s for s in _own_steps(engine)}
        by_rule = {r.name: r for r in _rules()}
        return tuple(own[n] if n in own else rule_step(by_rule[n], engine, version=_version(by_rule[n]))
                     for n in chain(engine))

    return _memo(("steps", engine), build)


def _version(rule) -> str:
    return "" if rule.name in _BUILTIN and type(rule).__module__.startswith(__package__) else rule.version()


def plan_key(plan) -> str:
    """What a fused model made with ``plan`` is cached by: the engine, the steps off and opted in, and a hash of
    the rules added at run time that run (a plan that switches them all off keys as the package's own chain)."""
    added = {e: [f"{s.name}@{s.version}" for s in steps(e) if s.version and s.name not in plan.disabled]
             for e in CHAINS if plan.engine in (e, "auto")}
    mine = {s.name for e in CHAINS for s in steps(e) if s.version}
    off = sorted(d for d in plan.disabled if d not in mine)
    key = f"{plan.engine}-off:{','.join(off)}-in:{','.join(sorted(plan.opted_in))}"
    return key + "".join(f"-{e}:{hashlib.sha256('|'.join(a).encode()).hexdigest()[:12]}"
                         for e, a in added.items() if a)


def rows() -> tuple:
    """Every catalog row, in display order: both chains merged, each step once."""
    return _memo("rows", _rows)


def rows_by_name() -> dict:
    return _memo("by_name", lambda: {s.name: s for s in rows()})


def _rows() -> tuple:
    from .steps import ENGINE_ROWS  # lazy: a cycle (fusion/__init__ imports this module first)

    chains = {e: chain(e) for e in CHAINS}
    order = list(chains["ort"])
    prev = None
    for name in chains["onnxscript"]:
        if name not in order:
            order.insert(order.index(prev) + 1 if prev in order else 0, name)
        prev = name
    engine_rows = {r.name: r for r in ENGINE_ROWS}
    rule_rows = {r.name: r.row() for r in _rules()}
    out = []
    for name in order:
        if name in rule_rows:
            out.append(rule_rows[name])
        else:
            own = tuple(e for e in CHAINS if name in {s.name for s in _own_steps(e)})
            out.append(dataclasses.replace(engine_rows[name], engines=own))
    return tuple(out)


def register_rule(rule, *, replace: bool = True):
    """Add ``rule`` to the chains it names (a rule of the same name is replaced); returns it.

    Raises:
        FusionError: no name, no anchors, a chain that does not exist, a place that is no step of the
            chain, or the name of one of the engines' own steps.
    """
    _check(rule)
    with _LOCK:
        current = _rules()
        same = [r for r in current if r.name == rule.name]
        if same and not replace:
            raise FusionError(f"a rule named {rule.name!r} is registered already")
        _RULES[:] = [r for r in current if r.name != rule.name] + [rule]
        _MEMO.pop("rows", None), _MEMO.pop("by_name", None)
        for key in [k for k in _MEMO if isinstance(k, tuple)]:
            _MEMO.pop(key)
        try:
            for e in CHAINS:
                chain(e)
        except FusionError:
            _RULES[:] = current
            for key in [k for k in _MEMO if isinstance(k, tuple) or k in ("rows", "by_name")]:
                _MEMO.pop(key)
            raise
    return rule


def unregister_rule(name: str) -> None:
    """Take a rule added at run time out of the chains again (the package's own rules stay).

    Raises:
        FusionError: ``name`` is one of the package's own rules, or no rule of that name was added.
    """
    with _LOCK:
        current = _rules()
        if name in _BUILTIN:
            raise FusionError(f"{name!r} is one of the workbench's own rules; switch it off in the plan instead")
        added = [r.name for r in current if r.name not in _BUILTIN]
        if name not in added:
            raise FusionError(f"no rule named {name!r} was added (added: {', '.join(added) or 'none'})")
        _RULES[:] = [r for r in current if r.name != name]
        for key in [k for k in _MEMO if isinstance(k, tuple) or k in ("rows", "by_name")]:
            _MEMO.pop(key)


def _check(rule) -> None:
    from .rule import Rule  # lazy: a cycle (fusion/__init__ imports this module first)

    if isinstance(rule, type):
        what = "a Rule" if issubclass(rule, Rule) else "a class"
        raise FusionError(f"{rule.__name__} is {what}, not a rule object: add an instance of it, "
                          f"{rule.__name__}() (with the parentheses)")
    if not isinstance(rule, Rule):
        raise FusionError(f"a rule is an instance of a workbench.fusion.Rule subclass, not {type(rule).__name__} "
                          f"({' '.join(repr(rule).split())[:60]})")
    name = getattr(rule, "name", "")
    if not name or not isinstance(name, str):
        raise FusionError("a rule needs a name (the step's name in plans and the app)")
    own = {s.name for e in CHAINS for s in _own_steps(e)}
    if name in own:
        raise FusionError(f"{name!r} is a step of an engine; give the rule a name of its own")
    _rules()  # the package's own rules registered, so their names are known
    if name in _BUILTIN:
        raise FusionError(f"{name!r} is one of the workbench's own steps; give the rule a name of its own "
                          f"(switch the built-in step off in the plan to replace it)")
    if not rule.after or any(e not in CHAINS for e in rule.after):
        raise FusionError(f"rule {name!r} must say after which step it runs in a chain: after={{'onnxscript': "
                          f"'<step>'}} (chains: {', '.join(CHAINS)}); it says {rule.after!r}")
    if not rule.anchors:
        raise FusionError(f"rule {name!r} needs its anchor op types (where matching starts), e.g. anchors = "
                          f"('SkipLayerNormalization',)")
