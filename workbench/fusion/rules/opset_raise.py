"""Whether a model's ONNX opset can be raised without changing what any of its standard ops computes.

A rule that writes an op of a later opset (ONNX's standard ``Attention`` is opset 23) must raise the
default domain's version for the whole graph, and every standard op then runs under its definition at the
new opset. That is safe when each op's definition is the same there: its schema at the new opset is the one
it has at the model's opset (``get_schema(op, new).since_version <= old``), or every version in between
only widened its types, or added an attribute whose default keeps the old meaning (:data:`KEEPS_MEANING`:
``Cast`` 19, 21, 23 add float8 and 4-bit types and ``saturate``, which only applies to float8; ``Reshape``,
``Shape``, ``Transpose`` and the other shape ops 19 to 23 only add types). Anything else, an input or output
added, removed or made optional, an attribute added, removed or its default changed, a type dropped, is a
change of definition (``ReduceMean`` 18 moved ``axes`` from an attribute to an input; ``Split`` 18 needs
``num_outputs`` for an equal split; ``Softmax`` 13 changed its axis default and what it normalizes), and
:func:`raise_blockers` names it.
"""

from __future__ import annotations

from functools import lru_cache

from onnx import defs

#: Attributes added by a later version whose default keeps the old meaning for every node valid before
#: (read in ONNX's Changelog). Any other attribute added is a change: ``Split`` 18's ``num_outputs`` makes
#: an equal split without ``split`` invalid.
KEEPS_MEANING: dict[str, tuple[str, ...]] = {
    "Cast": ("saturate",),  # 19: float8 targets only
    "CastLike": ("saturate",),
    "Shape": ("start", "end"),  # 15: the defaults give the whole shape
}

#: The domains whose version is the model's default opset.
DEFAULT_DOMAINS = ("", "ai.onnx")


@lru_cache(maxsize=None)
def _versions(op: str) -> tuple[int, ...]:
    return tuple(sorted(s.since_version for s in defs.get_all_schemas_with_history()
                        if s.name == op and s.domain == ""))


@lru_cache(maxsize=None)
def _schema(op: str, version: int):
    try:
        return defs.get_schema(op, version, "")
    except defs.SchemaError:
        return None


def _params(params) -> list[tuple]:
    return [(p.name, p.option, p.type_str) for p in params]


def _what_changed(old, new) -> str:
    """Why ``new`` is not ``old`` with only wider types and new defaulted attributes; "" when it is."""
    if _params(old.inputs) != _params(new.inputs):
        return "its inputs changed"
    if _params(old.outputs) != _params(new.outputs):
        return "its outputs changed"
    for name, attr in old.attributes.items():
        if name not in new.attributes:
            return f"its attribute {name!r} was removed"
        if attr.default_value.SerializeToString() != new.attributes[name].default_value.SerializeToString():
            return f"the default of its attribute {name!r} changed"
        if attr.required != new.attributes[name].required:
            return f"its attribute {name!r} became {'required' if new.attributes[name].required else 'optional'}"
    for name in new.attributes:
        if name not in old.attributes and name not in KEEPS_MEANING.get(new.name, ()):
            return f"it gained the attribute {name!r}"
    old_types = {c.type_param_str: set(c.allowed_type_strs) for c in old.type_constraints}
    new_types = {c.type_param_str: set(c.allowed_type_strs) for c in new.type_constraints}
    for param, allowed in old_types.items():
        if not allowed <= new_types.get(param, set()):
            return f"its type constraint {param} lost types"
    return ""


@lru_cache(maxsize=None)
def op_blocker(op: str, old: int, new: int) -> str:
    """Why ``op`` (ONNX's own domain) computes differently at opset ``new`` than at ``old``; "" when it does not."""
    current = _schema(op, old)
    if current is None:
        return f"{op} is no ONNX op at opset {old}"
    if _schema(op, new) is None:
        return f"{op} is no ONNX op at opset {new}"
    if _schema(op, new).since_version <= old:
        return ""
    for version in (v for v in _versions(op) if current.since_version < v <= new):
        schema = _schema(op, version)
        why = _what_changed(current, schema)
        if why:
            return f"{op} changed at opset {version} ({why})"
        current = schema
    return ""


def _ops(model) -> set[str]:
    """The standard op types in an ``onnx_ir`` model's graph, its subgraphs and its local functions."""
    import onnx_ir as ir  # lazy: the rules' rows are read without onnx_ir

    found = {n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.domain in DEFAULT_DOMAINS}
    for fn in model.functions.values():
        found |= {n.op_type for n in ir.traversal.RecursiveGraphIterator(fn) if n.domain in DEFAULT_DOMAINS}
    return found


def raise_blockers(model, target: int, *, ignore: tuple[str, ...] = ()) -> list[str]:
    """Why the default opset of ``model`` (an ``onnx_ir.Model``) cannot be raised to ``target``; [] when it can.

    ``ignore``: op types the caller is about to replace (they will not be in the raised graph).
    """
    old = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if old is None or old >= target:
        return []
    return [why for op in sorted(_ops(model) - set(ignore)) if (why := op_blocker(op, old, target))]
