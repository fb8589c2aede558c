"""The measuring processes' messages are dataclasses in one module, pickled across the pipe whole."""
from __future__ import annotations

import dataclasses
import pickle

import pytest

from workbench.errors import BenchmarkError, ConfigError
from workbench.measure.worker import protocol as msgs

EXAMPLES = [
    msgs.BenchJob([{"name": "a"}], {"runs": 3}, text={"kind": "embedding"}), msgs.ThroughputJob([], {}, {"corpus": []}),
    msgs.ProfileJob([{"name": "a"}], {"runs": 3}), msgs.SliceJob({"name": "a"}, 1, latency=[]), msgs.Stop(), msgs.Slice("latency", 3), msgs.End(),
    msgs.Status("building", "fused", 0, 2), msgs.Ready({"cpu": "x"}, {"pid": 1}, [{"name": "a"}]),
    msgs.Floor({"floor_ms": 1.0}), msgs.Sample("a", 0, 1.5), msgs.Sample("a", 1, 30.0, sentences=39),
    msgs.Parity("b", "a", 1e-6, 1.0, {"kind": "embedding"}, {"check": {"kind": "embedding"}}),
    msgs.Profile("a", "cpu", [{"op": "MatMul"}], 1.0, 3, ["CPUExecutionProvider"]),
    msgs.Batch("a", 16, {"16": 400.0}, 39), msgs.Memory(200.0), msgs.Done(stopped=True),
    msgs.Error("ConfigError", "bad", "tb"), msgs.SliceReady(["CPUExecutionProvider"]), msgs.SliceTimes([1.0, 2.0]),
    msgs.SliceDone(150.0),
]


def test_every_message_is_a_frozen_dataclass_that_crosses_the_pipe_unchanged():
    names = {type(m).__name__ for m in EXAMPLES}
    assert names == set(msgs.__all__) - {"Message"}  # an example of each
    for m in EXAMPLES:
        assert dataclasses.is_dataclass(m) and pickle.loads(pickle.dumps(m)) == m
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(m, "x", 1)


def test_each_message_from_a_process_says_its_kind():
    sent = [m for m in EXAMPLES if isinstance(m, msgs.Message)]
    assert all(m.kind for m in sent)
    assert {m.kind for m in sent} >= {"status", "ready", "floor", "sample", "parity", "profile", "batch", "memory",
                                      "done", "error", "slice"}


def test_an_error_message_raises_the_workers_own_class_or_says_what_failed():
    assert isinstance(msgs.Error("ConfigError", "bad shape").exception(), ConfigError)
    e = msgs.Error("internal", "ValueError: boom").exception()
    assert isinstance(e, BenchmarkError) and str(e) == "the benchmark worker failed: ValueError: boom"
    assert isinstance(msgs.Error("NotAnError", "x").exception(), BenchmarkError)
