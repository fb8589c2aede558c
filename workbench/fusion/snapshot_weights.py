"""Snapshots without copies of the weights.

A bert-base model is about 440 MB of weights and a timeline keeps a snapshot
after every step of two engines; full copies would need several GB. A
snapshot keeps a *skeleton* (the model with each large initializer replaced
by a stub that names an entry of a shared :class:`WeightStore`), and the
full model is assembled on demand.

Weights are keyed by name, type, shape and size. Neither engine rewrites an
existing initializer in place under its old name (they add new ones, e.g.
the packed QKV weight), so equal keys mean equal data.

ONNX Runtime's fusion steps also run on skeletons: they read graph structure,
names, types and dims, and read weight *values* only through
``onnx.numpy_helper.to_array`` (Q/K/V packing, bias checks, constant
folding). Inside :func:`reading_from` (the runner opens one around each
engine step) that function answers a stub with the stored tensor's values,
so a step needs no 440 MB copy of the model; outside, it is onnx's own.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref

import onnx
from onnx import numpy_helper

from ..concurrency import new_lock

#: Initializers at least this large are shared, not copied, between snapshots.
THRESHOLD = 4096
_MARK = "workbench-weight-store"


#: Bytes per element of the numeric tensor types.
_ITEMSIZE = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
             onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.INT64: 8, onnx.TensorProto.INT32: 4,
             onnx.TensorProto.INT16: 2, onnx.TensorProto.INT8: 1, onnx.TensorProto.UINT8: 1,
             onnx.TensorProto.UINT16: 2, onnx.TensorProto.UINT32: 4, onnx.TensorProto.UINT64: 8,
             onnx.TensorProto.BOOL: 1}


def nbytes(t: onnx.TensorProto) -> int:
    """Size of a tensor's data from its type and dims.

    ``TensorProto.ByteSize()`` walks the message and costs about 0.3 ms per
    bert-base weight; a timeline strips every snapshot, so this matters.
    """
    item = _ITEMSIZE.get(t.data_type)
    if item is None:
        return t.ByteSize()
    n = 1
    for d in t.dims:
        n *= d
    return n * item


def weight_key(t: onnx.TensorProto, size: int) -> str:
    return f"{t.name}|{t.data_type}|{','.join(map(str, t.dims))}|{size}"


_STORES: "weakref.WeakSet[WeightStore]" = weakref.WeakSet()
#: Open ``reading_from`` blocks, and onnx's own ``to_array`` while they are open.
_HOOK: dict = {"lock": new_lock(), "users": 0, "original": None}


def is_stub(t: onnx.TensorProto) -> bool:
    """Whether ``t`` is a weight-store stub (no data of its own)."""
    return WeightStore.stub_key(t) is not None


#: The store a stub's values are read from in this thread (a context variable: a rule's thread under its
#: time limit runs in a copy of its caller's context, so it reads the caller's store).
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("workbench_weight_store", default=None)


@contextlib.contextmanager
def reading_from(store: "WeightStore"):
    """Within this block (in this thread) a stub's values come from ``store`` only.

    Keys name a weight by name, type and shape, not by content: two models of one architecture (a
    random bert-base and a fine-tuned one, or two sizes of position table with the same layers) have
    equal keys for different values, so a step must read its own timeline's store, never the first
    live store that happens to hold an equal key.
    """
    token = _ACTIVE.set(store)
    _hook(True)
    try:
        yield store
    finally:
        _hook(False)
        _ACTIVE.reset(token)


def _stored(t: onnx.TensorProto) -> onnx.TensorProto | None:
    key = WeightStore.stub_key(t)
    if key is None:
        return None
    active = _ACTIVE.get()
    if active is not None:
        return active.get(key)
    for store in list(_STORES):
        full = store.get(key)
        if full is not None:
            return full
    return None


def _hook(on: bool) -> None:
    """Count a reader in (``on``) or out; ``onnx.numpy_helper.to_array`` answers a stub with its store's values
    while any :func:`reading_from` block is open, and is onnx's own function again once none is."""
    with _HOOK["lock"]:
        _HOOK["users"] += 1 if on else -1
        if on and _HOOK["users"] == 1:
            original = _HOOK["original"] = numpy_helper.to_array

            def to_array(tensor, base_dir: str = ""):
                if tensor.data_location == onnx.TensorProto.EXTERNAL:
                    full = _stored(tensor)
                    if full is not None:
                        return original(full)
                return original(tensor, base_dir)

            to_array.__doc__ = original.__doc__
            to_array.__wrapped__ = original
            numpy_helper.to_array = to_array
        elif not on and _HOOK["users"] == 0:
            numpy_helper.to_array = _HOOK["original"]


