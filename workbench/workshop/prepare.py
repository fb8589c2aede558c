"""A workshop room prepared in one command: everything the notebooks build, built once into one cache folder.

A facilitator runs :func:`prepare` (``workbench prepare``) on one machine; the folder is then copied to each
participant's laptop and ``WORKBENCH_CACHE`` pointed at it. What the notebooks would otherwise export and
fuse on a participant's two cores is read from it instead: the exports of every exporter, attention and opset
the notebooks open, the fusion timelines (persisted by ``fusion/timeline_store.py``: every snapshot, every single
toggle the app warms, parity and answers on text), the fused, int8 and fp16 models the benchmarks and the
ablation time (``variants/``), and the packaged real model's export. Measurements are not prepared: timing
on the participant's own machine is the point of notebooks 02 and 04.

The calls here are the notebooks' own calls with the same arguments (each stage names its notebook), so the
cache keys match; ``tests/test_workshop_prepare.py`` opens a prepared folder and checks that no engine
step runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable

from ..cache.atomic import atomic_write_text
from ..cache.model_store import damaged_entries
from ..cache.root import cache_root
from ..config import ExportConfig, FusionPlan
from ..errors import ConfigError, WorkbenchError
from ..export import export
from ..fusion import Timeline
from ..fusion import exporter_matrix as matrix
from ..fusion.catalog import BY_NAME
from ..fusion.disk import flush
from ..fusion.scheduler import FusionScheduler
from ..fusion.timeline import likely_engine, run_fusion
from ..fusion.timeline_store import enabled as persist_enabled
from ..fusion.timeline_store import versions as timeline_versions
from ..measure.variants.answers import task_answers
from ..measure.variants.models import fuse_bert
from ..models import REAL_MODELS, resolve
from ..settings import env_number
from ..text import text_batches
from . import exercises as ex
from .notebooks import notebook_names

Say = Callable[[str], None]

#: The opsets of notebook 04's matrix per exporter (each exporter's opset 14 and its own default).
MATRIX_OPSETS = {"torchscript": (14, 17), "dynamo": (14, 18)}
MANIFEST = "workshop.json"

#: How long :func:`app_timeline` waits for one model's fusion warm-up (every single toggle of the app's timeline
#: computed and persisted); ``WORKBENCH_WARM_WAIT_S`` overrides. Generous: on 2 shared cores the warm-up of the
#: ORT engine took 1.2 s on bert-tiny, 2.4-3.2 s on bert-base and 9 s on bert-large (load 2-3); both engines
#: (``auto``) on bert-base 55 s at load 6. Past it prepare goes on (exit 0) and says which toggles are not warmed.
WARM_WAIT_S = 600.0
ENV_WARM_WAIT = "WORKBENCH_WARM_WAIT_S"


@dataclass
class Prepared:
    """What :func:`prepare` built: the folder, the stages with their seconds, the manifest written."""

    folder: Path
    stages: list[dict] = field(default_factory=list)
    manifest: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"folder": str(self.folder), "seconds": round(self.seconds, 1), "stages": self.stages,
                "manifest": self.manifest}


def versions() -> dict[str, str]:
    """What the cache keys depend on: the exporters' and engines' versions, the workbench's, and the hash of
    its code that makes snapshots (``fusion/timeline_store.py``). A laptop where one differs rebuilds what depends
    on it instead of reading it."""
    out = {}
    for dist in ("torch", "transformers"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    out.update(timeline_versions())
    return out


def warm_bound() -> float:
    """How long prepare waits for one model's warm-up: ``$WORKBENCH_WARM_WAIT_S``, else :data:`WARM_WAIT_S`.

    Raises:
        ConfigError: the variable is not a number of at least 0.001 (one line naming it).
    """
    return float(env_number(ENV_WARM_WAIT, WARM_WAIT_S, minimum=0.001))


def app_timeline(src, say: Say) -> dict:
    """Notebook 01 (and the app, ``Workbench(MODEL)``): the default export, the engine ``auto`` shows first,
    every single toggle warmed, the other engine compared, parity of every snapshot.

    The warm-up is waited for at most :func:`warm_bound` seconds; past it (or when it failed) one line on stderr
    says which toggles are not warmed, the stage goes on, and they are returned as ``{"not_warmed": [...]}``:
    the app computes them on first use, and a second ``workbench prepare`` warms them (what is done is kept)."""

    cfg = ExportConfig()
    r = export(src, cfg)
    plan = FusionPlan(engine=likely_engine(cfg.exporter, src.model_type) or "auto")
    tl = Timeline(r.path, plan, **src.timeline_args())
    snaps = tl.run()
    say(f"  warming every single toggle ({len(snaps) - 1} steps)")
    sch = FusionScheduler(tl)
    sch.start_warming()
    limit = warm_bound()
    done = sch.wait_warm(limit)
    sch.stop_warming()
    missed = [step for step in tl.single_toggles() if step not in sch.warmed]
    if missed:
        _say_not_warmed(src.name, missed, f"gave up after {limit:g} s waiting for" if not done
                        else f"{sch.warm_error or 'an error'} stopped")
    sch.compare_engines()
    say("  parity of every snapshot")
    for i in range(1, len(tl.snapshots)):
        tl.check_parity(i)
    return {"not_warmed": missed} if missed else {}


def _say_not_warmed(model: str, missed: list[str], why: str) -> None:
    """One line on stderr: which of ``model``'s toggles the prepared folder lacks, and what happens to them."""
    names = ", ".join(missed[:4]) + (f" and {len(missed) - 4} more" if len(missed) > 4 else "")
    print(f"workbench: {why} the fusion warm-up of {model}: {len(missed)} toggles not warmed ({names}); the app "
          f"warms them on first use (set {ENV_WARM_WAIT} to wait longer and run prepare again to add them)",
          file=sys.stderr, flush=True)


