"""The fusion rule protocol: one object per fusion, run by one generic runner.

A rule says what it is (its catalog row: title, what it matches, the op it emits, prerequisites, the
ONNX Runtime session transformers that redo it), where it runs (``after``: chain → the step it
follows), where matching starts (``anchors``: op types), ``match`` (the parts of one instance as a
:class:`Match`, or ``Match.fail(reason, node)`` naming the node and its encoder layer, in the style of
onnxscript's ``MatchResult().fail(reason, node)``) and ``rewrite`` (a :class:`Rewrite`: the new nodes
and the values they replace). :meth:`Rule.apply` runs it over a graph: every anchor in graph order,
match, then rewrite; the new nodes get the anchor's layer scope, the readers of the old values move
to the new ones, and nodes nothing reads any more are dropped. Nothing is inserted before a match is
decided. ``rule_steps.rule_step`` turns any rule into a timeline step.

A :class:`PatternRule` matches with onnxscript's pattern matcher instead (``pattern``, ``check``,
``rewrite(op, ...)``, as onnxscript's ``RewriteRuleClassBase``), for patterns that are a fixed chain
of nodes. Neither base imports ``onnx_ir`` or onnxscript until a rule runs: the catalog and the
chains are read without them (a timeline read back from disk never imports an engine).
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field
from typing import Any

from .engine_logs import quiet_stdout, trace_rules
from .graph_utils import finish, inherit_scope, node_label
from .lazy import LazyModule, ir
from .steps import Step


class Match:
    """One instance of a rule's pattern, its parts as attributes (``m.x``), or why a candidate is not one.

    ``Match(x=..., bias=...)`` is a match; ``Match.fail(reason, node)`` a refusal, false in a test.
    """

    def __init__(self, **parts: Any):
        self.parts = parts
        self.reason = ""
        self.node = None

    @classmethod
    def fail(cls, reason: str, node=None) -> "Match":
        """A refusal: ``{node}`` in ``reason`` becomes the node's op, name and encoder layer."""
        m = cls()
        m.reason = reason.replace("{node}", node_label(node)) if node is not None else reason
        m.node = node
        return m

    def __bool__(self) -> bool:
        return not self.reason

    def __getattr__(self, name: str):
        parts = self.__dict__.get("parts", {})
        if name in parts:
            return parts[name]
        raise AttributeError(name)


@dataclass
class Rewrite:
    """What a rewrite makes: new nodes, and for each old value the new value its readers read instead.

    ``at``: the new nodes go before this node (default: the node computing the first replaced value).
    ``scope``: the node whose export scope (its encoder layer) the new nodes take (default: the anchor).
    A new value without a shape or type takes the old value's.
    """

    nodes: list
    replace: dict
    at: Any = None
    scope: Any = None


@dataclass
class RuleResult:
    """What one pass of a rule did: how many instances it rewrote, and why the other candidates were not."""

    count: int
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Rule:
    """A fusion: its catalog row, its place in the chains, its anchors, ``match`` and ``rewrite``.

    Subclass it, set the attributes below and write ``match(node)`` (a :class:`Match`, ``Match.fail``,
    or None for a node that is no candidate at all) and ``rewrite(m)`` (a :class:`Rewrite`). Register
    an instance with ``workbench.fusion.register_rule`` (or ``app.add_rule`` in the notebook app).
    """

    #: The step's name in plans, the CLI and JSON.
    name: str = ""
    #: The catalog row (see ``catalog.Step``).
    title: str = ""
    matches: str = ""
    rewrites: str = ""  # the op pattern it rewrites, as text (the row's ``pattern``)
    emits: str = ""
    prerequisites: tuple[str, ...] = ()
    effect: str = ""
    session: tuple[str, ...] = ()
    kind: str = "fusion"
    default_on: bool = True
    in_bert: bool = True
    #: The step whose op this rule runs on another kernel instead (see ``steps.Step.alternative_to``).
    alternative_to: str = ""
    #: Chain → the step this rule follows in it ("ort", "onnxscript").
    after: dict[str, str] = {}
    #: Op types where matching starts; a graph without any of them is not visited at all.
    anchors: tuple[str, ...] = ()
    #: Op types that must be in the graph too for a match (a graph without one of them is not visited).
    needs: tuple[str, ...] = ()
    #: The domain the anchors must have (None: any; "" ONNX's own).
    anchor_domain: str | None = None
    #: Why the step cannot apply when no anchor is present (default: a sentence naming them).
    absent: str = ""
    #: The prefix of this rule's reasons (default: its name).
    label: str = ""
    #: Whether the rule emits ``com.microsoft`` ops (the domain is then declared).
    contrib: bool = True
    #: Said when candidates were found and none was rewritten, and when some were.
    unfused_note: str = ""
    fused_note: str = ""

    # ------------------------------------------------------------ what a rule writes
    def match(self, node) -> Match | None:
        raise NotImplementedError

    def rewrite(self, m: Match) -> Rewrite:
        raise NotImplementedError

    def begin(self, model) -> None:
        """Called before a pass over ``model`` (per-pass state: caches, shared initializers)."""

    def end(self) -> None:
        """Called after a pass."""

    # ------------------------------------------------------------ the generic runner
    def apply(self, model) -> RuleResult:
        """Run the rule over ``model`` (an ``onnx_ir.Model``) in place."""
        graph, count, reasons = model.graph, 0, []
        anchors = set(self.anchors)
        names = [v.name for v in graph.outputs]
        self.begin(model)
        try:
            for node in [n for n in graph if n.op_type in anchors]:
                if node.graph is None:  # removed by an earlier rewrite of this pass
                    continue
                m = self.match(node)
                if m is None:
                    continue
                if not m:
                    reasons.append(f"{self.label or self.name}: {m.reason}")
                    continue
                _place(graph, self.rewrite(m), node)
                count += 1
        finally:
            self.end()
        _keep_output_names(graph, names)
        finish(model, count, contrib=self.contrib)
        reasons = sorted(set(reasons))
        return RuleResult(count, reasons, self.notes(count, reasons))

    def notes(self, count: int, reasons: list[str]) -> list[str]:
        """Sentences for the step's diagnostic after a pass."""
        if count:
            return [self.fused_note] if self.fused_note else []
        return [self.unfused_note] if reasons and self.unfused_note else []

    # ------------------------------------------------------------ identity
    def row(self):
        """The catalog row of this rule."""

        return Step(self.name, self.title or self.name, self.matches or self.title or self.name, self.rewrites,
                    self.emits, tuple(self.prerequisites), self.effect or "", kind=self.kind,
                    default_on=self.default_on, in_bert=self.in_bert, session=tuple(self.session),
                    engines=("workbench",), alternative_to=self.alternative_to)

    def version(self) -> str:
        """A hash of this rule's code and settings: what a cached snapshot of it is keyed by."""
        h = hashlib.sha256()
        for cls in type(self).__mro__:
            if cls in (Rule, PatternRule, object):
                continue
            for key, value in sorted(vars(cls).items()):
                if key.startswith("__"):
                    continue
                func = getattr(value, "__func__", value)
                code = getattr(func, "__code__", None)
                if code is not None:
                    try:
                        text = inspect.getsource(func)
                    except (OSError, TypeError):
                        text = repr((code.co_code, code.co_consts, code.co_names))
                    h.update(f"{key}={text}".encode())
                elif not callable(value):
                    h.update(f"{key}={value!r}".encode())
        h.update(repr(sorted((k, repr(v)) for k, v in vars(self).items() if not k.startswith("_"))).encode())
        return h.hexdigest()[:16]


