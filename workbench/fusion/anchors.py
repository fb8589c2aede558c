"""What must be in a graph for a step to change it: every step's anchors, and the test that skips a step.

Each step of both chains declares its anchors: the op types its matcher starts from (ONNX Runtime's
``Fusion.search_op_types``, read from the engine in ``ort_engine.py``; the op types every node of an
onnxscript pattern needs, read from the rule objects here; a workbench rule's own ``anchors``). A
step whose anchors are absent cannot change the graph, so the runner does not run it and reports it
as not applicable (``StepOutcome.skipped``). Clean-ups run on every graph (:data:`EVERY_GRAPH`).

The test is exact, never a guess: a pattern can only match where each of its nodes' op types is in
the graph and each of its producer → consumer edges is too.
"""

from __future__ import annotations

from typing import Callable

import onnx


def _domain(d: str) -> str:
    return "" if d in ("", "ai.onnx") else d


class GraphOps:
    """The op types of a graph (with their domains) and which op type feeds which."""

    def __init__(self, skeleton: onnx.ModelProto):
        self._nodes = list(skeleton.graph.node) + [n for f in skeleton.functions for n in f.node]
        self.ops = {n.op_type for n in self._nodes}
        self.keyed = {(_domain(n.domain), n.op_type) for n in self._nodes}
        self.functions = [f.name for f in skeleton.functions]
        self._edges: set | None = None

    def has(self, op: str, domain: str | None = None) -> bool:
        return op in self.ops if domain is None else (_domain(domain), op) in self.keyed

    @property
    def edges(self) -> set[tuple[str, str]]:
        if self._edges is None:
            made = {o: n.op_type for n in self._nodes for o in n.output}
            self._edges = {(made[i], n.op_type) for n in self._nodes for i in n.input if i in made}
        return self._edges


#: The last few skeletons asked about (a run asks about each step's input a few times in a row), with their ops;
#: each kept skeleton is held alive, so the bound is small.
_SEEN: dict[int, tuple[onnx.ModelProto, GraphOps]] = {}
_SEEN_MAX = 8


def graph_ops(skeleton: onnx.ModelProto) -> GraphOps:
    """:class:`GraphOps` of ``skeleton``, computed once per skeleton object (the last few are kept)."""
    hit = _SEEN.get(id(skeleton))
    if hit is not None and hit[0] is skeleton:
        return hit[1]
    ops = GraphOps(skeleton)
    if len(_SEEN) >= _SEEN_MAX:
        _SEEN.pop(next(iter(_SEEN)))
    _SEEN[id(skeleton)] = (skeleton, ops)
    return ops


class Anchors:
    """Every graph: a clean-up, which may change any graph."""

    def missing(self, g: GraphOps) -> str:
        """Why the step cannot change a graph with these ops ("" when it may), as a clause: the runner
        adds what it did instead (not run, or only the engine's clean-up)."""
        return ""

    def ops(self) -> tuple[str, ...]:
        """The anchor op types, for display (empty: every graph)."""
        return ()


EVERY_GRAPH = Anchors()


class Ops(Anchors):
    """Any of ``ops`` (in ``domain``, when given), and every op of ``needs`` too."""

    def __init__(self, *ops: str, needs: tuple[str, ...] = (), domain: str | None = None, why: str = ""):
        self._ops, self.needs, self.domain, self.why = tuple(ops), tuple(needs), domain, why

    def missing(self, g: GraphOps) -> str:
        if any(g.has(op, self.domain) for op in self._ops) and all(g.has(op) for op in self.needs):
            return ""
        if self.why:
            return self.why
        absent = [op for op in self.needs if not g.has(op)] if any(g.has(op, self.domain) for op in self._ops) else []
        what = " or ".join(self._ops) if not absent else " / ".join(absent)
        return f"nothing to fuse: no {what} node in the graph"

    def ops(self) -> tuple[str, ...]:
        return self._ops + self.needs


def _op_of(node) -> tuple[str, str] | None:
    """(domain, op type) of a pattern node when both are fixed strings (clones made by ``commute()`` lose
    their cached identifier but keep the constant patterns), else None."""
    ident = node.op_identifier()
    if ident is not None:
        return ident[0], ident[1]
    op, domain = getattr(node, "op", None), getattr(node, "domain", None)
    if type(op).__name__ == "StringConstantPattern" and type(domain).__name__ == "StringConstantPattern":
        return domain.value(), op.value()
    return None


