"""Fleet sweeps: one measurement spec run on every machine a team has, gathered into one table.

A spec (YAML or a dict) lists values per axis (models, exporters, attention, opsets, engines, plans,
batch, seq, threads, providers, precisions) and the runs per point. :func:`run_sweep` expands it,
builds every model (export, fusion, quantization: content-keyed, cached), and measures each point
in the existing benchmark worker, one at a time per machine:

- ``executor="local"``: everything here, one measurement after another;
- ``executor="ray"``: a Ray cluster (``address``, ``"auto"``, or a local one started and stopped
  here). Builds run as ordinary parallel tasks and travel to the measuring node through Ray's object
  store; every measurement holds the custom resource :data:`MEASURE_RESOURCE`, which each node
  declares once (``ray start --resources '{"workbench_measure": 1}'``), so two measurements never
  share a machine. A node that dies mid-measurement loses only that row: Ray retries it elsewhere
  (``retries``), or the row says what failed.

Both executors build first and measure after, so no export or fusion shares cores with a timed run.
A model is built once however many shapes, threads or providers measure it (the build axes are
:data:`BUILD_KEYS`); on Ray the driver keeps each built model in the object store, so every measuring
node pulls it once and losing the node that built it costs nothing.

Every row carries the node and its machine description, so rows group by machine type into a tuned
plan per machine type and the best variant per shape. Results resume from their output file.
``progress`` reports every row as it lands and ``cancel`` stops a sweep between rows, for an app that
runs a sweep in a background thread.
"""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Callable

from ...config import BenchConfig, ExportConfig, FusionPlan
from ...errors import ConfigError
from ...export import export
from ...fusion.catalog import session_optimizers_off
from ...modelio import load_model
from ...models import resolve
from ...path_checks import check_output_path
from ...settings import env_folder
from ..harness.bench import benchmark
from ..harness.results import Variant
from ..variants import for_precision
from ..variants.models import fuse_bert
from .rows import Ledger, machine_type, read_rows
from .spec import config_key, expand

#: The custom resource a node declares once; each measurement holds all of it.
MEASURE_RESOURCE = "workbench_measure"
#: The config keys that decide the model a point measures; points equal on these share one build.
BUILD_KEYS = ("model", "exporter", "attention", "opset", "engine", "disable", "precision", "unfused")
#: Set to a folder, every measurement writes ``<key>.<node>.<pid>.start`` there as it begins (what runs
#: where, for a person watching a cluster, and for the test that kills a node mid-measurement).
TRACE_ENV = "WORKBENCH_SWEEP_TRACE"
#: Retries of a build task lost with its node (a build is deterministic, so retrying is always safe).
BUILD_RETRIES = 3
#: Seconds a Ray sweep waits for a measuring node when none is left (all died) before it reports the
#: points still to measure as error rows instead of waiting for ever.
NO_NODE_GRACE_S = 60.0


def model_key(cfg: dict) -> str:
    """A stable id of the model a point measures (points equal on :data:`BUILD_KEYS` share it)."""
    return config_key({k: cfg[k] for k in BUILD_KEYS if k in cfg})  # "unfused": only the unfused point has it


def build_path(cfg: dict) -> Path:
    """The model one point measures, as a file (export → fusion plan → precision; cached by content)."""
    src = resolve(cfg["model"])
    exp = export(src, ExportConfig(exporter=cfg["exporter"], attention=cfg["attention"], opset=cfg["opset"]))
    plan = FusionPlan(engine=cfg["engine"], disabled=frozenset(cfg["disable"]))
    path = exp.path if cfg.get("unfused") else fuse_bert(exp.path, plan=plan, **src.timeline_args())
    return Path(for_precision(cfg["precision"]).from_fused(path))  # the recipe of that precision (fused: as it is)


def build(cfg: dict) -> bytes:
    """The model one point measures, as bytes (what a Ray build task returns to the object store): the whole
    model, its weights included (in the cache they lie beside the graph, shared: ``workbench.cache.model_store``)."""
    return load_model(build_path(cfg), check=False, check_runtime=False).SerializeToString()


