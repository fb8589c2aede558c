"""What a model type is: an encoder the workbench opens or not, the task head its config names, the inputs it
takes, whether a checkpoint holds the bare encoder only (read from the family records and transformers' tables)."""

from __future__ import annotations

from .errors import ModelSourceError
from .families import DECODER, ENCODER, UNKNOWN, family_of, role_of, tested_types

#: Task heads kept in the export, read from the folder config's ``architectures``: suffix → task.
TASK_HEADS: dict[str, str] = {
    "ForMaskedLM": "masked_lm",
    "ForSequenceClassification": "sequence_classification",
    "ForTokenClassification": "token_classification",
}


def input_names_for(model_type: str | None, config: dict) -> tuple[str, ...]:
    """The inputs an encoder takes: token types only where the family takes them and the config has them
    (``type_vocab_size`` > 0, or the family's default when the config does not say)."""
    fam = family_of(model_type)
    default = fam.type_vocab_default if fam is not None else 0
    types = config.get("type_vocab_size", default) if default is not None else 0
    if isinstance(types, int) and types > 0:
        return ("input_ids", "attention_mask", "token_type_ids")
    return ("input_ids", "attention_mask")


def check_type(model_type: str | None, where: str, config: dict | None = None) -> str:
    """Accept any encoder type transformers builds natively; refuse unknown types, decoders and encoder-decoders
    (decided from the family record, the config's flags and transformers' model tables, not only its names)."""
    role = role_of(model_type, config, None if family_of(model_type) else model_tables())
    if role == UNKNOWN:
        raise ModelSourceError(
            f"{where} is a {model_type or 'unknown'!s} model, which this transformers version cannot build without "
            f"remote code; the workbench opens encoders transformers knows ({', '.join(tested_types()[:8])}, ...)")
    if role != ENCODER:
        what = "a decoder (a text-generation model)" if role == DECODER else "an encoder-decoder (sequence to sequence)"
        raise ModelSourceError(f"{where} is a {model_type} model, {what}; the workbench fuses encoders (BERT-like "
                               f"models whose output is one vector per token)")
    return model_type


def model_tables() -> dict[str, set[str]]:
    """transformers' model types: all it builds natively, and those with a seq2seq, causal-LM or masked-LM model."""
    from transformers.models.auto import modeling_auto as ma
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return {"known": set(CONFIG_MAPPING_NAMES), "seq2seq": set(ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
            "causal": set(ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), "masked": set(ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES)}


def task_of(config: dict) -> str:
    """The task head a config's ``architectures`` names ("embedding" when none does)."""
    for arch in config.get("architectures") or ():
        for suffix, task in TASK_HEADS.items():
            if str(arch).endswith(suffix):
                return task
    return "embedding"


def head_absent(fam, tensors: set[str]) -> bool:
    """True when a checkpoint holds the bare encoder only: no ``<base>.`` prefix, no head tensor, the encoder's
    own tensors at the top.

    A checkpoint saved from a model with a task head keeps the encoder under the base prefix
    (``mpnet.encoder...``) next to the head (``lm_head...``); sentence-embedding folders often save the
    bare encoder (``encoder...``) while config.json still names the masked-LM class.
    """
    if fam is None or fam.base_prefix is None or not tensors:
        return False
    firsts = {t.split(".", 1)[0] for t in tensors}
    if fam.base_prefix in firsts or firsts & set(fam.head_tensors):
        return False
    return bool(firsts & set(fam.base_tensors))
