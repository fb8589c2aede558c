"""Which execution provider runs each node: ONNX Runtime's own graph assignment, typed.

A session opened with ``session.record_ep_graph_assignment_info`` (ONNX Runtime 1.31 and later) keeps, per
provider, the nodes it got (``get_provider_graph_assignment_info()``: ``OrtEpAssignedSubgraph`` objects with an
``ep_name`` and ``OrtEpAssignedNode`` s, each a ``name``, ``op_type`` and ``domain``). :class:`Assignment` holds
that, node by node, and says it: the count per provider, and each fall-back (a node that landed on another
provider than the one asked for) grouped by op type and domain, in one line ("12 Attention nodes fall back to
the CPU provider: OpenVINO takes no com.microsoft.Attention").

How the session's own optimizations map back to the file's node names (measured on bert-tiny and its fused
graph, onnxruntime 1.31): ONNX Runtime assigns providers after its provider-independent "basic" level
(constant folding, Identity and redundant-node elimination; ``Constant`` nodes become initializers even at
"disable") and before its "extended" and "all" levels, whose fusions each run only on nodes of the providers
they are written for. So a recorded node keeps the file's name, a file node absent from the record was removed
before the assignment (:attr:`Assignment.removed`: no provider runs it), and a fusion the session makes later
(``BiasGelu``, ``MatMulScaleFusion``) runs on the provider its parts were given: the file's names map one to
one, with no guessing. Nodes the basic level itself creates (none on these graphs) are kept as
:attr:`Assignment.added`. An OpenVINO or TensorRT subgraph lists the nodes it took before it compiles them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx

from ..errors import RuntimeUnavailableError
from .gpu import tensorrt_session
from .openvino_ep import EP as OPENVINO_EP
from .session import create_session

#: What a user calls each provider (lines, counts, JSON): the provider's name without "ExecutionProvider".
SHORT = {"CPUExecutionProvider": "CPU", "CUDAExecutionProvider": "CUDA", "TensorrtExecutionProvider": "TensorRT",
         OPENVINO_EP: "OpenVINO"}


def short(provider: str) -> str:
    """"OpenVINO" for "OpenVINOExecutionProvider" (a name not in :data:`SHORT` loses its suffix)."""
    return SHORT.get(provider, provider.removesuffix("ExecutionProvider"))


def counts_words(counts: dict[str, int] | None) -> str:
    """"OpenVINO 150, CPU 12": the nodes each provider runs (:meth:`Assignment.counts`, or its JSON's ``counts``)."""
    return ", ".join(f"{p} {k}" for p, k in (counts or {}).items())


def qualified(op_type: str, domain: str) -> str:
    """``com.microsoft.Attention``; ``ai.onnx.MatMul`` for the default domain."""
    return f"{domain or 'ai.onnx'}.{op_type}"


@dataclass(frozen=True)
class Node:
    """A node of the graph: its name, op type and domain ("" for ONNX's own)."""

    name: str
    op_type: str
    domain: str = ""


@dataclass(frozen=True)
class AssignedNode(Node):
    """A node as the session assigned it: the provider (short name, :func:`short`) that runs it."""

    provider: str = ""


@dataclass(frozen=True)
class Fallback:
    """Nodes of one op type that landed on ``provider`` instead of ``asked``; ``taken``: how many of the same op
    the asked provider did run."""

    op_type: str
    domain: str
    count: int
    provider: str
    asked: str
    taken: int = 0

    def words(self) -> str:
        op = qualified(self.op_type, self.domain)
        nodes = f"{self.count} {self.op_type} node{'s' if self.count != 1 else ''}"
        if self.taken:
            return (f"{self.count} of {self.count + self.taken} {self.op_type} nodes fall back to the {self.provider} "
                    f"provider: {self.asked} took the other {self.taken} ({op})")
        return f"{nodes} fall{'s' if self.count == 1 else ''} back to the {self.provider} provider: {self.asked} " \
               f"takes no {op}"


@dataclass(frozen=True)
class Assignment:
    """Which provider runs each node of one session.

    Attributes:
        asked: the provider asked for (short name: "CPU", "OpenVINO", "CUDA", "TensorRT").
        level: the session's optimization level ("disable" ... "all").
        nodes: every node the session assigned, in its order, with its provider.
        removed: the file's nodes the session removed before assigning (constants folded or made initializers,
            Identity and redundant nodes dropped):
            no provider runs them.
        added: names of assigned nodes the file does not have (made by the session's basic level).
    """

    asked: str
    level: str
    nodes: tuple[AssignedNode, ...]
    removed: tuple[Node, ...] = ()
    added: tuple[str, ...] = ()

    def providers(self) -> dict[str, str]:
        """File node name → the provider that runs it (the graph view's badge per node); removed nodes absent."""
        added = set(self.added)
        return {n.name: n.provider for n in self.nodes if n.name not in added}

    def counts(self) -> dict[str, int]:
        """Provider → nodes it runs, the provider asked for first, then by count."""
        c = Counter(n.provider for n in self.nodes)
        return dict(sorted(c.items(), key=lambda kv: (kv[0] != self.asked, -kv[1], kv[0])))

    def fallbacks(self) -> tuple[Fallback, ...]:
        """The nodes that landed elsewhere than :attr:`asked`, grouped by (op type, domain, provider), most first."""
        taken = Counter((n.op_type, n.domain) for n in self.nodes if n.provider == self.asked)
        fell = Counter((n.op_type, n.domain, n.provider) for n in self.nodes if n.provider != self.asked)
        out = [Fallback(op, dom, k, prov, self.asked, taken.get((op, dom), 0)) for (op, dom, prov), k in fell.items()]
        return tuple(sorted(out, key=lambda f: (-f.count, f.op_type, f.provider)))

    def words(self) -> str:
        """One line: "162 nodes: OpenVINO 150, CPU 12; the session removed 125 of the file's 287 before assigning
        providers (76 Constant, 19 Identity, 14 Unsqueeze, ...)"."""
        line = f"{len(self.nodes)} nodes: {counts_words(self.counts())}"
        if self.removed:
            ops = Counter(n.op_type for n in self.removed).most_common(4)
            shown = ", ".join(f"{k} {op}" for op, k in ops[:3]) + (", ..." if len(ops) > 3 else "")
            total = len(self.nodes) - len(self.added) + len(self.removed)
            line += (f"; the session removed {len(self.removed)} of the file's {total} before assigning providers "
                     f"({shown})")
        return line

    def lines(self) -> list[str]:
        """:meth:`words`, then one line per fall-back."""
        return [self.words()] + [f.words() for f in self.fallbacks()]

    def to_dict(self) -> dict:
        """JSON: the counts and the fall-backs (the per-node map is :meth:`providers`)."""
        return {"asked": self.asked, "level": self.level, "nodes": len(self.nodes), "counts": self.counts(),
                "removed": len(self.removed), "added": len(self.added), "words": self.words(),
                "fallbacks": [{"op_type": f.op_type, "domain": f.domain, "count": f.count, "provider": f.provider,
                               "taken": f.taken, "words": f.words()} for f in self.fallbacks()]}


def _file_nodes(model) -> list[Node]:
    """The file's nodes (a path, bytes or ModelProto; weights are not read)."""
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, bytes):
        proto = onnx.load_from_string(model)
    else:
        proto = onnx.load(str(model), load_external_data=False)
    return [Node(n.name, n.op_type, n.domain) for n in proto.graph.node]


