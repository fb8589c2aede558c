"""The measuring feature: the benchmark (its variants, the GPU column and its guard) and the operator profile.

:class:`Measuring` (``controller.measuring``) owns the benchmark worker in flight and the operator profiles of the
snapshots (``profiles``: each follows its snapshot when a toggle shifts the indices, and is dropped with it); it is
the only writer of ``state.series``, ``state.bench_result``, ``state.explanation``, ``state.gpu_note``,
``state.op_breakdown`` and ``state.kernels`` of the one :class:`~workbench.ui.state.AppState`. The controller tells
it when the snapshots change (:meth:`Measuring.snapshots_changed`). Ablation and tune are
:class:`~workbench.ui.measuring.tuning.Tuning`, sweeps :class:`~workbench.ui.sweep.feature.Sweep`, answers on real text
:class:`~workbench.ui.text.feature.TextAnswers`: everything here, and in those features, runs in the job runner's
"measure" lane (:data:`MEASURE_LANE`), one at a time (two measurements at once would time each other), and those
features ask :meth:`Measuring.ready` / :meth:`Measuring.busy` before they start.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ...errors import WorkbenchError
from ...measure.harness.bench import stream_benchmark
from ...measure.harness.explain import explain
from ...measure.harness.profile import profile_ops
from ...measure.harness.results import Variant
from ...measure.tune.engine_line import entries_of_bench, faster_engine
from ...measure.variants import Build, available, get, in_app, is_quantized
from ...measure.variants.answers import builtin_answers_text, int8_flags
from ...measure.variants.gpu_column import DevicePlan, check_on_gpu, device_plan, gpu_key
from ...ort.gpu import gpu_status
from ...ort.session import cuda_status
from .. import arguments as check
from ..graph.views import step_name
from ..jobs import Job

#: The job runner's lane for every measurement: one at a time, two would time each other.
MEASURE_LANE = "measure"


class Measuring:
    """``run_benchmark``, ``stop_benchmark``, ``profile`` and what they are built from.

    Args:
        app: the controller: its ``state``, ``export_result``, ``text``, ``runner``, ``say``, ``pair_indices``
            and ``set_view``.
    """

    def __init__(self, app):
        self.app = app
        #: Operator profiles by snapshot index (what the graph's latency overlay colours nodes by).
        self.profiles: dict[int, Any] = {}
        self._profiled: dict[int, Any] = {}  # the snapshot each profile was taken of, by the same index
        self._bench = None  # the benchmark worker's handle while one runs
        self._last_series = 0.0
        self._gpu_status = None  # probed once, on first use
        #: The app's recipes asked for that cannot run here, with why (``[{"name", "why"}]``, said under the plots).
        self.skipped: list[dict] = []

    # ----------------------------------------------------------------- shared
    def busy(self) -> bool:
        """A benchmark, profile, ablation, tune, answers check or sweep is running (queued, or running in the
        caller's thread of another cell with ``background=False``)."""
        runner = self.app.runner
        return (runner.lane_busy(MEASURE_LANE) or bool(self._bench is not None and not self._bench.done)
                or any(st.running and runner.lane_of(n) == MEASURE_LANE for n, st in self.app.state.jobs.items()))

    def ready(self, busy: str = "a measurement is already running: wait for it or stop it first") -> bool:
        """A model is loaded and nothing else is measuring; otherwise say why in the status line (the refusal
        while another measurement runs clears when it ends)."""
        if not self.app.state.snapshots:
            self.app.say("load a model first", "error")
            return False
        if self.busy():
            self.app.refuse(busy, MEASURE_LANE)
            return False
        return True

    def wait(self, timeout: float | None = 600) -> None:
        """Block until every measurement asked for has ended."""
        self.app.runner.wait(MEASURE_LANE, timeout)

    def snapshots_changed(self, snaps, *, new_model: bool = False) -> None:
        """The controller shows ``snaps``: each profile moves to its snapshot's new index; the profile of a
        snapshot no longer shown is dropped, and every one when a new model (``new_model``) was loaded."""
        where = {} if new_model else {id(sn): i for i, sn in enumerate(snaps)}
        moved = {where[id(sn)]: (self.profiles[k], sn) for k, sn in self._profiled.items()
                 if id(sn) in where and k in self.profiles}
        self.profiles = {i: p for i, (p, _) in moved.items()}
        self._profiled = {i: sn for i, (_, sn) in moved.items()}

    def close(self) -> None:
        """Kill the benchmark worker if one runs (the app closes)."""
        if self._bench is not None and not self._bench.done:
            try:
                self._bench.kill()
            except Exception:
                pass

    # ----------------------------------------------------------------- what is timed
    def variant_choices(self) -> list[tuple[str, str]]:
        """(label, key) per snapshot for the benchmark's variant list (the two ends say what they are), then the
        recipes the app offers beside them (``Recipe.app``: ONNX Runtime with OpenVINO's execution provider)."""
        snaps = self.app.state.snapshots
        out = []
        for i, sn in enumerate(snaps):
            key = f"{i}: {step_name(sn.step)}"
            tail = " (ONNX Runtime, no optimizations)" if i == 0 else \
                " (fused, all steps)" if i == len(snaps) - 1 else ""
            out.append((key + tail, key))
        return out + ([(get(n).label, n) for n in in_app()] if snaps else [])

    def variant_names(self, names) -> list[str] | None:
        """``names`` checked against :meth:`variant_choices` (a wrong one raises; None: the default)."""
        keys = [k for _, k in self.variant_choices()] if self.app.state.snapshots else None
        return check.names("names", names, keys, what="variant")

    def variants(self, names: list[str] | None = None) -> list:
        """Benchmark variants for the chosen snapshots (default: unfused and fused), the app's recipes chosen
        (those that cannot run here left out, :attr:`skipped`), and int8 if asked.

        The export and the last snapshot are the recipes' "unfused" and "fused" (the fused one at session level
        "all", the plan's switched-off steps kept off: what ``workbench bench`` times), built from the snapshot
        shown; a step in between is timed at level "disable", so its gain is the step's own."""
        app, s = self.app, self.app.state
        names = self.variant_names(names)
        if app.export_result is None or not s.snapshots:
            raise WorkbenchError("no model is loaded yet: app.wait() for the load first")
        snaps = s.snapshots
        ctx = Build(app.export_result.source, provider=s.provider, plan=s.fusion_plan(), snapshot=snaps[-1].model)
        idx = {f"{i}: {step_name(sn.step)}": i for i, sn in enumerate(snaps)}
        chosen = [n for n in (names if names is not None else s.variants) if n in idx]
        if not chosen:
            chosen = [next(iter(idx))] + ([list(idx)[-1]] if len(idx) > 1 else [])
        out, last = [], len(snaps) - 1
        for label in chosen:
            i = idx[label]
            # Stable keys: the unfused export, the last snapshot ("fused (all steps)" on screen), else
            # the step's own name where a single snapshot is meant.
            name = "unfused" if i == 0 else ("fused" if i == last else step_name(snaps[i].step))
            if i == last and i > 0:
                out.append(get("fused").make(ctx))
            else:  # ORT's own session fusions off, so a gain comes from the step itself.
                out.append(Variant(name, snaps[i].model.SerializeToString(), provider=s.provider, level="disable"))
        asked = [n for n in (names if names is not None else s.variants) if n in in_app()]
        ok, self.skipped = available(asked, app.export_result.source, s.provider)  # said in one line each
        out += [get(n).make(ctx) for n in ok]
        if s.int8:
            app.say("quantizing the last snapshot to int8", "busy")
            out.append(get("int8").make(ctx))
        return out

    def gpu_column(self) -> DevicePlan:
        """What the benchmark also times on the GPU (:func:`workbench.measure.variants.gpu_column.device_plan`: none
        without a usable GPU, or with the GPU chosen as the provider) and its line, ``state.gpu_note``."""
        s = self.app.state
        if self._gpu_status is None:
            self._gpu_status = gpu_status()  # a one-node CUDA session where a GPU is: probed once
        if s.provider == "cuda":
            plan = DevicePlan((), "every variant runs on the GPU (provider cuda)")
        else:
            plan = device_plan(self._gpu_status, text_timed=self.app.text is not None and s.bench_on_text,
                               batch=s.batch, seq=s.seq)
        s.gpu_note = plan.note
        return plan

    def gpu_variants(self, plan: DevicePlan) -> list:
        """The plan's GPU variants, built from the fused snapshot on the CUDA provider, named ``name@gpu``."""
        s = self.app.state
        ctx = Build(self.app.export_result.source, provider="cuda", plan=s.fusion_plan(),
                    snapshot=s.snapshots[-1].model)
        return [dataclasses.replace(get(n).make(ctx), name=gpu_key(n), provider="cuda") for n in plan.gpu]

    # ----------------------------------------------------------------- benchmark
    def run_benchmark(self, names: list[str] | None = None) -> None:
        """Time the chosen variants in the worker process; the plots grow while it runs."""
        names = self.variant_names(names)
        benchmarking = self._bench is not None and not self._bench.done
        if self.ready(*(["a benchmark is already running: stop it first"] if benchmarking else [])):
            self.app.runner.start("benchmark", lambda job: self._benchmark(job, names), lane=MEASURE_LANE)

    def stop_benchmark(self) -> None:
        """Stop the running benchmark (what it timed so far is kept)."""
        if self._bench is not None and not self._bench.done:
            self._bench.stop()
            self.app.say("stopping the benchmark", "busy")

    def _benchmark(self, job: Job, names: list[str] | None) -> None:
        app, s = self.app, self.app.state
        if s.provider == "cuda":
            ok, why = cuda_status()
            if not ok:
                raise WorkbenchError(why)  # a GPU was asked for: never a CPU number instead
        vs = self.variants(names) + self.gpu_variants(self.gpu_column())
        fell: list[str] = []  # a GPU variant that landed on the CPU: an error, never a number
        series: dict[str, list[float]] = {v.name: [] for v in vs}
        s.bench_result, s.explanation, s.series = None, (), {k: () for k in series}
        text = app.text if (app.text is not None and s.bench_on_text) else None
        job.progress(f"benchmarking {len(vs)} variants (warm-up first)")
        if text is None and any(is_quantized(v.name) for v in vs):  # int8's answers, on the built-in sentences
            answers = builtin_answers_text(app.export_result.source)
        else:
            answers = None
        self._bench = stream_benchmark(vs, s.bench_config(), on_sample=self._on_sample(series, fell),
                                       text=text if text is not None else answers,
                                       text_answers_only=text is None, on_event=self._gpu_guard(fell))
        r = self._bench.result(None)
        if fell:
            s.series = {}
            raise WorkbenchError(fell[0])
        self._show_result(r, series)

    def _on_sample(self, series: dict[str, list[float]], fell: list):
        """The benchmark's sample hook: the live plots' series, redrawn at most 5 times a second."""
        s = self.app.state

        def on_sample(sample) -> None:
            if fell:
                return
            series.setdefault(sample.variant, []).append(float(sample.ms))
            now = time.perf_counter()
            if now - self._last_series >= 0.2:
                self._last_series = now
                s.series = {k: tuple(v) for k, v in series.items()}
        return on_sample

    def _gpu_guard(self, fell: list):
        """The benchmark's event hook: a GPU variant whose session came up without CUDA stops the run."""
        def on_event(msg) -> None:  # a protocol.Message
            if msg.kind == "ready":
                try:
                    check_on_gpu({v["name"]: v.get("session_providers") for v in msg.variants})
                except WorkbenchError as e:
                    fell.append(str(e))
                    if self._bench is not None:
                        self._bench.stop()
        return on_event

    def _show_result(self, r, series: dict[str, list[float]]) -> None:
        """The finished benchmark on screen: series, warnings and explanation, result, and the status line."""
        app, s = self.app, self.app.state
        busy = r.machine_load.words() if r.machine_load else ""  # "" when the machine was quiet
        random_weights = bool(getattr(getattr(app.export_result, "source", None), "random_weights", False))
        src = getattr(app.export_result, "source", None)
        engine = faster_engine(entries_of_bench(r.variants, random_weights), r.machine,
                               getattr(src, "name", None) or "MODEL", random_weights=random_weights)
        with s.hold_trait_notifications():
            s.series = {k: tuple(v) for k, v in series.items()}
            s.explanation = (tuple(f"warning: {f}" for f in int8_flags(r.variants, random_weights))
                             + ((f"warning: {busy}",) if busy else ()) + ((engine,) if engine else ())
                             + tuple(explain(r.rates, r.machine))
                             + tuple(f"{k['name']} skipped: {k['why']}" for k in self.skipped))
            s.bench_result = r
        keys = [v.name for v in r.variants]
        msg = f"benchmark {'stopped' if r.stopped else 'done'}: " + ", ".join(
            f"{v.name} {v.p50_ms:.2f} ms" for v in r.variants if v.p50_ms)
        if len(keys) > 1 and r.ratio(keys[0], keys[-1]):
            msg += f" ({r.ratio(keys[0], keys[-1]):.2f}x)"
        app.say(msg + (f"; {busy}" if busy else ""), "ok")

    # ----------------------------------------------------------------- operator profile
    def profile(self, indices: list[int] | None = None) -> None:
        """Profile the operators of the before/after snapshots: op breakdown and latency overlay."""
        n = len(self.app.state.snapshots)
        indices = check.indices("indices", indices, n or None, what="snapshot index", note=f" ({n} snapshots shown)")
        if self.ready():
            self.app.runner.start("profile", lambda job: self._profile(job, indices), lane=MEASURE_LANE)

    def _profile(self, job: Job, indices: list[int] | None) -> None:
        app, s = self.app, self.app.state
        b, a = app.pair_indices()
        snaps = s.snapshots
        chosen = list(indices if indices is not None else sorted({b, a}))
        for k, i in enumerate(chosen):
            sn = snaps[i]
            job.progress(f"profiling the operators of {step_name(sn.step)} ({k + 1} of {len(chosen)}: batch "
                         f"{s.batch}, sequence {s.seq}, {s.runs} runs)", (k + 0.5) / len(chosen))
            prof = profile_ops(sn.model.SerializeToString(), s.bench_config(), provider=s.provider,
                               level="disable", name=step_name(sn.step))
            self.profiles = {**self.profiles, i: prof}
            self._profiled = {**self._profiled, i: sn}
        step = step_name(snaps[a].step)

        def label(i: int) -> str:  # the pair on screen by its role; others by index and name
            if a != b and i in (a, b):
                return f"{'before' if i == b else 'after'} {step}"
            return f"{i}: {self.profiles[i].variant}"

        s.op_breakdown = {label(i): {k: v / 1e3 for k, v in self.profiles[i].op_type_totals().items()}
                          for i in sorted(self.profiles)}
        s.kernels = {label(i): {"note": p.kernel_note(),  # {} for CPU profiles
                                "ms": {k: us / 1e3 for k, us in p.kernel_totals().items()}}
                     for i, p in sorted(self.profiles.items()) if p.kernel_note()}
        app.set_view(overlay=True)
        app.say("profile done: nodes coloured by their share of latency", "ok")


__all__ = ["MEASURE_LANE", "Measuring"]
