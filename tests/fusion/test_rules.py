"""The rule protocol and its registry: one object per fusion, chains of step names, the catalog built from the
rules, a rule added at run time; the runner's promises (nothing inserted before a match is decided, every new
node in its anchor's layer, reasons that name the node and its layer), on tiny graphs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T, helper as h

from workbench.config import FusionPlan
from workbench.errors import FusionError
from workbench.fusion import BY_NAME, CATALOG, Match, Rewrite, Rule, register_rule, unregister_rule
from workbench.fusion.registry import chain, plan_key, rules, steps
from workbench.fusion.steps import ENGINE_ROWS


def test_chains_list_rule_names_and_the_catalog_is_built_from_the_rules():
    for rule in rules():
        assert BY_NAME[rule.name] == rule.row() and BY_NAME[rule.name].engines == ("workbench",)
        for engine, step in rule.after.items():
            names = list(chain(engine))
            # right after the step it names, or after rules placed after that step
            between = names[names.index(step) + 1:names.index(rule.name)]
            assert all(BY_NAME[n].engines == ("workbench",) for n in between), (rule.name, between)
    assert sorted(s.name for s in CATALOG) == sorted({r.name for r in ENGINE_ROWS} | {r.name for r in rules()})
    # an engine row says which chains run it, read from the chains
    assert BY_NAME["attention"].engines == ("ort", "onnxscript") and BY_NAME["embed_layer_norm"].engines == ("ort",)
    # the order of today's chains, rule names included
    assert chain("ort")[:4] == ("ort_basic", "identity_cast", "standard_attention", "layer_norm")
    os_chain = chain("onnxscript")
    assert os_chain.index("encoder_rotary") == os_chain.index("encoder_skip_norm") + 1
    assert os_chain[os_chain.index("fast_gelu"):os_chain.index("fast_gelu") + 3] == ("fast_gelu", "tanh_gelu",
                                                                                     "encoder_silu")
    assert all(s.anchors is not None for e in ("ort", "onnxscript") for s in steps(e))  # every step: its anchors


class _Negate(Rule):
    """A toy rule: Neg(Neg(x)) → x's readers read x (drops two nodes)."""

    name = "toy_double_neg"
    title = "Double negation removed (test rule)"
    emits = ""
    after = {"onnxscript": "cse"}
    anchors = ("Neg",)

    def match(self, neg):
        inner = neg.inputs[0].producer()
        if inner is None or inner.op_type != "Neg":
            return Match.fail("{node} does not negate a Neg", neg)
        return Match(neg=neg, x=inner.inputs[0])

    def rewrite(self, m):
        ident = ir.node("Identity", [m.x])
        return Rewrite([ident], {m.neg.outputs[0]: ident.outputs[0]})


def test_a_rule_added_at_run_time_joins_its_chain_the_catalog_and_the_cache_keys():
    before = chain("onnxscript")
    register_rule(_Negate())
    try:
        names = chain("onnxscript")
        assert names.index("toy_double_neg") == names.index("cse") + 1 and "toy_double_neg" not in chain("ort")
        assert BY_NAME["toy_double_neg"].title == "Double negation removed (test rule)"
        step = next(s for s in steps("onnxscript") if s.name == "toy_double_neg")
        assert step.version and step.key(True) == ("toy_double_neg", True, step.version)
        # a fused model cached by plan is keyed by the added rule while it runs, not when it is off
        assert plan_key(FusionPlan(engine="onnxscript")) != "onnxscript-off:-in:"
        assert plan_key(FusionPlan(engine="onnxscript", disabled=frozenset({"toy_double_neg"}))) == "onnxscript-off:-in:"
        assert plan_key(FusionPlan(engine="ort")) == "ort-off:-in:"
    finally:
        unregister_rule("toy_double_neg")
    assert chain("onnxscript") == before and "toy_double_neg" not in BY_NAME


@pytest.mark.parametrize("bad,message", [
    (dict(name=""), "needs a name"),
    (dict(after={}), "after which step"),
    (dict(after={"tensorrt": "cse"}), "after which step"),
    (dict(after={"onnxscript": "no_such_step"}), "no step of the onnxscript chain"),
    (dict(anchors=()), "anchor op types"),
    (dict(name="gelu"), "step of an engine"),
])
def test_a_rule_that_does_not_say_what_it_needs_is_refused(bad, message):
    rule = type("Bad", (_Negate,), bad)()
    with pytest.raises(FusionError, match=message):
        register_rule(rule)
    assert "Bad" not in [type(r).__name__ for r in rules()]


