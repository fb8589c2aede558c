"""How fast bad input is refused: the speed limits the tests used to assert, measured and printed instead.

A refusal should come at once, not after minutes of work. The tests check that each bad input is refused in
one line (``tests/test_bad_inputs_round3.py``, ``tests/test_bad_inputs_round4.py``,
``tests/measure/test_fleet_limits.py``); how long it takes depends on the machine's load, so it is measured
here, where a figure can be read against its target rather than fail a test on a busy machine:

- round 3's 16 CLI cases (output paths, sweep bombs, non-BERT inputs, cache commands), each within 10 s;
- round 4's model cases (files outside the folder, broken models, decoders, oversized tables), each within 10 s;
- reading a 300,000-line text file (the first 1,000 sentences kept), within 5 s;
- refusing the exploding sweep specs (alias bombs, a recursive alias, a billion points), each within 10 s.

Each CLI set runs in one fresh process (``workbench.cli.main`` per case, as the tests drive it) with a
private cache, so an export a case needs is timed, not read from an earlier run::

    python benchmarks/bad_input_speed.py [--skip-round4] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "measure")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CLI_LIMIT_S, READ_LIMIT_S, SPEC_LIMIT_S = 10.0, 5.0, 10.0


def _cli_cases(driver: str, cases: dict, cache: Path) -> list[dict]:
    """Run ``cases`` ({name: argv or (argv, env)}) through the test's driver; its per-case seconds."""
    proc = subprocess.run([sys.executable, "-c", driver, json.dumps(cases)], capture_output=True, text=True,
                          timeout=1800, env={**os.environ, "WORKBENCH_CACHE": str(cache)})
    if proc.returncode:
        raise SystemExit(f"the driver failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def round3(tmp: Path) -> list[dict]:
    import test_bad_inputs_round3 as r3

    inp, out = tmp / "r3-in", tmp / "r3-out"
    inp.mkdir()
    out.mkdir()
    return [{"set": "round 3 CLI", "case": r["case"], "seconds": r["seconds"], "rc": r["rc"], "limit": CLI_LIMIT_S}
            for r in _cli_cases(r3.DRIVER, r3._cases(inp, out), tmp / "cache3")]


def round4(tmp: Path) -> list[dict]:
    import test_bad_inputs_round4 as r4

    inp, out = tmp / "r4-in", tmp / "r4-out"
    inp.mkdir()
    out.mkdir()
    cases, _ = r4._cases(inp, out)
    rows = []
    for name, argv in cases.items():  # each in its own process, as a user's command runs
        (r,) = _cli_cases(r4.DRIVER, {name: argv}, tmp / "cache4")
        rows.append({"set": "round 4 CLI", "case": name, "seconds": r["seconds"], "rc": r["rc"], "limit": CLI_LIMIT_S})
    return rows


def read_300k(tmp: Path) -> list[dict]:
    from workbench.text import read_sentences

    big = tmp / "big.txt"
    big.write_text("".join(f"s {i}\n" for i in range(300_000)))
    t = time.perf_counter()
    lines = read_sentences(big, notes=[])
    return [{"set": "text", "case": f"read 300,000 lines (kept {len(lines):,})", "seconds": time.perf_counter() - t,
             "rc": None, "limit": READ_LIMIT_S}]


def exploding_specs(tmp: Path) -> list[dict]:
    from test_fleet_limits import BILLION_LAUGHS

    from workbench.errors import ConfigError
    from workbench.measure.fleet.spec import expand

    specs = {"billion laughs": BILLION_LAUGHS, "recursive alias": "x: &x [*x]\n",
             "a billion points": "".join(f"{k}: [" + ",".join(map(str, range(1, 1001))) + "]\n"
                                         for k in ("seq", "batch", "threads"))}
    rows = []
    for name, text in specs.items():
        p = tmp / f"{name.replace(' ', '-')}.yaml"
        p.write_text(text)
        t = time.perf_counter()
        try:
            expand(p)
            refused = False
        except ConfigError:
            refused = True
        rows.append({"set": "sweep spec", "case": name + ("" if refused else " (NOT refused)"),
                     "seconds": time.perf_counter() - t, "rc": None, "limit": SPEC_LIMIT_S})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-round4", action="store_true", help="leave out round 4's model cases (they build "
                                                                 "tiny models with torch first)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bad-input-speed-") as d:
        tmp = Path(d)
        rows = round3(tmp) + ([] if args.skip_round4 else round4(tmp)) + read_300k(tmp) + exploding_specs(tmp)
    over = [r for r in rows if r["seconds"] > r["limit"]]
    if args.json:
        print(json.dumps({"rows": rows, "over_limit": len(over)}, indent=1))
        return 0
    print(f"{'set':12s} {'case':58s} {'seconds':>8s} {'limit':>6s}")
    for r in rows:
        flag = "  OVER" if r["seconds"] > r["limit"] else ""
        print(f"{r['set']:12s} {r['case'][:58]:58s} {r['seconds']:8.2f} {r['limit']:6.0f}{flag}")
    for s in dict.fromkeys(r["set"] for r in rows):
        sec = [r["seconds"] for r in rows if r["set"] == s]
        print(f"{s}: {len(sec)} case(s), slowest {max(sec):.2f} s, total {sum(sec):.1f} s")
    print(f"{len(over)} of {len(rows)} over their limit" + (f" (machine load: {os.getloadavg()[0]:.1f})"
                                                           if hasattr(os, "getloadavg") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
