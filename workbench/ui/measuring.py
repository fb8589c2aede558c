"""The controller's measuring actions: benchmark, GPU column, operator profile.

Part of :class:`~workbench.ui.controller.Controller` (a mixin, so the controller file stays short);
ablation and tune are :class:`~workbench.ui.tuning.Tuning`, sweeps :class:`~workbench.ui.sweep.Sweep`,
answers on real text :class:`~workbench.ui.text_answers.TextAnswers`.
Everything here, and in those features, runs in the job runner's "measure" lane (:data:`MEASURE_LANE`),
one at a time: two measurements at once would time each other.
"""

from __future__ import annotations

import time

from ..errors import WorkbenchError
from .jobs import Job
from .views import step_name

#: The job runner's lane for every measurement: one at a time, two would time each other.
MEASURE_LANE = "measure"


class MeasureActions:
    """Benchmark and profile actions (mixed into the controller)."""

    # ----------------------------------------------------------------- shared
    def measuring(self) -> bool:
        """A benchmark, profile, ablation or sweep is running."""
        return self.runner.lane_busy(MEASURE_LANE) or bool(self._bench is not None and not self._bench.done)

    def ready_to_measure(self, busy: str = "a measurement is already running: wait for it or stop it first") -> bool:
        """A model is loaded and nothing else is measuring; otherwise say why in the status line."""
        if not self.state.snapshots:
            self.say("load a model first", "error")
            return False
        if self.measuring():
            self.say(busy, "error")
            return False
        return True

    def wait_measure(self, timeout: float | None = 600) -> None:
        self.runner.wait(MEASURE_LANE, timeout)

    def variant_choices(self) -> list[tuple[str, str]]:
        """(label, key) per snapshot for the benchmark's variant list; the two ends say what they are."""
        snaps = self.state.snapshots
        out = []
        for i, sn in enumerate(snaps):
            key = f"{i}: {step_name(sn.step)}"
            tail = " (ONNX Runtime, no optimizations)" if i == 0 else \
                " (fused, all steps)" if i == len(snaps) - 1 else ""
            out.append((key + tail, key))
        return out

    # ----------------------------------------------------------------- benchmark
    def variants(self, names: list[str] | None = None) -> list:
        """Benchmark variants for the chosen snapshots (default: unfused and fused), and int8 if asked.

        The export and the last snapshot are the recipes' "unfused" and "fused" (the fused one at session level
        "all", the plan's switched-off steps kept off: what ``workbench bench`` times), built from the snapshot
        shown; a step in between is timed at level "disable", so its gain is the step's own."""
        from ..measure.harness.bench import Variant
        from ..measure.variants import Build, get

        snaps = self.state.snapshots
        ctx = Build(self.export_result.source, provider=self.state.provider, plan=self.state.fusion_plan(),
                    snapshot=snaps[-1].model)
        idx = {f"{i}: {step_name(sn.step)}": i for i, sn in enumerate(snaps)}
        chosen = [n for n in (names if names is not None else self.state.variants) if n in idx]
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
                out.append(Variant(name, snaps[i].model.SerializeToString(), provider=self.state.provider,
                                   level="disable"))
        if self.state.int8:
            self.say("quantizing the last snapshot to int8", "busy")
            out.append(get("int8").make(ctx))
        return out

    def gpu_column(self):
        """What the benchmark also times on the GPU (:func:`workbench.measure.variants.gpu_column.device_plan`: none
        without a usable GPU, or with the GPU chosen as the provider) and its line, ``state.gpu_note``."""
        from ..measure.variants.gpu_column import DevicePlan, device_plan
        from ..ort.gpu import gpu_status

        s = self.state
        if getattr(self, "_gpu_status", None) is None:
            self._gpu_status = gpu_status()  # a one-node CUDA session where a GPU is: probed once
        if s.provider == "cuda":
            plan = DevicePlan((), "every variant runs on the GPU (provider cuda)")
        else:
            plan = device_plan(self._gpu_status, text_timed=self.text is not None and s.bench_on_text,
                               batch=s.batch, seq=s.seq)
        s.gpu_note = plan.note
        return plan

    def gpu_variants(self, plan) -> list:
        """The plan's GPU variants, built from the fused snapshot on the CUDA provider, named ``name@gpu``."""
        import dataclasses

        from ..measure.variants.gpu_column import gpu_key
        from ..measure.variants import Build, get

        ctx = Build(self.export_result.source, provider="cuda", plan=self.state.fusion_plan(),
                    snapshot=self.state.snapshots[-1].model)
        return [dataclasses.replace(get(n).make(ctx), name=gpu_key(n), provider="cuda") for n in plan.gpu]

    def _gpu_guard(self, fell: list):
        """The benchmark's event hook: a GPU variant whose session came up without CUDA stops the run."""
        from ..measure.variants.gpu_column import check_on_gpu

        def on_event(msg) -> None:  # a protocol.Message
            if msg.kind == "ready":
                try:
                    check_on_gpu({v["name"]: v.get("session_providers") for v in msg.variants})
                except WorkbenchError as e:
                    fell.append(str(e))
                    if self._bench is not None:
                        self._bench.stop()
        return on_event

    def _check_provider(self) -> None:
        if self.state.provider == "cuda":
            from ..ort.session import cuda_status

            ok, why = cuda_status()
            if not ok:
                raise WorkbenchError(why)  # a GPU was asked for: never a CPU number instead

    def run_benchmark(self, names: list[str] | None = None) -> None:
        """Time the chosen variants in the worker process; the plots grow while it runs."""
        if not self.ready_to_measure("a benchmark is already running: stop it first"):
            return
        s = self.state

        def work(job: Job) -> None:
            from ..measure.harness.bench import stream_benchmark
            from ..measure.harness.explain import explain

            self._check_provider()
            vs = self.variants(names)
            vs += self.gpu_variants(self.gpu_column())
            fell: list[str] = []  # a GPU variant that landed on the CPU: an error, never a number
            series: dict[str, list[float]] = {v.name: [] for v in vs}
            s.bench_result, s.explanation, s.series = None, (), {k: () for k in series}
            text = self.text if (self.text is not None and s.bench_on_text) else None
            job.progress(f"benchmarking {len(vs)} variants (warm-up first)")

            def on_sample(sample) -> None:
                if fell:
                    return
                series.setdefault(sample.variant, []).append(float(sample.ms))
                now = time.perf_counter()
                if now - self._last_series >= 0.2:  # at most 5 redraws a second while samples stream
                    self._last_series = now
                    s.series = {k: tuple(v) for k, v in series.items()}

            answers = None
            from ..measure.variants import is_quantized

            if text is None and any(is_quantized(v.name) for v in vs):  # int8's answers, on the built-in sentences
                from ..measure.variants.answers import builtin_answers_text
                answers = builtin_answers_text(self.export_result.source)
            self._bench = stream_benchmark(vs, s.bench_config(), on_sample=on_sample,
                                           text=text if text is not None else answers,
                                           text_answers_only=text is None, on_event=self._gpu_guard(fell))
            r = self._bench.result(None)
            if fell:
                s.series = {}
                raise WorkbenchError(fell[0])
            from ..measure.variants.answers import int8_flags

            busy = r.machine_load.words() if r.machine_load else ""  # "" when the machine was quiet
            random_weights = bool(getattr(getattr(self.export_result, "source", None), "random_weights", False))
            with s.hold_trait_notifications():
                s.series = {k: tuple(v) for k, v in series.items()}
                s.explanation = (tuple(f"warning: {f}" for f in int8_flags(r.variants, random_weights))
                                 + ((f"warning: {busy}",) if busy else ()) + tuple(explain(r.rates, r.machine)))
                s.bench_result = r
            keys = [v.name for v in r.variants]
            msg = f"benchmark {'stopped' if r.stopped else 'done'}: " + ", ".join(
                f"{v.name} {v.p50_ms:.2f} ms" for v in r.variants if v.p50_ms)
            if len(keys) > 1 and r.ratio(keys[0], keys[-1]):
                msg += f" ({r.ratio(keys[0], keys[-1]):.2f}x)"
            self.say(msg + (f"; {busy}" if busy else ""), "ok")

        self.runner.start("benchmark", work, lane=MEASURE_LANE)

    def stop_benchmark(self) -> None:
        if self._bench is not None and not self._bench.done:
            self._bench.stop()
            self.say("stopping the benchmark", "busy")

    # ----------------------------------------------------------------- operator profile
    def profile(self, indices: list[int] | None = None) -> None:
        """Profile the operators of the before/after snapshots: op breakdown and latency overlay."""
        if not self.ready_to_measure():
            return
        s = self.state

        def work(job: Job) -> None:
            from ..measure.harness.profile import profile_ops

            b, a = self.pair_indices()
            snaps = s.snapshots
            chosen = list(indices or sorted({b, a}))
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
            self.set_view(overlay=True)
            self.say("profile done: nodes coloured by their share of latency", "ok")

        self.runner.start("profile", work, lane=MEASURE_LANE)


__all__ = ["MEASURE_LANE", "MeasureActions"]
