"""First contact: from running ``Workbench(MODEL)`` in JupyterLab to its graph drawn in the browser.

Usage:
    python benchmarks/first_graph.py [MODEL] [--exporter E] [--states empty,export,reopen] [--cache DIR] [--click N]

``MODEL`` may also be ``modernbert-small``: a small ModernBERT (4 layers, hidden 256, a 128-token local window
on three of them, random weights) written to a temporary folder first, so that its first open, on an empty
cache, is timed as a user with such a model would see it (``--exporter dynamo``, the exporter whose graph
the workbench's rules fuse fully, is the default for it).

Each state gets a fresh JupyterLab server, kernel and headless Chromium (Debian's), a 1280 x 1000
window, and one notebook cell ``app = Workbench(MODEL); app``; the clock runs from the cell's
Shift+Enter to the first node drawn in the "after" pane (``first_graph_s``: on a first open, the export's
graph, drawn while the fusion steps run) and to the fused step's graph (``fused_graph_s``). The states, in this order, on one cache
folder of their own:

- ``empty``: nothing cached (export, fusion timeline, first graph; progress shows meanwhile);
- ``export``: the export cached, the fusion timeline's on-disk snapshots removed;
- ``reopen``: the same model opened before (export and timeline cached).

Also prints the headless figure: ``Workbench(MODEL, background=False).wait()`` in a fresh process,
reopened (run twice: the first may finish what the browser kernels left, e.g. auto's comparison). Prints JSON with the machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Folders of the cache that hold the fusion timeline's snapshots (removed for the "export" state).
TIMELINE_DIRS = ("timelines",)


def _lab():
    spec = importlib.util.spec_from_file_location("test_lab", ROOT / "tests" / "browser" / "test_lab.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kernels() -> set[int]:
    import psutil

    out = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any("ipykernel_launcher" in part for part in (proc.info["cmdline"] or [])):
            out.add(proc.info["pid"])
    return out


def _wait_kernels_gone(before: set[int], timeout: float = 90) -> float:
    """Wait until the kernels this state started have exited (their at-exit disk writes included), so the
    next state runs on a quiet machine; seconds waited."""
    t0 = time.perf_counter()
    while _kernels() - before and time.perf_counter() - t0 < timeout:
        time.sleep(0.2)
    return round(time.perf_counter() - t0, 1)


#: The small ModernBERT ``modernbert-small`` stands for (transformers builds it natively; random weights).
SMALL_MODERNBERT = dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=384,
                        vocab_size=50368, max_position_embeddings=8192, local_attention=128,
                        global_attn_every_n_layers=3, pad_token_id=50283, bos_token_id=50281, eos_token_id=50282,
                        cls_token_id=50281, sep_token_id=50282, mask_token_id=50284)


def small_modernbert(folder: Path) -> Path:
    """Write the small ModernBERT's config and seeded random weights to ``folder``."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model("modernbert", **SMALL_MODERNBERT)
    transformers.AutoModel.from_config(cfg).save_pretrained(folder)
    return folder


