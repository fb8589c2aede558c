"""OpenVINO int8 through NNCF, as sentence-transformers ships it, and its answer-guarded form.

* ``openvino-int8``: NNCF static int8 (``nncf.quantize``, ``model_type=TRANSFORMER``, the rest at
  OpenVINO's default precision) on the unfused export, calibrated on the **search part** of the text
  (one sentence per sample, at its own length). This is the recipe behind sentence-transformers'
  ``export_static_quantized_openvino_model`` (optimum-intel's ``OVQuantizationConfig``, whose default
  model type is the transformer one), calibrated on the user's sentences instead of GLUE SST-2.
* ``openvino-int8-guarded``: the same recipe with layer roles kept out of int8 (NNCF's ignored
  scope), found the way ``int8-guarded`` finds them for ONNX Runtime: every MatMul gets a role from
  its weight's shape (:func:`weight_roles`: q/k/v, attention output, feed-forward up and down), then
  int8 everywhere, each role kept out (fewest weights first) and, if no single role is enough, the
  best one plus one more, until the search part's answers hold with the rest at OpenVINO's default
  precision (as it is served). NNCF's own ``quantize_with_accuracy_control`` was the anchor: given a
  validation function written from the same answers (:func:`answers_metric`), it reverted one MatMul
  and held on MiniLM with the built-in split in about a minute, but on another split it kept
  re-ranking its 44 quantizers (46 s a round on 2 cores) without the drop moving, so the bounded role
  search is what runs. The check part is never seen here.

Both are written as OpenVINO IR (``openvino_model.xml`` / ``.bin``) in the variants cache, keyed by the
export, the sentences, the recipe and the versions of NNCF and OpenVINO.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import time
from pathlib import Path

import onnx

from ...ort.answer_policy import TaskParity, holds
from ...ort.machine import package_version
from ...ort.task_parity import task_parity
from ..worker.peer_runners import ov_config
from ..worker.peers import import_openvino
from .models import cached

OV_VERSION = 1


def answers_metric(tp: dict) -> float:
    """One number, higher is better: Spearman (or agreement), less 0.011 when a top-1 answer changed, so a
    model whose answers do not hold scores below 0.99 (the validation function NNCF's accuracy control takes)."""
    return TaskParity.of(tp).score() if tp else 0.0


def _key(text, recipe: str) -> str:
    import nncf

    doc = [list(text.sentences), text.kind, recipe, OV_VERSION, nncf.__version__, package_version("openvino")]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:16]


def _items(text) -> list[dict]:
    return [{k: v for k, v in b.items()} for b in text.batches]


class _quiet:
    """NNCF's info lines and its progress bars (printed to stdout, where ``--json`` goes) off; the workbench
    reports its own stages."""

    def __enter__(self):
        self.log = logging.getLogger("nncf")
        self.old = self.log.level
        self.log.setLevel(logging.ERROR)
        self.out = contextlib.redirect_stdout(io.StringIO())
        self.out.__enter__()
        return self

    def __exit__(self, *exc):
        self.out.__exit__(*exc)
        self.log.setLevel(self.old)


def openvino_int8_of(export_path: Path, search_text) -> Path:
    """The NNCF static int8 IR of the export, calibrated on ``search_text``'s sentences, cached."""
    def build(out: Path) -> None:
        import nncf

        ov = import_openvino()
        with _quiet():
            model = ov.Core().read_model(str(export_path))
            data = _items(search_text)
            q = nncf.quantize(model, nncf.Dataset(data), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(data))
        ov.save_model(q, str(out.parent / "openvino_model.xml"))
        (out.parent / "recipe.json").write_text(json.dumps({"recipe": "nncf.quantize", "model_type": "TRANSFORMER",
                                                            "calibration_sentences": len(data)}))

    return cached(Path(export_path), f"openvino-int8-{_key(search_text, 'static')}", build,
                   name="openvino_model.xml")


ROLES = ("ffn_down", "ffn_up", "attn_out", "qkv")


def weight_roles(export_path: Path) -> dict[str, tuple[str, int]]:
    """Each MatMul with a 2-D weight → (role, weight size), from the shapes alone (no family names): wider out
    than in is the feed-forward up-projection (3x: a packed q/k/v), narrower the down-projection; of the
    square ones, those that share their input with another projection are q/k/v, the rest the attention output."""
    g = onnx.load(str(export_path), load_external_data=False).graph
    dims = {i.name: tuple(i.dims) for i in g.initializer}
    mm = [n for n in g.node if n.op_type == "MatMul" and len(n.input) > 1 and len(dims.get(n.input[1], ())) == 2]
    readers: dict[str, int] = {}
    for n in mm:
        readers[n.input[0]] = readers.get(n.input[0], 0) + 1
    out = {}
    for n in mm:
        k, m = dims[n.input[1]]
        role = ("qkv" if m == 3 * k else "ffn_up") if m > k else "ffn_down" if k > m else (
            "qkv" if readers[n.input[0]] > 1 else "attn_out")
        out[n.name] = (role, k * m)
    return out