class WeightStore:
    """Large initializers shared by all snapshots of one timeline."""

    def __init__(self):
        self._tensors: dict[str, onnx.TensorProto] = {}
        #: (loader, keys): where the weights of a reopened timeline come from, read on first use.
        self._deferred: tuple | None = None
        self._load_lock = new_lock(reentrant=True)
        _STORES.add(self)

    def __len__(self) -> int:
        return len(self.tensors)

    @property
    def tensors(self) -> dict[str, onnx.TensorProto]:
        """Every stored tensor by key (reads deferred weights first)."""
        if self._deferred is not None:
            self._load_deferred()
        return self._tensors

    def defer(self, loader, keys) -> None:
        """Take the tensors ``keys`` from ``loader()`` (a full model) only when one is first read.

        A timeline reopened from disk (``timeline_store.py``) shows skeletons; the
        export's 440 MB are parsed only when a snapshot is assembled or an
        engine step runs.
        """
        self._deferred = (loader, frozenset(keys))

    def has(self, key: str) -> bool:
        """Whether ``key`` is stored or deferred (never reads deferred weights)."""
        return key in self._tensors or (self._deferred is not None and key in self._deferred[1])

    def get(self, key: str) -> onnx.TensorProto | None:
        """The tensor stored under ``key``, or None; reads deferred weights only when ``key`` is one of them."""
        t = self._tensors.get(key)
        if t is None and self._deferred is not None and key in self._deferred[1]:
            self._load_deferred()
            t = self._tensors.get(key)
        return t

    def add(self, key: str, tensor: onnx.TensorProto) -> None:
        """Store ``tensor`` under ``key`` (a weight read back from disk); an existing entry wins."""
        self._tensors.setdefault(key, tensor)

    def _require(self, key: str) -> onnx.TensorProto:
        t = self.get(key)
        if t is None:
            raise KeyError(key)
        return t

    def _load_deferred(self) -> None:
        with self._load_lock:
            if self._deferred is None:
                return
            loader, _ = self._deferred
            self.strip(loader(), take=True)
            self._deferred = None

    # ------------------------------------------------------------ protobuf
    def strip(self, model: onnx.ModelProto, *, take: bool = False) -> onnx.ModelProto:
        """Return a skeleton of ``model``; its large weights go into the store.

        With ``take`` the store keeps ``model``'s own tensors instead of copies
        (for a model nobody else holds, e.g. one just read from a file).
        """
        skel = onnx.ModelProto()
        g_src = model.graph
        graph = model.graph
        # Copy everything but the initializers, then add them one by one.
        inits = list(graph.initializer)
        skel.ir_version = model.ir_version
        skel.producer_name = model.producer_name
        skel.producer_version = model.producer_version
        skel.domain = model.domain
        skel.model_version = model.model_version
        skel.doc_string = model.doc_string
        skel.opset_import.extend(model.opset_import)
        skel.metadata_props.extend(model.metadata_props)
        skel.functions.extend(model.functions)
        g = skel.graph
        g.name = g_src.name
        g.node.extend(g_src.node)
        g.input.extend(g_src.input)
        g.output.extend(g_src.output)
        g.value_info.extend(g_src.value_info)
        g.sparse_initializer.extend(g_src.sparse_initializer)
        for t in inits:
            size = nbytes(t)
            if size < THRESHOLD or t.data_location == onnx.TensorProto.EXTERNAL:
                g.initializer.add().CopyFrom(t)
                continue
            key = weight_key(t, size)
            if key not in self._tensors:
                if take:
                    own = t
                else:
                    own = onnx.TensorProto()
                    own.CopyFrom(t)
                self._tensors[key] = own
            g.initializer.append(self.stub(t, key))
        return skel

    @staticmethod
    def stub(t: onnx.TensorProto, key: str) -> onnx.TensorProto:
        stub = onnx.TensorProto(name=t.name, data_type=t.data_type, dims=list(t.dims))
        stub.data_location = onnx.TensorProto.EXTERNAL
        e = stub.external_data.add()
        e.key, e.value = "location", _MARK
        e = stub.external_data.add()
        e.key, e.value = "checksum", key
        return stub

    @staticmethod
    def stub_key(t: onnx.TensorProto) -> str | None:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            return None
        info = {e.key: e.value for e in t.external_data}
        return info.get("checksum") if info.get("location") == _MARK else None

    def working_copy(self, skeleton: onnx.ModelProto) -> onnx.ModelProto:
        """A copy of a skeleton an ONNX Runtime fusion step may edit; weights stay stubs.

        Their values are read inside :func:`reading_from`.
        """
        if any(t.data_type == onnx.TensorProto.BFLOAT16 and is_stub(t) for t in skeleton.graph.initializer):
            # ORT reads bfloat16 weights through onnx_ir, not numpy_helper: give it the data.
            return self.assemble(skeleton)
        copy = onnx.ModelProto()
        copy.CopyFrom(skeleton)
        return copy

    def arrays(self, skeleton: onnx.ModelProto) -> dict:
        """The values of ``skeleton``'s stubs as numpy arrays, by initializer name (for
        ``create_session(initializers=...)``: no whole-model copy or serialization)."""
        to_array = getattr(numpy_helper.to_array, "__wrapped__", numpy_helper.to_array)
        out = {}
        for t in skeleton.graph.initializer:
            key = self.stub_key(t)
            if key is not None:
                out[t.name] = to_array(self._require(key))
        return out

    def assemble(self, skeleton: onnx.ModelProto) -> onnx.ModelProto:
        """A full, independent ModelProto built from a skeleton."""
        full = onnx.ModelProto()
        full.CopyFrom(skeleton)
        for t in full.graph.initializer:
            key = self.stub_key(t)
            if key is not None:
                t.CopyFrom(self._require(key))
        return full

    # ------------------------------------------------------------ onnx_ir
    def strip_ir(self, model) -> onnx.ModelProto:
        """Skeleton of an ``onnx_ir.Model`` without serializing its large weights."""
        import onnx_ir as ir

        swapped = []
        try:
            for value in list(model.graph.initializers.values()):
                tensor = value.const_value
                if tensor is None or tensor.nbytes < THRESHOLD or isinstance(tensor, ir.ExternalTensor):
                    continue
                shape = tuple(int(d) for d in tensor.shape)
                key = f"{value.name}|{int(tensor.dtype)}|{','.join(map(str, shape))}|{tensor.nbytes}"
                if not self.has(key):
                    proto = ir.serde.serialize_tensor(tensor)
                    proto.name = value.name
                    self._tensors[key] = proto
                stub = ir.ExternalTensor(location=_MARK, offset=0, length=tensor.nbytes, dtype=tensor.dtype,
                                         shape=ir.Shape(shape), name=key, base_dir="")
                swapped.append((value, tensor))
                value.const_value = stub
            skel = ir.serde.serialize_model(model)
        finally:
            for value, tensor in swapped:
                value.const_value = tensor
        for t in skel.graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                info = {e.key: e.value for e in t.external_data}
                if info.get("location") == _MARK:
                    # The stub's tensor name carried the key; restore the real name.
                    key = self._ir_key(t, info)
                    if key is not None:
                        del t.external_data[:]
                        e = t.external_data.add()
                        e.key, e.value = "location", _MARK
                        e = t.external_data.add()
                        e.key, e.value = "checksum", key
        return skel

    def _ir_key(self, t: onnx.TensorProto, info: dict) -> str | None:
        size = int(info.get("length", -1))
        key = f"{t.name}|{t.data_type}|{','.join(map(str, t.dims))}|{size}"
        return key if self.has(key) else None

    def load_ir(self, skeleton: onnx.ModelProto):
        """An ``onnx_ir.Model`` from a skeleton, weights shared with the store (no copy).

        ``skeleton`` may also be a partly stubbed model (a step's working copy
        with new, real initializers).
        """
        import onnx_ir as ir

        # onnx_ir keeps references into the proto it reads and writes to them (it names the tensors of
        # Constant nodes), and a snapshot's skeleton must never change: read a copy.
        copy = onnx.ModelProto()
        copy.CopyFrom(skeleton)
        model = ir.serde.deserialize_model(copy)
        for value in model.graph.initializers.values():
            t = value.const_value
            if isinstance(t, ir.ExternalTensor) and t.location == _MARK:
                key = self._key_from_value(skeleton, value.name)
                value.const_value = ir.serde.TensorProtoTensor(self._require(key))
        return model

    def _key_from_value(self, skeleton: onnx.ModelProto, name: str) -> str:
        cache = getattr(self, "_name_cache", None)
        if cache is None or cache[0] is not skeleton or cache[1].get(name) is None:
            cache = (skeleton, {t.name: self.stub_key(t) for t in skeleton.graph.initializer})
            self._name_cache = cache
        return cache[1][name]