def one_open(model: str, cache: Path, click: int = 0, exporter: str = "torchscript") -> dict:
    """Seconds from running the cell to the first drawn node, and to the first progress shown."""
    import nbformat
    from playwright.sync_api import sync_playwright

    lab_mod = _lab()
    os.environ["WORKBENCH_CACHE"] = str(cache)
    with tempfile.TemporaryDirectory(prefix="wb-first-") as tmp, lab_mod.jupyter_lab(Path(tmp) / "lab", model) as lab:
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell(f"from workbench import Workbench\n"
                                              f"app = Workbench({model!r}, exporter={exporter!r})\napp")]
        nbformat.write(nb, str(lab["root"] / "first.ipynb"))
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=lab_mod.CHROMIUM, args=lab_mod.ARGS, headless=True)
            try:
                page = b.new_page(viewport={"width": 1280, "height": 1000})
                console: list[str] = []
                page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
                page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
                page.goto(f"{lab['base']}/lab/tree/first.ipynb?token={lab['token']}")
                page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
                try:
                    page.locator(".jp-Dialog button.jp-mod-accept").click(timeout=8_000)
                except Exception:
                    pass
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
                page.locator(".jp-CodeCell .jp-InputArea-editor").first.click()
                t0 = time.perf_counter()
                page.keyboard.press("Shift+Enter")
                page.wait_for_selector(".wb-status-line", state="attached", timeout=600_000)
                shown = time.perf_counter() - t0
                try:
                    page.wait_for_selector(".wb-graph-after .wb-gw-node", state="attached",
                                           timeout=int(os.environ.get("FIRST_GRAPH_TIMEOUT_S", "900")) * 1000)
                except Exception:
                    shots = ROOT / "test-output" / "first_graph"
                    shots.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(shots / "failure.png"), full_page=True)
                    (shots / "failure.html").write_text(page.locator(".jp-OutputArea").first.inner_html()[:50000])
                    (shots / "console.txt").write_text("\n".join(console))
                    raise
                graph = time.perf_counter() - t0
                status = page.locator(".wb-status-line").first.inner_text()
                # The first graph may be the export's, drawn while the fusion steps run: then the fused view.
                page.wait_for_function("() => { const t = document.querySelector('.wb-graph-after .wb-gw-title');"
                                       " return t && !t.textContent.startsWith('after export'); }", timeout=900_000)
                fused = time.perf_counter() - t0
                clicks = []
                for _ in range(click):  # at once, as a user who clicks the selected step's checkbox first
                    page.wait_for_selector(".wb-row.wb-step-attention input[type=checkbox]", timeout=120_000)
                    clicks.append(round(lab_mod.click_toggle(page, "attention", timeout_s=300), 2))
            finally:
                b.close()
    out = {"app_shown_s": round(shown, 2), "first_graph_s": round(graph, 2), "fused_graph_s": round(fused, 2),
           "status": status.strip()[:160]}
    if click:
        out["toggle_clicks_right_after_s"] = clicks
    return out


def headless_reopen(model: str, cache: Path, exporter: str = "torchscript") -> float:
    code = f"from workbench import Workbench; Workbench({model!r}, exporter={exporter!r}, background=False).wait()"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "WORKBENCH_CACHE": str(cache)},
                   capture_output=True)
    return round(time.perf_counter() - t0, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="bert-base")
    ap.add_argument("--exporter", default=None, help="torchscript (default) or dynamo (default for modernbert-small)")
    ap.add_argument("--states", default="empty,export,reopen")
    ap.add_argument("--cache", default=None, help="cache folder to use (default: a new temporary one)")
    ap.add_argument("--click", type=int, default=0,
                    help="then click Attention's checkbox this many times at once and time each (see ui_toggle.py)")
    a = ap.parse_args()
    from workbench.ort.machine import describe_machine, machine_line

    cache = Path(a.cache or tempfile.mkdtemp(prefix="wb-first-cache-"))
    cache.mkdir(parents=True, exist_ok=True)
    model, exporter = a.model, a.exporter or "torchscript"
    if a.model == "modernbert-small":  # written before the clock starts: the cache stays empty
        model = str(small_modernbert(Path(tempfile.mkdtemp(prefix="wb-modernbert-small-"))))
        exporter = a.exporter or "dynamo"
    out = {"model": a.model, "exporter": exporter, "machine": machine_line(describe_machine(check_cuda=False)),
           "load": os.getloadavg(), "window": "1280x1000, Debian chromium headless", "states": {}}
    for state in a.states.split(","):
        if state == "export":
            for d in TIMELINE_DIRS:
                shutil.rmtree(cache / d, ignore_errors=True)
        if state == "empty" and any(cache.iterdir()):
            raise SystemExit(f"--states empty needs an empty cache folder, {cache} is not")
        before = _kernels()
        out["states"][state] = one_open(model, cache, a.click, exporter)
        out["states"][state]["load_after"] = os.getloadavg()
        out["states"][state]["kernel_exit_wait_s"] = _wait_kernels_gone(before)
        print(state, out["states"][state], file=sys.stderr)
    # The browser kernels are shut down before auto's background comparison can store the other engine's
    # steps, so the first headless wait() may compute them; the second is the reopened figure.
    out["headless_after_browser_s"] = headless_reopen(model, cache, exporter)
    out["headless_reopen_s"] = headless_reopen(model, cache, exporter)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
