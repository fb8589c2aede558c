"""What each fusion buys: the full plan against the plan without each step, timed side by side."""

from __future__ import annotations

import json

from workbench.config import BenchConfig


def test_ablation_rows_graph_changes_and_tuned_plan():
    from workbench.measure.tune.ablation import fusion_ablation

    stages = []
    res = fusion_ablation("bert-tiny", BenchConfig(seq=16, runs=6, warmup=1, threads=1),
                          progress=lambda s, f: stages.append(s))
    steps = [r.step for r in res.rows]
    # every fusion that fired in the full plan gets a row (TorchScript export, ORT engine)
    assert {"skip_layer_norm", "attention", "bias_gelu"} <= set(steps) and res.engine == "ort"
    by = {r.step: r for r in res.rows}
    # left out, the step's op is gone from the graph the session runs and its parts are back
    assert by["skip_layer_norm"].graph_change["SkipLayerNormalization"] < 0
    assert by["skip_layer_norm"].graph_change["LayerNormalization"] > 0
    assert by["attention"].graph_change["Attention"] == -2 and by["attention"].graph_change["Softmax"] == 2
    assert by["bias_gelu"].graph_change == {"Add": 2, "BiasGelu": -2, "Gelu": 2}
    for r in res.rows:
        assert r.verdict in ("helps", "hurts", "within noise") and r.p50_without_ms > 0
        assert abs(r.saves_ms - r.saves_pct * res.full_p50_ms / 100.0) < 1e-9
        assert r.parity_max_abs_diff is not None and r.parity_max_abs_diff < 1e-3
        if abs(r.saves_pct) <= res.noise_pct:
            assert r.verdict == "within noise"
    assert res.noise_pct >= 1.0 and res.unfused_p50_ms > 0
    # The floor is a figure only when it is possible (under the measured time); a disturbed probe makes it unknown.
    computed = res.floor_computed_ms
    fastest = min([res.full_p50_ms, res.unfused_p50_ms] + [x for r in res.rows for x in (r.p50_without_ms,
                                                                                         r.p50_with_ms) if x])
    assert computed is not None and computed > 0  # the rate was measured, so the floor is computed
    assert res.floor_ms == (computed if computed <= fastest else None)
    # The attention kernels ONNX Runtime has besides the packed one are tried too, switched on (issue 42 item 4).
    alts = {r.step: r for r in res.rows if r.alternative_to}
    assert set(alts) == {"attention_as_mha", "attention_as_standard"}
    assert all(r.switched == "on" and r.alternative_to == "attention" and r.parity_max_abs_diff < 1e-4
               for r in alts.values())
    helped = [r for r in alts.values() if r.verdict == "helps"]
    best = max(helped, key=lambda r: r.saves_pct) if helped else None  # only the fastest kernel is kept ...
    left_out = by["attention"].verdict == "hurts" and (best is None or -by["attention"].saves_pct >= best.saves_pct)
    best = None if left_out else best  # ... unless leaving attention out buys more
    hurt = {r.step for r in res.rows if r.verdict == "hurts" and r.switched == "off"} - ({"attention"} if best else set())
    assert set(res.tuned_plan.disabled) == hurt and res.tuned_plan.engine == "ort"
    assert {a for a in alts if res.tuned_plan.enabled(a, False)} == ({best.step} if best else set())
    doc = json.loads(json.dumps(res.to_dict(), default=str))
    assert [r["step"] for r in doc["rows"]] == steps and "measuring" in stages
    assert list(res.to_frame()["step"]) == steps


