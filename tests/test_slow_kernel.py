"""``benchmarks/slow_kernel.py``: each kernel and the subgraph it replaced compute the same thing, and the sessions
run what the table says (the unfused side is not fused back by the session)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "slow_kernel.py"


def test_every_kernel_matches_what_it_replaced_and_stays_apart():
    p = subprocess.run([sys.executable, str(SCRIPT), "--kernel", "attention,skiplayernorm,biasgelu", "--batch", "1,3",
                        "--seq", "8", "--pad", "0,0.5", "--hidden", "32", "--heads", "4", "--threads", "1",
                        "--runs", "3", "--warmup", "1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = [ln.split("|")[1:-1] for ln in p.stdout.splitlines() if re.match(r"\| (attention|skip|bias)", ln)]
    assert len(rows) == 3 * 2 * 2, p.stdout
    assert all(float(r[8]) < 1e-4 for r in rows), p.stdout  # the outputs' max abs diff
    assert {r[3].strip() for r in rows if r[1].strip() == "3"} == {"0%", "50%"}  # padding as asked, rows 8, 6, 4
    ops = dict(re.findall(r"<!-- (\w+): (.*) -->", p.stdout))
    fused, unfused = ops["attention"].split("; unfused runs ")
    assert fused == "fused runs Attention" and "Softmax" in unfused and "Attention" not in unfused.split()
    assert ops["skiplayernorm"] == "fused runs SkipLayerNormalization; unfused runs Addx2 LayerNormalization"
    assert ops["biasgelu"].endswith("unfused runs Add Gelu")
    machine, load = p.stdout.splitlines()[:2]
    assert "1 threads" in machine and "microarchitecture" in machine and load.startswith("load average ")