def measure(model: bytes | str | os.PathLike, cfg: dict, node: str | None = None) -> dict:
    """Time one built model (bytes or a file) in the benchmark worker; the row with its node and machine."""
    node = node or _node_id()
    started = time.time()
    trace = env_folder(TRACE_ENV)
    if trace:
        trace.mkdir(parents=True, exist_ok=True)
        (trace / f"{config_key(cfg)}.{node}.{os.getpid()}.start").write_text(str(started))
    level = "disable" if cfg.get("unfused") else "all"  # the unfused point: every ONNX Runtime optimization off
    v = Variant("point", model if isinstance(model, bytes) else str(model), provider=cfg["provider"], level=level,
                disabled_optimizers=session_optimizers_off(frozenset(cfg["disable"])))
    bc = BenchConfig(batch=cfg["batch"], seq=cfg["seq"], threads=cfg["threads"], runs=cfg["runs"],
                     warmup=cfg["warmup"])
    res = benchmark([v], bc, floor=False)
    s = res.variants[0]
    return {"key": config_key(cfg), "config": cfg, "node": node, "machine": res.machine,
            "p50_ms": s.p50_ms, "p90_ms": s.p90_ms, "p99_ms": s.p99_ms, "runs": s.runs,
            "started": started, "ended": time.time(), "error": None,
            "machine_load": res.machine_load.to_dict() if res.machine_load else None}


def _node_id() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except ImportError:
        pass

    return platform.node() or "local"


def _error_row(cfg: dict, e: BaseException, node: str | None = None) -> dict:
    cause = getattr(e, "cause", None) or e  # a Ray task error carries the exception raised in the task
    text = str(cause).strip()
    return {"key": config_key(cfg), "config": cfg, "node": node, "machine": None, "p50_ms": None,
            "p90_ms": None, "p99_ms": None, "runs": 0, "started": None, "ended": None,
            "error": f"{type(cause).__name__}: {text.splitlines()[0]}" if text else type(cause).__name__}


Done = Callable[[dict], None]
Cancelled = Callable[[], bool]


def _local(todo: list[dict], done: Done, cancelled: Cancelled) -> bool:
    """Build then measure each point here, one after another; True when cancelled before the end."""
    for cfg in todo:
        if cancelled():
            return True
        try:
            row = measure(build_path(cfg), cfg)
        except Exception as e:  # this point only: the sweep goes on, the row says what failed
            row = _error_row(cfg, e)
        done(row)
    return False


def _measuring_slots(ray) -> int:
    return int(ray.cluster_resources().get(MEASURE_RESOURCE, 0))


def _ray(todo: list[dict], done: Done, cancelled: Cancelled, address: str | None, retries: int) -> bool:
    """Build on the cluster in parallel, then measure one point per node at a time; True when cancelled.

    Measurements are submitted as measuring slots free up (at most one per node holding
    :data:`MEASURE_RESOURCE`), so cancelling lets the ones under way finish and starts no more.
    """
    try:
        import ray
    except ImportError:
        raise ConfigError('the ray executor needs Ray: pip install "bert-fusion-workbench[cluster]"') from None
    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:  # a local cluster of one node, measuring one point at a time
            ray.init(num_cpus=max(2, os.cpu_count() or 2), resources={MEASURE_RESOURCE: 1},
                     include_dashboard=False, log_to_driver=False)
    pending: dict = {}
    try:
        if _measuring_slots(ray) < 1:
            raise ConfigError(f"no node of this Ray cluster declares the {MEASURE_RESOURCE} resource: start each "
                              f"with ray start --resources '{{\"{MEASURE_RESOURCE}\": 1}}'")
        build_task = ray.remote(num_cpus=1, max_retries=BUILD_RETRIES)(build)
        measure_task = ray.remote(num_cpus=0, resources={MEASURE_RESOURCE: 1}, max_retries=retries)(measure)
        models = _ray_builds(ray, build_task, todo, done, cancelled, pending)
        if models is None:
            return True
        queue = [cfg for cfg in todo if model_key(cfg) in models]
        return _ray_measures(ray, measure_task, models, queue, done, cancelled, pending)
    finally:
        for ref in pending:  # left only when the sweep ends early (an error, a broken callback)
            ray.cancel(ref, force=False)
        if started_here:
            ray.shutdown()


