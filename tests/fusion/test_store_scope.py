"""Two models of one architecture in one process (a notebook with two apps open): each fusion reads its own
weights. The weight store names a weight by name, type and shape, so before the lookup was scoped a step of
the second model could pack the first model's Q/K/V into its Attention (seen as a parity mismatch about
half the time)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def _folder(path, seed: int, positions: int):
    import torch
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                      intermediate_size=64, vocab_size=200, max_position_embeddings=positions)
        transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(path)
    return path


def test_a_stub_reads_the_store_of_the_timeline_that_runs_the_step():
    from workbench.fusion.snapshot_weights import WeightStore, reading_from

    mine, other = WeightStore(), WeightStore()
    w = lambda v: numpy_helper.from_array(np.full((32, 32), v, np.float32), "q.weight")  # noqa: E731
    model = lambda v: onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], [w(v)]))  # noqa: E731
    other_skel, skel = other.strip(model(2.0)), mine.strip(model(1.0))
    assert WeightStore.stub_key(skel.graph.initializer[0]) == WeightStore.stub_key(other_skel.graph.initializer[0])
    for store, want in ((mine, 1.0), (other, 2.0)):
        with reading_from(store):
            assert numpy_helper.to_array(skel.graph.initializer[0])[0, 0] == want
    # outside a step onnx's own function is back: the process is not patched for good
    assert not hasattr(numpy_helper.to_array, "__wrapped__")


def test_two_models_of_one_architecture_fuse_with_their_own_weights(tmp_path):
    from workbench.config import FusionPlan
    from workbench.export import export
    from workbench.fusion import Timeline
    from workbench.models import resolve

    timelines = []
    for i, positions in enumerate((64, 32, 16, 6)):  # the same layer names and shapes, other weights
        src = resolve(_folder(tmp_path / f"m{i}", seed=i, positions=positions))
        tl = Timeline(export(src).path, FusionPlan(engine="ort"), num_heads=2, hidden_size=32, num_layers=1)
        snaps = tl.run()
        timelines.append(tl)  # every earlier model stays open, as in a notebook
        assert snaps[-1].fused.get("Attention") == 1
        bad = [(s.step, tl.check_parity(j).max_abs_diff) for j, s in enumerate(snaps) if j
               and not tl.check_parity(j).ok]
        assert not bad, (positions, bad)