def assignment_of(sess, model, asked: str, level: str) -> Assignment | None:
    """The assignment a session opened with ``record_assignment=True`` kept (None where this onnxruntime has no
    such record). ``model``: the file it was opened from (path, bytes or ModelProto), for the removed nodes;
    ``asked``: the provider asked for (its full or short name)."""
    get = getattr(sess, "get_provider_graph_assignment_info", None)
    if get is None:
        return None
    nodes = tuple(AssignedNode(n.name, n.op_type, n.domain or "", short(sg.ep_name))
                  for sg in get() for n in sg.get_nodes())
    if not nodes:
        return None  # the record was not switched on for this session
    file_nodes = _file_nodes(model)
    have, names = {n.name for n in nodes}, {n.name for n in file_nodes}
    return Assignment(short(asked), level, nodes, tuple(n for n in file_nodes if n.name not in have),
                      tuple(n.name for n in nodes if n.name not in names))


#: The providers :func:`record_assignment` opens, as a user names them.
CHOICES = ("cpu", "openvino", "cuda", "tensorrt")


def _open(model, provider: str, level: str, disabled_optimizers, initializers, ep_settings):
    if provider == "tensorrt":
        return tensorrt_session(model, level=level, record_assignment=True)
    return create_session(model, "cuda" if provider == "cuda" else "cpu", level=level, threads=1,
                          disabled_optimizers=disabled_optimizers, initializers=initializers,
                          ep="openvino" if provider == "openvino" else None, ep_settings=ep_settings,
                          record_assignment=True)


def record_assignment(model, provider: str = "cpu", *, level: str = "all", disabled_optimizers=(),
                      initializers: dict | None = None, ep_settings: dict | None = None) -> Assignment:
    """Open a session of ``model`` (a path, or bytes with ``initializers``) on ``provider`` (one of
    :data:`CHOICES`; each checked to really run, :func:`~workbench.ort.session.create_session`) at ``level`` and
    say which provider got each node.

    Raises:
        RuntimeUnavailableError: the provider cannot run here (one line why), or this onnxruntime keeps no
            assignment (1.31 and later do).
    """
    if provider not in CHOICES:
        raise ValueError(f"provider must be one of {', '.join(CHOICES)}, not {provider!r}")
    sess = _open(model, provider, level, disabled_optimizers, initializers, ep_settings)
    found = assignment_of(sess, model, sess.get_providers()[0], level)
    if found is None:
        import onnxruntime as ort

        raise RuntimeUnavailableError(f"onnxruntime {ort.__version__} does not say which provider runs each node "
                                      "(get_provider_graph_assignment_info: 1.31 and later)")
    return found


def node_providers(model, provider: str = "cpu", **kw) -> dict[str, str]:
    """File node name → the provider that runs it in a session of ``model`` on ``provider`` (the graph view's
    badge per node: ``graph_scene(..., providers=...)`` once its node ids are resolved from these names)."""
    return record_assignment(model, provider, **kw).providers()


__all__ = ["Node", "AssignedNode", "Fallback", "Assignment", "SHORT", "CHOICES", "short", "qualified", "counts_words",
           "assignment_of", "record_assignment", "node_providers"]
