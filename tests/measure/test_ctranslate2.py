"""CTranslate2, the peer added as one recipe file: converted, int8, ragged batches, answers checked, skipped with
its converter's reason where the converter has no conversion for a family."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def minilm():
    from workbench.models import resolve

    return resolve("minilm")  # the packaged all-MiniLM-L6-v2


def test_ctranslate2_keeps_minilms_answers_on_the_check_part(minilm):
    """As the tune times it: one sentence at a time, the check part's answers against ONNX Runtime fp32."""
    from workbench.config import BenchConfig
    from workbench.measure.harness.bench import benchmark
    from workbench.ort.answer_policy import holds
    from workbench.measure.variants import build_variants
    from workbench.measure.tune.workload import latency_text
    from workbench.measure.variants.split import split

    parts = split(None)
    text, idx = latency_text(minilm, parts)
    vs = build_variants(minilm, ["unfused", "ctranslate2"])
    res = benchmark(vs, BenchConfig(runs=3, warmup=1, threads=2), reference="unfused", text=text, text_parts=idx,
                    floor=False, timeout=600)
    ct = next(v for v in res.variants if v.name == "ctranslate2")
    assert ct.session_providers == ["CTranslate2 CPU (int8)"] and ct.p50_ms > 0
    assert ct.task_parity["kind"] == "embedding" and ct.task_parity["sentences"] == len(parts.check)
    assert holds(ct.task_parity), ct.task_parity
    assert ct.parity["cosine"] > 0.98  # one sentence per run: no padding in either output


def test_a_ragged_batch_gives_each_sentence_what_it_gives_alone(minilm, tmp_path):
    """The padded batch goes in as token lists without padding; each row's real tokens match the sentence run
    alone, the padding comes back as zeros; the conversion is built once (a second build is a lookup)."""
    from pathlib import Path

    from workbench.measure.variants import build_variants
    from workbench.measure.variants.ctranslate2 import Ct2Runner
    from workbench.ort.task_parity import mean_pool
    from workbench.text import text_batches

    v = build_variants(minilm, ["ctranslate2"])[0]
    assert build_variants(minilm, ["ctranslate2"])[0].model == v.model  # cached in the model store
    assert {"model.bin", "config.json"} <= {p.name for p in Path(v.model).iterdir()}
    batch = next(b for b in text_batches(minilm).batches if (b["attention_mask"] == 0).any())
    r = Ct2Runner(v.describe(), 2, tmp_path)
    r.prepare(batch)
    out = r.output()
    assert out.shape[:2] == batch["input_ids"].shape
    lengths = batch["attention_mask"].sum(axis=1)
    for k, n in enumerate(lengths):
        alone = {name: a[k:k + 1, :n] for name, a in batch.items()}
        r.prepare(alone)
        one = r.output()
        assert not out[k, n:].any()
        a, b = mean_pool(out[k:k + 1, :n], alone["attention_mask"]), mean_pool(one, alone["attention_mask"])
        assert float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b)) > 0.999
    r.close()


def test_a_family_its_converter_lacks_is_skipped_with_the_reason(tmp_path):
    """MPNet: skipped with the reason by ``available`` (as ``workbench tune`` does), one line when asked by name,
    and the converter itself refuses it (the recipe's list says what the converter does)."""
    import torch
    import transformers

    from workbench.errors import BenchmarkError
    from workbench.measure.variants import available, build_variants
    from workbench.measure.variants.ctranslate2 import convert
    from workbench.models import resolve

    torch.manual_seed(0)
    cfg = transformers.MPNetConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                   vocab_size=100)
    transformers.MPNetModel(cfg).save_pretrained(tmp_path / "mpnet")
    src = resolve(str(tmp_path / "mpnet"))
    names, skipped = available(["fused", "ctranslate2"], src)
    assert names == ["fused"] and skipped[0]["name"] == "ctranslate2"
    assert "no conversion for mpnet" in skipped[0]["why"] and "\n" not in skipped[0]["why"]
    with pytest.raises(BenchmarkError, match="ctranslate2: .*mpnet.*drop it from --variants"):
        build_variants(src, ["ctranslate2"])
    with pytest.raises(BenchmarkError, match="No conversion is registered for the model configuration MPNetConfig"):
        convert(src, tmp_path / "out")


def test_an_onnx_file_has_no_model_for_its_converter(tiny_export):
    from workbench.measure.variants import available
    from workbench.models import resolve

    names, skipped = available(["unfused", "ctranslate2"], resolve(str(tiny_export().path)))
    assert names == ["unfused"] and "ONNX file" in skipped[0]["why"]