def ablation_models(src, say: Say) -> None:
    """Notebook 02: the fused models ``fusion_ablation`` times (the full plan, then each fired step off),
    built as ``measure/ablation.py`` builds them; the timing itself stays for the participant's machine."""

    exp = export(src, ExportConfig())
    tl = run_fusion(exp.path, FusionPlan(), **src.timeline_args())
    base = FusionPlan(engine=tl.engine_used or "auto")
    fuse_bert(exp.path, plan=base, **src.timeline_args())
    fired = [s.step for s in tl.snapshots[1:] if s.step in BY_NAME and BY_NAME[s.step].kind == "fusion"
             and s.fused_here]
    for step in fired:
        say(f"  fused without {step}")
        fuse_bert(exp.path, plan=base.with_step(step, False), **src.timeline_args())


def exercises(src, say: Say) -> None:
    """Notebook 03: every exercise's exports and timelines (the same calls the notebook makes)."""

    ex.fused_counts(src)
    ex.layer_norm_nodes(src)
    ex.biggest_drop(src)
    ex.dynamo_attention(src)
    ex.prerequisite_off(src)


def exporter_matrix(src, say: Say) -> None:
    """Notebook 04: the matrix's exports and both engines on each, the opset-23 section's exports, timeline
    and fused models."""

    for exporter, opsets in MATRIX_OPSETS.items():
        matrix(src, opsets=opsets, exporters=(exporter,),
               progress=lambda stage, f: say(f"  {stage}") if stage != "done" else None)
    exp23 = export(src, ExportConfig(exporter="dynamo", attention="sdpa", opset=23))
    tl = Timeline(exp23.path, FusionPlan(), **src.timeline_args())
    tl.run()
    tl.check_parity(len(tl.snapshots) - 1)
    exp18 = export(src, ExportConfig(exporter="dynamo", attention="sdpa", opset=18))
    std = frozenset({"standard_attention"})
    for exp, plan in ((exp18, FusionPlan()), (exp23, FusionPlan(disabled=std)), (exp23, FusionPlan(opted_in=std))):
        fuse_bert(exp.path, plan=plan, **src.timeline_args())