def test_ablate_cli_json_and_bad_step():
    import subprocess
    import sys

    def cli(*a):
        return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())",
                               *a], capture_output=True, text=True, timeout=600)

    p = cli("ablate", "bert-tiny", "--steps", "bias_gelu", "--seq", "8", "--runs", "3", "--warmup", "1",
            "--threads", "1", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [r["step"] for r in doc["rows"]] == ["bias_gelu"] and doc["rows"][0]["graph_change"]["BiasGelu"] == -2
    assert doc["tuned_plan"]["engine"] == "ort" and doc["floor_computed_ms"] > 0
    assert doc["floor_ms"] in (doc["floor_computed_ms"], None)
    p = cli("ablate", "bert-tiny", "--steps", "bias_gleu")
    assert p.returncode == 2 and "unknown fusion step 'bias_gleu'" in p.stderr and "Traceback" not in p.stderr


def test_ablation_measures_the_standard_attention_step_left_out_and_switched_on():
    from workbench.config import FusionPlan
    from workbench.measure.tune.ablation import fusion_ablation

    cfg = BenchConfig(seq=16, runs=6, warmup=1, threads=1)
    kw = dict(exporter="dynamo", attention="sdpa", opset=23, steps=["standard_attention"])
    res = fusion_ablation("bert-tiny", cfg, **kw)
    (row,) = res.rows
    assert row.switched == "off" and row.fused_here["MultiHeadAttention"] == 2
    # left out, the exporter's standard op comes back with the head split and merge around it
    assert row.graph_change["Attention (standard)"] == 2 and row.graph_change["Attention"] == -2
    assert row.graph_change["Transpose"] == 8 and row.parity_max_abs_diff < 1e-4
    assert row.p50_with_ms == res.full_p50_ms
    assert ("standard_attention" in res.tuned_plan.disabled) == (row.verdict == "hurts")

    # off in the plan: the ablation times the plan with it switched on, and the tuned plan follows the verdict
    off = fusion_ablation("bert-tiny", cfg, plan=FusionPlan(disabled=frozenset({"standard_attention"})), **kw)
    (row,) = off.rows
    assert row.switched == "on" and row.fused_here["MultiHeadAttention"] == 2
    assert row.graph_change["Attention (standard)"] == 2 and row.p50_without_ms == off.full_p50_ms
    assert abs(row.saves_ms - row.saves_pct * off.full_p50_ms / 100.0) < 1e-9
    on = "standard_attention" not in off.tuned_plan.disabled
    assert on == (row.verdict == "helps")
    doc = json.loads(json.dumps(off.to_dict(), default=str))
    assert doc["rows"][0]["switched"] == "on" and ("standard_attention" in doc["tuned_plan"]["enabled"]) == on


def test_tuned_plan_switches_on_a_step_that_helps_and_off_one_that_hurts():
    from workbench.config import FusionPlan
    from workbench.measure.tune.ablation import AblationResult, AblationRow

    rows = [AblationRow("standard_attention", {"MultiHeadAttention": 12}, {"Attention (standard)": 12}, 100.0, 4.0,
                        4.0, "helps", 0.0, "on", 96.0),
            AblationRow("skip_layer_norm", {"SkipLayerNormalization": 24}, {}, 97.0, -3.0, -3.0, "hurts", 0.0)]
    res = AblationResult("bert-base", "onnxscript", rows, 100.0, 1.0, 120.0, 60.0, 70.0, {}, {},
                         FusionPlan(disabled=frozenset({"standard_attention"})))
    t = res.tuned_plan
    assert t.enabled("standard_attention") and not t.enabled("skip_layer_norm")
    md = res.to_markdown()
    assert "switch off skip_layer_norm and switch on standard_attention" in md
    assert "--disable skip_layer_norm --enable standard_attention" in md


def test_the_markdown_names_a_busy_machine_as_bench_does_and_a_quiet_one_never():
    from workbench.measure.harness.load import MachineLoad
    from workbench.measure.tune.ablation import AblationResult, AblationRow

    rows = [AblationRow("skip_layer_norm", {"SkipLayerNormalization": 24}, {}, 97.0, -3.0, -3.0, "hurts", 0.0)]
    busy = MachineLoad(cores=2, threads=2, seconds=8, other_cores=1.2, runnable=4.1, cpus=2)
    quiet = MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.1, runnable=2.0, cpus=2)
    made = {name: AblationResult("bert-base", "ort", rows, 100.0, 1.0, 120.0, 60.0, 70.0, {}, {},
                                 machine_load=load.to_dict()) for name, load in (("busy", busy), ("quiet", quiet))}
    lines = made["busy"].to_markdown().splitlines()
    assert f"warning: {busy.words()}" in lines  # bench's sentence, on a line of its own under the table
    assert lines.index(f"warning: {busy.words()}") > lines.index("|---|---|---|---|---|---|")
    assert "busy" not in made["quiet"].to_markdown() and "warning" not in made["quiet"].to_markdown()
    assert made["busy"].to_dict()["machine_load"]["busy"] is True
    assert made["quiet"].to_dict()["machine_load"]["words"] == ""
    from workbench.ui.measuring.panel import ablation_html  # the app's table says the same
    assert f"warning: {busy.words()}" in ablation_html(made["busy"]) and "warning" not in ablation_html(made["quiet"])


def test_savings_are_round_by_round_ratios_that_load_in_a_few_rounds_does_not_move():
    from workbench.measure.harness.results import VariantStats
    from workbench.measure.tune.ablation import _round_by_round

    def stats(samples):
        return VariantStats.from_samples({"name": "v", "provider": "cpu"}, samples, 1, None, None, [])

    # the step saves 5% in every round; rounds 2 and 5 ran under load (twice as slow for both, or one only)
    full = stats([100.0, 200.0, 100.0, 100.0, 100.0, 100.0, 100.0])
    without = stats([105.0, 210.0, 105.0, 105.0, 105.0, 210.0, 105.0])
    assert abs(_round_by_round(without, full) - 1.05) < 1e-9


def test_an_alternative_kernel_is_kept_only_where_it_buys_more_than_leaving_its_step_out():
    from workbench.config import FusionPlan
    from workbench.measure.tune.ablation import AblationResult, AblationRow

    def rows(attention_pct):
        return [AblationRow("attention", {"Attention": 6}, {}, 100.0, attention_pct, attention_pct,
                            "hurts" if attention_pct < -1 else "within noise", 0.0),
                AblationRow("attention_as_mha", {"MultiHeadAttention": 6}, {}, 100.0, 3.0, 3.0, "helps", 0.0, "on",
                            97.0, "attention"),
                AblationRow("attention_as_standard", {"Attention (standard)": 6}, {}, 100.0, 8.0, 8.0, "helps", 0.0,
                            "on", 92.0, "attention")]

    def tuned(attention_pct):
        return AblationResult("minilm", "ort", rows(attention_pct), 100.0, 1.0, 90.0, None, None, {}, {},
                              FusionPlan(engine="ort")).tuned_plan

    within = tuned(0.0)  # the packed kernel neither helps nor hurts: the fastest other kernel is kept, alone
    assert within.enabled("attention") and within.enabled("attention_as_standard", False)
    assert not within.enabled("attention_as_mha", False)
    small_loss = tuned(-4.0)  # leaving attention out buys 4%, its standard kernel 8%: the kernel stays
    assert small_loss.enabled("attention") and small_loss.enabled("attention_as_standard", False)
    big_loss = tuned(-17.0)  # leaving it out buys 17%: it goes, and no alternative with it
    assert not big_loss.enabled("attention") and not big_loss.enabled("attention_as_standard", False)