def _keep_output_names(graph, names: list[str]) -> None:
    """Give the graph outputs back the names they had before a rewrite replaced their producer.

    ``replace_all_uses_with(..., replace_graph_outputs=True)`` makes the new node's value the graph output
    under its own name (``val_19``): the fused file would answer ``last_hidden_state`` under another name.
    """
    for v, name in zip(list(graph.outputs), names):
        if v.name == name or not name:
            continue
        for node in graph:  # the replaced value, when its node is still there, gives its name up
            for o in node.outputs:
                if o.name == name and o is not v:
                    o.name = f"{name}__replaced"
        v.name = name


def _place(graph, rw: Rewrite, anchor) -> None:
    """Insert a rewrite's nodes with the anchor's scope and move every reader of an old value to its new one."""
    for old, new in rw.replace.items():
        if new.shape is None:
            new.shape = old.shape
        if new.type is None:
            new.type = old.type
    inherit_scope(rw.nodes, rw.scope if rw.scope is not None else anchor)
    at = rw.at if rw.at is not None else next(iter(rw.replace)).producer()
    graph.insert_before(at, rw.nodes)
    for old, new in rw.replace.items():
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)


pattern = LazyModule("onnxscript.rewriter.pattern")


class PatternCase:
    """One onnxscript pattern of a :class:`PatternRule`: ``pattern(op, ...)``, ``check(context, ...)``
    returning a ``MatchResult`` (``fail(reason, node)``), ``rewrite(op, ...)``, as onnxscript's
    ``RewriteRuleClassBase``."""

    #: The name onnxscript's matcher and its traces give this pattern.
    case_name: str = ""
    remove_nodes: bool = True

    def setup(self) -> None:
        """Per-model state before onnxscript's matcher visits a graph."""

    def cleanup(self) -> None:
        """Per-model state after the visit."""

    def onnxscript_rule(self):
        """This case as an onnxscript ``RewriteRule``."""
        return pattern.RewriteRule(self.pattern, self.rewrite, self.check, name=self.case_name or None,
                                   remove_nodes=self.remove_nodes, graph_pre_visitor=self.setup,
                                   graph_post_visitor=self.cleanup)


class PatternRule(PatternCase, Rule):
    """A rule matched by onnxscript's pattern matcher: one case (itself) or several (``cases()``).

    Its reasons are onnxscript's own trace of the best partial matches (``MatchingTracer``), which
    quotes the ``check``'s ``fail(reason, node)``.
    """

    def cases(self) -> tuple[PatternCase, ...]:
        return (self,)

    def rule_set(self):
        """The onnxscript ``RewriteRuleSet`` of this rule's cases."""
        return pattern.RewriteRuleSet([c.onnxscript_rule() for c in self.cases()])

    def left(self, model, count: int) -> int:
        """Candidates the pass left (traced for the reasons): by default, whether none was rewritten."""
        return 0 if count else 1

    def apply(self, model) -> RuleResult:
        rules = self.rule_set()
        with quiet_stdout():
            count = int(rules.apply_to_model(model))
        finish(model, count, contrib=False)  # the rewrite declares com.microsoft itself
        left = self.left(model, count)
        reasons = trace_rules(model, self.rule_set()) if left else []
        return RuleResult(count, reasons, self.pattern_notes(count, left, reasons))

    def pattern_notes(self, count: int, left: int, reasons: list[str]) -> list[str]:
        return self.notes(count, reasons)