def _ray_builds(ray, build_task, todo: list[dict], done: Done, cancelled: Cancelled, pending: dict) -> dict | None:
    """One build per distinct model, in parallel, all before any measurement (a build must not share a node's
    cores with a timed run): ``{model key: object ref}``, None when cancelled. The driver puts each model in the
    object store itself, so it outlives the node that built it."""
    groups: dict[str, list[dict]] = {}
    for cfg in todo:
        groups.setdefault(model_key(cfg), []).append(cfg)
    pending.update({build_task.remote(cfgs[0]): key for key, cfgs in groups.items()})
    models = {}
    while pending:
        if cancelled():
            return None
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.25)
        for ref in ready:
            key = pending.pop(ref)
            try:
                models[key] = ray.put(ray.get(ref))
            except Exception as e:  # a failed build loses its points, reported, and nothing else
                for cfg in groups[key]:
                    done(_error_row(cfg, e))
    return models


def _ray_measures(ray, measure_task, models: dict, queue: list[dict], done: Done, cancelled: Cancelled,
                  pending: dict) -> bool:
    """Measurements, each holding a node's measuring resource, as many in flight as there are slots; True when
    cancelled. With no measuring node left for :data:`NO_NODE_GRACE_S`, the rest become error rows."""
    dropped, no_node_since = False, None
    while queue or pending:
        if queue and cancelled():
            queue.clear()
            dropped = True
        slots = _measuring_slots(ray)
        if queue and len(pending) < max(1, slots):
            cfg = queue.pop(0)
            pending[measure_task.remote(models[model_key(cfg)], cfg)] = cfg
            continue
        no_node_since = None if slots else (no_node_since or time.monotonic())
        if no_node_since and time.monotonic() - no_node_since > NO_NODE_GRACE_S:
            lost = ConfigError(f"no node with the {MEASURE_RESOURCE} resource left in the cluster "
                               f"for {NO_NODE_GRACE_S:g} s")
            for ref, cfg in list(pending.items()):
                ray.cancel(ref, force=False)
                done(_error_row(cfg, lost))
            for cfg in queue:
                done(_error_row(cfg, lost))
            pending.clear()
            queue.clear()
            break
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.25)
        for ref in ready:
            cfg = pending.pop(ref)
            try:
                row = ray.get(ref)
            except Exception as e:  # the task failed, or its node was lost beyond its retries: this row only
                row = _error_row(cfg, e)
            done(row)
    return dropped