def write_a_fusion(src, say: Say) -> None:
    """Notebook 06: the TorchScript and dynamo exports on the onnxscript chain, as its app opens them (parity of
    every snapshot), and the fused model its ablation times without the participant's rule (the chain's own
    plan). The rule itself is the participant's: its step and what follows it are computed in the room, and so
    are the toggles the app warms once it is added (each of them runs the rule), so none are warmed here."""

    plan = FusionPlan(engine="onnxscript")
    for exporter in ("torchscript", "dynamo"):
        r = export(src, ExportConfig(exporter=exporter))
        tl = Timeline(r.path, plan, **src.timeline_args())
        snaps = tl.run()
        if exporter == "torchscript":
            say(f"  parity of every snapshot ({len(snaps) - 1} steps)")
            for i in range(1, len(tl.snapshots)):
                tl.check_parity(i)
            fuse_bert(r.path, plan=plan, **src.timeline_args())


def real_text(name: str, say: Say) -> None:
    """Notebook 05: the packaged real model's export, its timeline checked on the built-in sentences, and
    its int8 and fp16 models (``task_answers``, as the notebook calls it)."""

    src = resolve(name)
    task_answers(src, text=text_batches(src))


def modern_encoder(name: str, say: Say) -> None:
    """Notebook 04's modern-encoder section: the rotary encoder's exports and each engine's timeline."""

    ex.modern_encoder(name)


#: (notebook, stage function) for each preset model, in the order they run.
STAGES: tuple[tuple[str, Callable], ...] = (
    ("01 app", app_timeline), ("02 ablation models", ablation_models), ("03 exercises", exercises),
    ("04 exporter matrix", exporter_matrix), ("06 write a fusion", write_a_fusion))


def _notebook_files(notebooks) -> list[str]:
    """The notebook files to prepare for; refuses, in one line, settings that would leave the folder without
    its timelines, a bad ``WORKBENCH_WARM_WAIT_S`` and a notebook number this install lacks."""
    warm_bound()  # checked before anything is built
    if not persist_enabled(None):
        raise WorkbenchError("WORKBENCH_PERSIST_TIMELINE=0 switches the timeline store off: the prepared folder "
                             "would lack the timelines; unset it and run again")
    if os.environ.get("WORKBENCH_TIMELINE_CACHE"):
        raise WorkbenchError("WORKBENCH_TIMELINE_CACHE puts the timelines outside the prepared folder; unset it "
                             "and run again")

    files = notebook_names()  # the notebooks this install has, found as `workbench lab` finds them
    known = sorted({name[:2] for name in files})
    unknown = sorted(set(notebooks) - set(known))
    if unknown:
        raise ConfigError(f"no notebook {', '.join(unknown)}; the notebooks are {', '.join(known)}")
    return files


