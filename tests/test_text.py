"""Real text in: sentence files, the model's own tokenizer, bucketed padded batches, masks for masked LM."""

import numpy as np
import pytest

from textmodels import save_task_model
from workbench.errors import ConfigError, ModelSourceError
from workbench.models import resolve
from workbench.text import (BUCKETS, BUILTIN_SENTENCES, bucket_for, read_sentences, text_batches, tokenize)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    # An odd path on purpose: spaces, dots and a name that looks like a hub id.
    return save_task_model("embedding", tmp_path_factory.mktemp("text") / "my models" / "org--tiny.v2 (copy)")


def test_read_sentences_skips_blank_lines_and_refuses_bad_files(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("\ufeffFirst line.\n\n   \nSecond, with spaces.  \n", encoding="utf-8")
    assert read_sentences(f) == ["First line.", "Second, with spaces."]
    cases = {"missing.txt": None, "empty.txt": b"\n \n", "binary.txt": b"abc\x00def", "latin1.txt": "café\n".encode("latin-1")}
    for name, data in cases.items():
        p = tmp_path / name
        if data is not None:
            p.write_bytes(data)
        with pytest.raises(ConfigError) as e:
            read_sentences(p)
        assert "\n" not in str(e.value) and name in str(e.value)
    with pytest.raises(ConfigError, match="not a file"):
        read_sentences(tmp_path)


def test_builtin_sentences_are_varied():
    assert 30 <= len(BUILTIN_SENTENCES) <= 60
    lengths = [len(s.split()) for s in BUILTIN_SENTENCES]
    assert min(lengths) <= 2 and max(lengths) >= 50
    assert any(any(c.isdigit() for c in s) for s in BUILTIN_SENTENCES)
    assert any("?" in s for s in BUILTIN_SENTENCES) and any(";" in s for s in BUILTIN_SENTENCES)


def test_a_folder_tokenizes_its_text_into_bucketed_padded_batches(folder):
    src = resolve(folder)
    assert src.has_tokenizer and src.task == "embedding"
    tb = text_batches(src)
    tok = src.tokenizer()
    assert sorted(tb.sentences) == sorted(BUILTIN_SENTENCES)
    row = 0
    for b in tb.batches:
        assert set(b) == {"input_ids", "attention_mask", "token_type_ids"}
        assert all(v.dtype == np.int64 for v in b.values())
        seq = b["input_ids"].shape[1]
        assert seq in BUCKETS
        real = b["attention_mask"].sum(axis=1)
        # Every row fits its bucket, and the bucket is the smallest that holds it.
        assert all(bucket_for(int(n)) == seq for n in real)
        assert (b["input_ids"][b["attention_mask"] == 0] == tok.pad_token_id).all()
        for r in range(len(real)):
            # The rows are the sentences, in the order tb.sentences gives.
            n = int(real[r])
            assert (b["attention_mask"][r, :n] == 1).all() and (b["attention_mask"][r, n:] == 0).all()
            assert tok.decode(b["input_ids"][r, 1:n - 1]).replace(" ", "") == \
                tok.decode(tok(tb.sentences[row])["input_ids"][1:-1]).replace(" ", "")
            row += 1
    ids = np.concatenate([b["input_ids"][b["attention_mask"] == 1] for b in tb.batches])
    assert (ids == tok.unk_token_id).mean() < 0.05  # the test's vocabulary really covers the text
    d = tb.describe()
    assert d["sentences"] == len(BUILTIN_SENTENCES) and d["batches"] == len(tb.batches)
    assert sum(d["bucket_mix"].values()) == d["batches"] and len(d["bucket_mix"]) >= 2
    assert 0 < d["padding_share"] < 1
    assert tb.job()["kind"] == "embedding"


def test_long_sentences_are_truncated_to_the_model_positions(folder):
    src = resolve(folder)  # 160 positions
    tb = text_batches(src, ["word " * 400, "short"], batch_size=4)
    assert max(tb.lengths) == 160 and len(tb.batches) == 2


def test_masked_lm_text_gets_masks_on_ordinary_tokens_only(tmp_path):
    src = resolve(save_task_model("masked_lm", tmp_path / "mlm"))
    assert src.task == "masked_lm" and src.output_name == "logits"
    tb = text_batches(src, ["Hi!", "The quick brown fox jumps over the lazy dog."])
    tok = src.tokenizer()
    assert tb.kind == "masked_lm" and tb.mask_token_id == tok.mask_token_id
    ids, mask = tb.batches[0]["input_ids"], tb.batches[0]["attention_mask"]
    masked = ids == tok.mask_token_id
    assert masked.sum(axis=1).min() >= 1  # at least one blank per sentence
    assert not masked[mask == 0].any()
    assert not masked[:, 0].any()  # never [CLS]


def test_tokenize_refuses_nothing_and_bad_batch(folder):
    tok = resolve(folder).tokenizer()
    with pytest.raises(ConfigError):
        tokenize(tok, [])
    with pytest.raises(ConfigError):
        tokenize(tok, ["a"], batch_size=0)


def test_a_folder_without_tokenizer_says_so(hf_folder):
    with pytest.raises(ModelSourceError, match="no tokenizer files") as e:
        text_batches(resolve(hf_folder("bert")))
    assert "\n" not in str(e.value)