def run_sweep(spec: dict | str | os.PathLike, executor: str = "local", *, address: str | None = None,
              out: str | os.PathLike | None = None, progress: Callable[[dict, int, int], None] | None = None,
              cancel=None, retries: int = 2) -> dict:
    """Run a sweep; ``{"rows", "nodes", "tuned_plans", "best", "total", "cancelled"}``, written to ``out`` after every row.

    Args:
        spec: a dict or a YAML file (see :func:`load_spec`).
        executor: "local" (this machine, one point after another) or "ray"; or a callable
            ``executor(todo, done, cancelled) -> cancelled?`` (a stand-in that fakes measurements).
        address: the Ray cluster (``"auto"``, ``"ray://..."``, ``host:port``); None starts a local Ray
            for the sweep and stops it at the end. Ignored when Ray is already initialized here.
        out: JSON result. Each row is appended to a journal beside it as it lands (``.<name>.rows.jsonl``);
            the result is rewritten when the rows have doubled and at the end, when the journal goes
            (O(1) amortized per row). Rows already in it or its journal without an error are kept and
            not measured again (resume); rows with an error are measured again.
        progress: ``progress(row, done, total)`` in the calling thread for every row of the result as it
            lands: first the rows resumed from ``out``, then each measured (or failed) row. ``done``
            counts rows so far, ``total`` the points of the spec.
        cancel: an event (any object with ``is_set()``, such as :func:`workbench.concurrency.new_flag`'s,
            or a callable returning True) checked between rows: once set, no measurement starts; the ones under
            way (one per node) finish and are kept, and the result says ``"cancelled": True``. Resume later with ``out``.
        retries: how many times Ray runs a measurement again when its worker or node dies (``0``: the
            row is reported with the error). A measurement that fails by itself is not retried.

    Raises:
        ConfigError: a bad spec (also one past the point or alias limits), executor or output file; Ray
            missing or no node measuring.
        ModelSourceError: a model of the spec does not exist here.
    """
    cancelled = _checked(executor, retries, cancel)
    env_folder(TRACE_ENV)  # a setting no measurement could use is the user's error, not every row's
    configs = expand(spec)  # counted before it is expanded: a spec past the limit is refused here
    if executor == "local" or (executor == "ray" and not address):
        _check_models(configs)  # a model that does not exist is the user's error, not a row's
    out = _output(out)
    rows, resumed, todo = _resume(out, configs)
    ledger = Ledger(out, rows, len(configs))
    state = {"done": len(resumed)}

    if progress:
        for i, row in enumerate(resumed, 1):
            progress(row, i, len(configs))

    def done(row: dict) -> None:
        ledger.add(row)
        state["done"] += 1
        if progress:
            progress(row, state["done"], len(configs))

    try:
        if executor == "local":
            ledger.cancelled = _local(todo, done, cancelled)
        elif executor == "ray":
            ledger.cancelled = _ray(todo, done, cancelled, address, retries)
        else:  # a callable with the executors' signature (a test's or benchmark's fake)
            ledger.cancelled = bool(executor(todo, done, cancelled))
    finally:
        result = ledger.close()
    return result


def _checked(executor, retries, cancel) -> Cancelled:
    """``run_sweep``'s executor and retries checked, and its ``cancel`` (None, an Event, or a callable) as a
    check: one line for anything else."""
    if not callable(executor) and executor not in ("local", "ray"):
        raise ConfigError(f"executor must be local or ray, not {executor!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"retries must be a whole number of at least 0, not {retries!r}")
    if cancel is None:
        return lambda: False
    if hasattr(cancel, "is_set"):
        return cancel.is_set
    if callable(cancel):
        return lambda: bool(cancel())
    raise ConfigError("cancel must be an event (an object with is_set()) or a callable returning True to stop")


def _resume(out: Path | None, configs: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    """The rows ``out`` holds, those of this spec's points (kept, not measured again), and the points left."""
    keys = {config_key(c) for c in configs}
    rows = read_rows(out)  # rows of points outside this spec stay in the file, but do not count as done
    resumed = [r for r in rows if r.get("key") in keys]
    have = {r["key"] for r in resumed}
    return rows, resumed, [c for c in configs if config_key(c) not in have]


def _output(out) -> Path | None:
    """``run_sweep``'s ``out`` as a checked path (a folder or an unwritable place: one line)."""
    if out is None:
        return None

    out = Path(out).expanduser()
    check_output_path(out, existing_ok=True)
    return out


def _check_models(configs: list[dict]) -> None:
    """Every model the sweep names must resolve here (a preset, a folder, a file): one line otherwise."""
    for name in dict.fromkeys(str(c["model"]) for c in configs):
        resolve(name)


def to_frame(result: dict):
    """The tidy table: one row per point and node, config axes as columns (pandas)."""
    import pandas as pd

    recs = []
    for r in result["rows"]:
        c = dict(r["config"])
        c["disable"] = ",".join(c["disable"])
        recs.append({**c, "node": r["node"], "machine_type": machine_type(r["machine"]), "p50_ms": r["p50_ms"],
                     "p90_ms": r["p90_ms"], "runs": r["runs"], "error": r["error"]})
    return pd.DataFrame(recs)


__all__ = ["run_sweep", "to_frame", "MEASURE_RESOURCE", "BUILD_KEYS", "TRACE_ENV", "build", "build_path", "measure",
           "model_key"]