def _by_role(roles: dict) -> list[tuple[str, list[str]]]:
    """Each role's MatMuls, the role with the fewest weights first."""
    by = {r: [n for n, (role, _) in roles.items() if role == r] for r in ROLES}
    size = {r: sum(roles[n][1] for n in by[r]) for r in ROLES}
    return [(r, by[r]) for r in sorted(ROLES, key=size.get) if by[r]]


class _GuardSearch:
    """The candidates of one search: NNCF int8 with an ignored scope, answers on the search part."""

    def __init__(self, export_path: Path, search_text, threads: int):
        self.path, self.text, self.threads = Path(export_path), search_text, threads
        self.core = import_openvino().Core()
        self.items = _items(search_text)
        ref = self.core.compile_model(self.core.read_model(str(export_path)), "CPU", ov_config(threads, "f32"))
        self.reference = [ref(it)[0] for it in self.items]
        self.roles = weight_roles(self.path)
        self.total = sum(w for _, w in self.roles.values()) or 1
        self.tried: list[dict] = []

    def quantize(self, kept):
        import nncf

        scope = nncf.IgnoredScope(names=list(kept), validate=False) if kept else None
        return nncf.quantize(self.core.read_model(str(self.path)), nncf.Dataset(self.items),
                             subset_size=len(self.items), model_type=nncf.ModelType.TRANSFORMER, ignored_scope=scope)

    def try_(self, label: str, kept, built=None) -> tuple[object, dict]:
        q = built if built is not None else self.quantize(kept)
        c = self.core.compile_model(q, "CPU", ov_config(self.threads))  # as served: the rest at the default precision
        tp = task_parity(self.text.kind, self.reference, [c(it)[0] for it in self.items], self.items,
                         mask_token_id=self.text.mask_token_id)
        self.tried.append({"label": label, "kept": sorted(kept), "task_parity": tp, "holds": holds(tp),
                           "kept_share": sum(self.roles[n][1] for n in kept) / self.total})
        return q, self.tried[-1]


def _guard_search(export_path: Path, search_text, threads: int, plain=None, budget: int = 2) -> tuple[object, dict]:
    """Int8 everywhere (``plain``: the openvino-int8 IR already built), then each role kept out, then the best
    role plus one more (``budget`` of them), until the answers hold.

    Returns the model (the best candidate's, rebuilt, when none held) and the report."""
    s = _GuardSearch(export_path, search_text, threads)
    singles = _by_role(s.roles)
    plan = [("int8 everywhere", [])] + [(f"{r} kept out of int8", k) for r, k in singles]
    paired = False
    for i, (label, kept) in enumerate(plan):
        q, c = s.try_(label, kept, s.core.read_model(str(plain)) if plain and not kept else None)
        if c["holds"]:
            return q, _report(s, c)
        if i == len(plan) - 1 and not paired and len(plan) > 2:  # no single role: the best one plus one more
            paired = True
            best = max(s.tried[1:], key=lambda t: answers_metric(t["task_parity"]))
            plan += [(f"{best['label']} + {r}", sorted(set(best["kept"]) | set(k))) for r, k in singles
                     if not set(k) <= set(best["kept"])][:budget]
    best = max(s.tried, key=lambda t: answers_metric(t["task_parity"]))
    return s.quantize(best["kept"]), _report(s, best)


def _report(s: _GuardSearch, chosen: dict) -> dict:
    return {"chosen": chosen["label"], "holds": chosen["holds"], "kept": chosen["kept"],
            "kept_share": chosen["kept_share"], "task_parity": chosen["task_parity"], "tried": s.tried}


def openvino_int8_guarded_of(export_path: Path, search_text, *, threads: int = 2, plain: Path | None = None) -> Path:
    """The answer-guarded NNCF int8 IR of the export (see the module doc), cached; ``report.json`` beside it
    lists every candidate tried, what the chosen one keeps out of int8 and its answers on the search part."""
    def build(out: Path) -> None:
        t0 = time.perf_counter()
        plain_ir = plain or openvino_int8_of(export_path, search_text)
        with _quiet():
            q, report = _guard_search(Path(export_path), search_text, threads, plain_ir)
        import_openvino().save_model(q, str(out.parent / "openvino_model.xml"))
        report.update(recipe="nncf.quantize with an ignored scope found on the search part's answers",
                      seconds=round(time.perf_counter() - t0, 1), search_sentences=len(search_text.batches))
        (out.parent / "report.json").write_text(json.dumps(report, default=str))

    return cached(Path(export_path), f"openvino-int8-guarded-{_key(search_text, 'roles')}", build,
                   name="openvino_model.xml")


def ir_report(xml: Path) -> dict | None:
    """What the guarded recipe recorded beside its IR, or None."""
    try:
        return json.loads((Path(xml).parent / "report.json").read_text())
    except (OSError, ValueError):
        return None


__all__ = ["openvino_int8_of", "openvino_int8_guarded_of", "answers_metric", "ir_report", "weight_roles"]