def _alternatives(value) -> list | None:
    """The alternatives of an onnxscript ``OrValue`` pattern, or None for any other value pattern."""
    if hasattr(value, "_op_to_pattern"):  # OpIdDispatchOr
        return [pattern for _, pattern in value._op_to_pattern.values()]
    if hasattr(value, "_values"):  # BacktrackingOr
        return list(value._values)
    return None


def _value_needs(value, memo: dict) -> tuple[frozenset, frozenset]:
    """The (domain, op) pairs and op → op edges every match of ``value``'s pattern needs."""
    if value is None or id(value) in memo:
        return memo.get(id(value), (frozenset(), frozenset()))
    memo[id(value)] = (frozenset(), frozenset())  # a cycle, should one be built: no requirement
    alts = _alternatives(value)
    if alts is not None:  # what every alternative needs
        found = [_value_needs(v, memo) for v in alts]
        out = (frozenset.intersection(*[f[0] for f in found]), frozenset.intersection(*[f[1] for f in found])) \
            if found else (frozenset(), frozenset())
    else:
        node = value.producer() if hasattr(value, "producer") else None
        ops, edges = set(), set()
        if node is not None:
            ident = _op_of(node)
            if ident is not None:
                ops.add((_domain(ident[0]), ident[1]))
            for inp in node.inputs:
                i_ops, i_edges = _value_needs(inp, memo)
                ops |= i_ops
                edges |= i_edges
                up = inp.producer() if inp is not None and hasattr(inp, "producer") else None
                up_op = _op_of(up) if up is not None else None
                if ident is not None and up_op is not None:
                    edges.add((up_op[1], ident[1]))
        out = (frozenset(ops), frozenset(edges))
    memo[id(value)] = out
    return out


def _pattern_needs(rule) -> tuple[set, set] | None:
    """(domain, op) pairs and op → op edges every match of an onnxscript ``RewriteRule`` needs, or None.

    Walked from the pattern's outputs to the producers of their inputs; of an ``OrValue`` only what
    all its alternatives need counts.
    """
    graph = getattr(rule, "_target_pattern", None)
    if graph is None:
        return None
    memo: dict = {}
    ops, edges = set(), set()
    for out in graph.outputs:
        o, e = _value_needs(out, memo)
        ops |= o
        edges |= e
    return ops, edges


class Patterns(Anchors):
    """The anchors of onnxscript rules: a step can change a graph only where one rule finds all its ops.

    ``load`` returns the rules (``RewriteRule`` or ``RewriteRuleSet`` objects); it is called on the
    first test, so building the step list does not import onnxscript.
    """

    def __init__(self, load: Callable[[], list], owner: str = "onnxscript's"):
        self._load, self.owner, self._needs = load, owner, None

    def _rules(self) -> list | None:
        if self._needs is None:
            needs = []
            for obj in self._load():
                if obj is None:  # rules we cannot read: never skip
                    self._needs = []
                    return None
                for rule in getattr(obj, "rules", None) or [obj]:
                    found = _pattern_needs(rule)
                    if found is None:
                        self._needs = []  # a rule we cannot read: never skip
                        return None
                    needs.append((getattr(rule, "name", None) or type(rule).__name__, *found))
            self._needs = needs
        return self._needs or None

    def missing(self, g: GraphOps) -> str:
        rules = self._rules()
        if rules is None:
            return ""
        lacks = []
        for name, ops, edges in rules:
            gone = sorted({op for d, op in ops if not g.has(op, d)})
            if not gone:
                gone = [f"{a} → {b}" for a, b in sorted(edges - g.edges)]
            if not gone:
                return ""
            lacks.append(f"{name} needs {', '.join(gone[:3])}")
        shown = "; ".join(dict.fromkeys(lacks[:3])) + ("; ..." if len(lacks) > 3 else "")
        return f"nothing to fuse: none of {self.owner} {len(rules)} rule(s) of this step finds its ops here ({shown})"

    def ops(self) -> tuple[str, ...]:
        rules = self._rules() or []
        return tuple(sorted({op for _, ops, _ in rules for _, op in ops}))
