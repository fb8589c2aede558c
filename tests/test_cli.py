"""The command line as a user runs it: real processes, exit codes, one-line errors."""

import json
import os
import subprocess
import sys

import pytest

import badmodels as bm


def wb(*args, check=False):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                          env=os.environ, timeout=600)


def test_version_and_help_on_every_command():
    out = wb("--version")
    assert out.returncode == 0 and out.stdout.startswith("workbench ")
    top = wb("--help")
    assert top.returncode == 0
    import re

    commands = re.findall(r"^    (\w+)\s{2,}", top.stdout, flags=re.M)
    assert {"export", "report"} <= set(commands)
    for c in commands:
        h = wb(c, "--help")
        assert h.returncode == 0 and "usage: workbench " + c in h.stdout


def test_export_json_reports_path_nodes_and_parity(tiny_export, tmp_path):
    out = wb("export", "bert-tiny", "--json", "-o", tmp_path)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["nodes"] == tiny_export().nodes
    assert info["parity"]["ok"] is True and info["parity"]["max_abs_diff"] < 1e-4
    assert os.path.exists(info["path"]) and info["path"].startswith(str(tmp_path))
    again = wb("export", "bert-tiny", "--json", "-o", tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr


@pytest.mark.parametrize("case", ["empty", "truncated", "random", "image", "text", "directory", "missing"])
def test_bad_model_files_exit_2_with_one_line_and_no_traceback(tmp_path, tiny_export, case):
    files = bm.bad_files(tmp_path / "zoo", tiny_export().path.read_bytes())
    before = {p.name: p.read_bytes() for p in (tmp_path / "zoo").iterdir() if p.is_file()}
    out = wb("export", files[case])
    assert out.returncode == 2
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("workbench: error:"), out.stderr
    assert "Traceback" not in out.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "zoo").iterdir() if p.is_file()} == before
    debug = wb("--debug", "export", files[case])
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_bad_option_values_exit_2():
    out = wb("export", "bert-tiny", "--exporter", "tflite")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_report_writes_an_html_file(tmp_path):
    out = wb("report", "bert-tiny", "-o", tmp_path, "--no-bench")
    assert out.returncode == 0, out.stderr
    html_files = list(tmp_path.glob("report-bert-tiny-*.html"))
    assert len(html_files) == 1
    text = html_files[0].read_text()
    assert "random weights" in text and "<table>" in text and "Fusion timeline" in text
