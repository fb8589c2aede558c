"""The report's and the terminal's words: random weights give no verdict on int8; a busy machine is named."""

from __future__ import annotations

import re
import subprocess
import sys

from workbench.measure.harness.load import MachineLoad
from workbench.report.data import summary
from workbench.report.html import render
from workbench.viz.summary import summary_lines

TP = {"kind": "embedding", "sentences": 39, "top1_agreement": 0.8462, "spearman": 0.95012}
BUSY = MachineLoad(cores=2, threads=2, seconds=9.0, other_cores=1.2, steal=0.0, runnable=4.1, loadavg=(0.9, 1.6),
                   cpus=2)


def _data(random_weights: bool, load: MachineLoad | None = None) -> dict:
    return {"model": {"label": "bert-base (random weights)" if random_weights else "my-model",
                      "random_weights": random_weights},
            "errors": [],
            "bench": {"config": {"batch": 1, "sequence": 128, "threads": 2},
                      "variants": [{"name": "torch", "p50_ms": 135.0, "p90_ms": 140.0, "runs": 20, "parity": None},
                                   {"name": "fused", "p50_ms": 60.0, "p90_ms": 62.0, "runs": 20,
                                    "parity": {"cosine": 1.0}},
                                   {"name": "int8", "p50_ms": 30.0, "p90_ms": 31.0, "runs": 20,
                                    "parity": {"cosine": 0.998}}],
                      "int8_answers": {"int8": TP},
                      "int8_flags": [] if random_weights else ["int8: its answers change (top-1 85%, Spearman 0.9501)"],
                      "machine_load": load.to_dict() if load else None}}


def _visible(html: str) -> str:
    html = re.sub(r"<(script|style|svg)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_random_weights_say_what_the_check_would_mean_not_that_int8_changes_the_answers():
    lines = summary_lines(summary(_data(random_weights=True)))
    line = next(x for x in lines if x.startswith("int8 answers: "))
    assert line == ("int8 answers: checked on 39 sentences: the nearest other sentence is the same for 84.6% of them; "
                    "their similarities rank alike at Spearman 0.9501; the weights are random, so the answers mean "
                    "nothing and this is no verdict on int8 (with real weights, the same nearest sentence for 100% "
                    "and Spearman 0.99 or more would mean int8 keeps the answers)")
    page = _visible(render(_data(random_weights=True)))
    assert "changes the answers" not in page and "answers change" not in page and "warning: int8" not in page
    assert "no verdict on int8" in page and "with real weights" in page


def test_real_weights_say_what_was_checked_and_the_verdict():
    line = next(x for x in summary_lines(summary(_data(random_weights=False))) if x.startswith("int8 answers: "))
    assert line.startswith("int8 answers: checked on 39 sentences: the nearest other sentence is the same for 84.6%")
    assert line.endswith(": int8 changes the answers") and "random" not in line


def test_a_busy_machine_is_named_in_the_summary_and_the_report_and_a_quiet_one_is_not():
    busy = summary_lines(summary(_data(False, BUSY)))
    assert (f"warning: {BUSY.words()}") in busy
    assert BUSY.words().startswith("the machine was busy while measuring (other processes used 1.2 of its 2 cores; "
                                   "load 4.1 on 2 cores)")
    page = _visible(render(_data(False, BUSY)))
    assert page.count("the machine was busy while measuring") == 2  # the first screen and the latency section
    quiet = MachineLoad(cores=2, threads=2, seconds=9.0, other_cores=0.05, steal=0.0, runnable=2.0, cpus=2)
    for load in (quiet, None):
        assert not any("busy" in x for x in summary_lines(summary(_data(False, load))))
        assert "the machine was busy" not in render(_data(False, load))


def test_a_tunes_busy_machine_is_named_too():
    data = _data(False)
    data["tune"] = {"machine_load": BUSY.to_dict()}
    assert f"warning: {BUSY.words()}" in summary_lines(summary(data))


def test_cli_report_on_random_weights_gives_no_int8_verdict(tmp_path):
    """bert-tiny (a preset: random weights) through the real `workbench report`: its int8 is checked on the built-in
    sentences, and neither the terminal nor the report warns that int8 changes the answers."""
    p = subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", "report",
                        "bert-tiny", "--runs", "3", "--seq", "16", "--threads", "1", "-o", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("int8 answers: "))
    assert line.startswith("int8 answers: checked on 39 sentences: ") and "no verdict on int8" in line, line
    assert "changes the answers" not in p.stdout
    page = _visible(next(tmp_path.glob("report-*.html")).read_text())
    assert "no verdict on int8" in page and "answers change" not in page and "changes the answers" not in page


def test_random_weights_answers_on_text_are_not_coloured_as_changed():
    """With text, each variant's answers sit in the latency table: red where they changed, but not on random
    weights, whose answers mean nothing."""
    def page(random_weights):
        data = _data(random_weights)
        data["text"] = {"sentences": 39, "batches": 6}
        data["bench"]["variants"][2]["task_parity"] = TP
        html = render(data)
        return html[html.index("<h2>Latency</h2>"):]
    assert "class='bad'>top-1 84.6%" in page(False)
    assert "class='bad'>top-1" not in page(True) and "top-1 84.6%, Spearman 0.9501" in page(True)