def _model(nodes, inputs, outputs, inits=(), opset=18) -> ir.Model:
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(
        h.make_model(g, opset_imports=[h.make_opsetid("", opset)])))


def test_a_refusal_names_the_node_and_its_layer_and_rewrites_only_what_matched():
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 3])
    nodes = [h.make_node("Neg", ["x"], ["a"], name="/encoder/layer.3/Neg_a"),
             h.make_node("Neg", ["a"], ["b"], name="/encoder/layer.3/Neg_b"),
             h.make_node("Relu", ["b"], ["y"])]
    model = _model(nodes, [x], [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    result = _Negate().apply(model)
    assert result.count == 1
    assert result.reasons == ["toy_double_neg: Neg /encoder/layer.3/Neg_a (layer 3) does not negate a Neg"]
    assert [n.op_type for n in model.graph] == ["Identity", "Relu"]  # the two Negs nothing reads are gone
    assert not Match.fail("{node} x", next(iter(model.graph)))  # a refusal is false


def _rms(mixed: bool) -> ir.Model:
    """x * 1/sqrt(mean(x^2) + eps) * w, written out; ``mixed``: cast to fp16 before the weight."""
    f16 = T.FLOAT16 if mixed else T.FLOAT
    w = h.make_tensor("w", f16, [8], np.ones(8).tolist())
    nodes = [h.make_node("Pow", ["x", "two"], ["sq"]), h.make_node("ReduceMean", ["sq", "axes"], ["ms"]),
             h.make_node("Add", ["ms", "eps"], ["mse"]), h.make_node("Sqrt", ["mse"], ["rms"], name="/layer.0/Sqrt"),
             h.make_node("Reciprocal", ["rms"], ["inv"]), h.make_node("Mul", ["x", "inv"], ["n"]),
             h.make_node("Cast", ["n"], ["nc"], to=f16), h.make_node("Mul", ["nc", "w"], ["y"], name="/layer.0/Mul_w")]
    inits = [h.make_tensor("two", T.FLOAT, [], [2.0]), h.make_tensor("axes", T.INT64, [1], [-1]),
             h.make_tensor("eps", T.FLOAT, [], [1e-6]), w]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8])],
                  [h.make_tensor_value_info("y", f16, [1, 4, 8])], inits)


def test_a_norm_that_is_not_matched_gets_no_node_inserted():
    from workbench.fusion.rules import RmsNormRule

    model = _rms(mixed=True)
    before = [n.op_type for n in model.graph]
    result = RmsNormRule().apply(model)
    assert result.count == 0 and "mixed-precision" in result.reasons[0] and "(layer 0)" in result.reasons[0]
    assert [n.op_type for n in model.graph] == before  # no orphan SimplifiedLayerNormalization left behind
    model = _rms(mixed=False)
    assert RmsNormRule().apply(model).count == 1
    assert [n.op_type for n in model.graph] == ["SimplifiedLayerNormalization"]


def test_every_new_node_takes_its_anchors_layer_scope():
    """The dynamo exporter names a node's layer only in its metadata: a fused node must carry it too."""
    from workbench.fusion.rules import TanhGeluRule

    c = {name: h.make_tensor(name, T.FLOAT, [], [v]) for name, v in
         (("three", 3.0), ("k", 0.044715), ("s", 0.7978845608), ("one", 1.0), ("half", 0.5))}
    nodes = [h.make_node("Pow", ["x", "three"], ["x3"]), h.make_node("Mul", ["x3", "k"], ["kx3"]),
             h.make_node("Add", ["x", "kx3"], ["inner"]), h.make_node("Mul", ["inner", "s"], ["arg"]),
             h.make_node("Tanh", ["arg"], ["t"], name="node_tanh"), h.make_node("Add", ["t", "one"], ["t1"]),
             h.make_node("Mul", ["x", "half"], ["hx"]), h.make_node("Mul", ["hx", "t1"], ["y"])]
    scope = onnx.StringStringEntryProto(key="pkg.torch.onnx.name_scopes", value="['', 'encoder', 'layer.5']")
    nodes[4].metadata_props.append(scope)
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                   [h.make_tensor_value_info("y", T.FLOAT, [2, 4])], c.values())
    assert TanhGeluRule().apply(model).count == 1
    (gelu,) = [n for n in model.graph if n.op_type == "FastGelu"]
    assert gelu.metadata_props["pkg.torch.onnx.name_scopes"] == scope.value
    from workbench.fusion.graph_utils import node_label

    assert node_label(gelu).endswith("(layer 5)")