def prepare(models=("bert-base",), *, real: tuple[str, ...] = ("minilm",),
            modern: tuple[str, ...] = ("modernbert-base",), notebooks=("01", "02", "03", "04", "05", "06"),
            say: Say | None = None) -> Prepared:
    """Build everything notebooks 01-06 need for ``models`` (and notebook 05's ``real`` models) into the cache.

    ``notebooks`` picks the notebooks to prepare for, by number ("01" ... "06"); ``modern`` are the rotary
    encoders of notebook 04's last section.

    The cache is ``$WORKBENCH_CACHE`` (set it before calling, as ``workbench prepare --cache DIR`` does).
    Nothing already there is rebuilt or overwritten: every entry is keyed by content and versions, and
    written through a temporary name. A real model that is not installed is skipped with its one-line
    reason in the stage list (notebook 05 needs it: ``pip install "bert-fusion-workbench[real]"``). A warm-up
    past :func:`warm_bound` is said in one line; its stage lists the toggles not warmed (``not_warmed``).

    Raises:
        WorkbenchError: a model that cannot be resolved or exported (before anything long starts for it).
        ConfigError: ``$WORKBENCH_WARM_WAIT_S`` is not a number of at least 0.001 (before anything is built).
    """

    say = say or (lambda line: None)
    t0 = time.perf_counter()
    files = _notebook_files(notebooks)
    _check_names(real, modern)
    # A bad name fails here, before anything is written or long starts, and never reaches for the network.
    sources = [resolve(m, hub=False) for m in models]
    out = Prepared(cache_root())
    for src in sources:
        for title, fn in STAGES:
            if title[:2] not in notebooks:
                continue
            t = time.perf_counter()
            say(f"{src.name}: {title}")
            extra = fn(src, say) or {}
            out.stages.append({"model": src.name, "stage": title, "seconds": round(time.perf_counter() - t, 1),
                               **extra})
    for name in modern if "04" in notebooks else ():
        t = time.perf_counter()
        say(f"{name}: 04 modern encoder")
        modern_encoder(name, say)
        out.stages.append({"model": name, "stage": "04 modern encoder", "seconds": round(time.perf_counter() - t, 1)})
    for name in real if "05" in notebooks else ():
        t = time.perf_counter()
        say(f"{name}: 05 real text")
        try:
            real_text(name, say)
        except WorkbenchError as e:
            say(f"  skipped: {e}")
            out.stages.append({"model": name, "stage": "05 real text", "skipped": str(e)})
            continue
        out.stages.append({"model": name, "stage": "05 real text", "seconds": round(time.perf_counter() - t, 1)})
    say("writing the timelines to disk")
    flush()  # the timeline store writes on a background thread: all of it is in the folder before it is copied
    out.seconds = time.perf_counter() - t0
    done = [s["model"] for s in out.stages if s["stage"] == "05 real text" and "skipped" not in s]
    out.manifest = {"models": [s.name for s in sources], "notebooks": list(notebooks),
                    "notebook_files": [f for f in files if f[:2] in notebooks], "real": done,
                    "modern": list(modern) if "04" in notebooks else [], "versions": versions(),
                    "prepared": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seconds": round(out.seconds, 1)}
    atomic_write_text(out.folder / MANIFEST, json.dumps(out.manifest, indent=1))
    return out


def _check_names(real, modern) -> None:
    """Refuse, in one line naming the value, a real model that is not packaged or a rotary encoder that is not
    a preset or folder: before anything is built, and without asking the model hub."""

    for name in real:
        if name not in REAL_MODELS:
            raise ConfigError(f"--real {name!r} is not a real model the workbench packages "
                              f"({', '.join(REAL_MODELS)}; 'none' skips notebook 05)")
    for name in modern:
        resolve(name, hub=False)


def check_prepared(folder: Path | str) -> list[str]:
    """Why a prepared folder would not be read as it is on this machine (empty: it will be).

    Exports and timelines are keyed by package versions: a laptop with other versions rebuilds them
    (the notebooks still run, only slower). Every model's files are checked against their names and
    digests: a damaged one is named (:func:`damaged`).

    Raises:
        WorkbenchError: the folder does not exist or is not a folder; its manifest is not a JSON object
            with a ``versions`` object (one line naming the file).
    """

    if not Path(folder).exists():
        raise WorkbenchError(f"{folder} does not exist")
    if not Path(folder).is_dir():
        raise WorkbenchError(f"{folder} is not a folder")
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return [f"{folder} was not prepared with `workbench prepare` (no {MANIFEST})"]
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{path} cannot be read as JSON: {type(e).__name__}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("versions"), dict):
        raise WorkbenchError(f"{path} is not a manifest of `workbench prepare`: it needs a JSON object with a "
                             f"\"versions\" object")
    here = versions()
    return [f"{dist}: prepared with {v}, this machine has {here.get(dist, 'none')}: what depends on it is rebuilt"
            for dist, v in sorted(manifest["versions"].items()) if here.get(dist) != v] + damaged(Path(folder))


def damaged(folder: Path) -> list[str]:
    """One line per model of the prepared folder whose files are not what was written (a copy that did not
    finish, a changed byte): each names the file; the workbench would build that model again where it can."""
    return [f"{f.relative_to(folder)} {why}: {graph.name} is damaged (copy the folder again, or run `workbench "
            f"cache prune` on the copy)" for graph, f, why in damaged_entries(folder)]
