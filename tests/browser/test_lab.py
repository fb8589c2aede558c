"""The app in a real JupyterLab, driven by headless Chromium (Debian's) through Playwright.

Starts JupyterLab on a free port with a token in a temporary copy of the
notebooks, opens 01_fusion_tour, runs all cells, checks that the app drew
(graph, counts table, latency plot), switches the Attention fusion off and
checks that the graph and the counts changed. Screenshots go to
``test-output/browser/``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]
#: The model the notebook opens; bert-tiny keeps CI short, WORKBENCH_BROWSER_MODEL=bert-base measures the figure.
MODEL = os.environ.get("WORKBENCH_BROWSER_MODEL", "bert-tiny")
SHOTS = ROOT / "test-output" / "browser"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Chromium is not installed at {CHROMIUM} "
                                                            "(apt-get install chromium)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyter_lab(root: Path, model: str = MODEL):
    """A JupyterLab server on 127.0.0.1 with a token, serving a copy of the notebooks in ``root``.

    Yields ``{"base", "token", "root"}``; the notebooks open ``model`` (WORKBENCH_NOTEBOOK_MODEL).
    Also used by ``benchmarks/ui_toggle.py --browser``.
    """
    root.mkdir(parents=True, exist_ok=True)
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(nb, root / nb.name)
    port, token = _free_port(), secrets.token_hex(16)
    # Lab 4 detaches off-screen cells ("windowing"); draw every cell so the app stays in the page.
    settings = root / ".lab-settings"
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True, exist_ok=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}')
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True, exist_ok=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}')
    env = dict(os.environ, WORKBENCH_NOTEBOOK_MODEL=model, JUPYTER_CONFIG_DIR=str(root / ".jupyter-config"),
               JUPYTER_RUNTIME_DIR=str(root / ".jupyter-runtime"), JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".lab-workspaces"))
    log = open(root / "lab.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--ServerApp.open_browser=False", "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("JupyterLab did not start: " + (root / "lab.log").read_text()[-2000:])
            time.sleep(0.5)
        yield {"base": base, "token": token, "root": root}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def open_and_run(page, lab: dict, notebook: str = "01_fusion_tour.ipynb", timeout_s: float = 240) -> None:
    """Open ``notebook`` in the page, run all its cells and wait until the kernel is idle again."""
    page.goto(f"{lab['base']}/lab/tree/{notebook}?token={lab['token']}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
    # A fresh server may ask which kernel to start: take the notebook's own (python3).
    try:
        page.locator(".jp-Dialog button.jp-mod-accept").click(timeout=8_000)
    except Exception:
        pass  # no dialog: the kernel started by itself
    # The kernel must be up before "Run All Cells".
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    # The app draws: graph panes, counts table, live latency plot.
    page.wait_for_selector(".wb-app", state="attached", timeout=120_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.wb-status-line')].some(e => e.innerText.includes('after fusion'))",
        timeout=timeout_s * 1000)
    # Wait for every cell to finish (the notebook toggles Attention off and on again itself).
    page.wait_for_function(
        "() => ![...document.querySelectorAll('.jp-InputPrompt')].some(e => e.innerText.includes('*'))"
        " && document.querySelector('.jp-Notebook-ExecutionIndicator[data-status=\"idle\"]')",
        timeout=timeout_s * 1000)


#: In the page: stamps the checkbox's click event, then the first frame painted after the status line,
#: the "after" graph's title and the counts table have all changed (what the user sees change).
_STAMP = """([want, old, oldCounts]) => {
  const done = () => {
    const t = document.querySelector('.wb-graph-after .wb-gw-title'), c = document.querySelector('.wb-counts table');
    return t && c && t.textContent !== old && c.textContent !== oldCounts &&
      [...document.querySelectorAll('.wb-status-line')].some(e => e.innerText.includes(want));
  };
  window.__wbToggle = { click: null, shown: null };
  document.addEventListener('click', (ev) => { window.__wbToggle.click = ev.timeStamp; }, { capture: true, once: true });
  const obs = new MutationObserver(() => {
    if (window.__wbToggle.click === null || !done()) return;
    obs.disconnect();
    requestAnimationFrame(() => { window.__wbToggle.shown = performance.now(); });
  });
  obs.observe(document.querySelector('.wb-app'), { subtree: true, childList: true, characterData: true, attributes: true });
}"""


def click_toggle(page, step: str, timeout_s: float = 60) -> float:
    """Click ``step``'s checkbox; seconds from the click event to the first frame painted after the status
    line, the counts table and the "after" graph all changed (measured in the page, so the test driver's
    own checks before a click are not counted)."""
    toggle = page.locator(f".wb-row.wb-step-{step.replace('_', '-')} input[type=checkbox]").first
    on = toggle.is_checked()
    title = _text(page, ".wb-graph-after .wb-gw-title")
    counts = _text(page, ".wb-counts table")
    page.evaluate(_STAMP, [f"{step} {'off' if on else 'on'}", title, counts])
    toggle.click()
    page.wait_for_function("() => window.__wbToggle.shown !== null", timeout=timeout_s * 1000)
    return page.evaluate("() => (window.__wbToggle.shown - window.__wbToggle.click) / 1000")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 with a token, serving a copy of the notebooks."""
    with jupyter_lab(tmp_path_factory.mktemp("lab")) as server:
        yield server


def _text(page, selector: str) -> str:
    return page.locator(selector).first.text_content() or ""


def _never_wider_than_the_area(page) -> dict:
    """Resize the window so the notebook column is 700 to 2560 px: no figure overflows; the app's widths."""
    # No figure is ever wider than its output area, at any window width; resizing redraws them.
    # Notebook columns of 700, 900, 1280 and 2560 px: the window is the column plus what the
    # file browser and JupyterLab's bars take beside it.
    beside = 1280 - page.evaluate("() => document.querySelector('.wb-app').getBoundingClientRect().width")
    widths = {}
    for vw in (int(700 + beside), int(900 + beside), int(1280 + beside), int(2560 + beside)):
        page.set_viewport_size({"width": vw, "height": 1000})
        page.wait_for_timeout(2000)
        over = page.evaluate("""() => [...document.querySelectorAll('.wb-app .js-plotly-plot, .wb-app .wb-gw-svg')].map(p => {
            const out = p.closest('.jp-OutputArea-output') || p.closest('.wb-app');
            const r = p.getBoundingClientRect(), o = out.getBoundingClientRect();
            return r.width > 0 ? r.right - o.right : -1; }).filter(d => d > 1)""")
        assert over == [], (vw, over)
        widths[vw] = page.evaluate("() => document.querySelector('.wb-app').getBoundingClientRect().width")
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.wait_for_timeout(1500)
    return widths


def _click_rings_and_zoom(page) -> None:
    """A click on a fused node rings what it replaced; zoom in and back."""
    # A click on the fused Attention node in the "after" pane rings what it replaced in the "before" pane;
    # its hover names it.
    page.locator(".wb-graph-panel").first.scroll_into_view_if_needed()
    fused = page.locator(".wb-graph-after .wb-gw-node[data-op='Attention']").first
    fused.hover()
    page.wait_for_selector(".wb-graph-after .wb-gw-tip b", state="visible", timeout=10_000)
    assert _text(page, ".wb-graph-after .wb-gw-tip").strip()
    fused.click()
    page.wait_for_selector(".wb-graph-before .wb-gw-selected", state="attached", timeout=30_000)
    assert page.locator(".wb-graph-after .wb-gw-selected").count() == 1
    fused.click()  # a second click clears the selection
    page.wait_for_selector(".wb-graph-after .wb-gw-selected", state="detached", timeout=30_000)
    # Zoom in and back: the nodes move apart, then return.
    spread = lambda: page.evaluate("""() => { const n = [...document.querySelectorAll(
        '.wb-graph-after .wb-gw-node')].map(e => e.getBoundingClientRect());
        return Math.max(...n.map(r => r.y)) - Math.min(...n.map(r => r.y)); }""")
    home = spread()
    page.locator(".wb-graph-after .wb-gw-tools button").first.click()
    page.wait_for_timeout(300)
    assert spread() > 1.2 * home
    page.locator(".wb-graph-after .wb-gw-tools button").nth(2).click()
    page.wait_for_timeout(300)
    assert abs(spread() - home) < 1


def _fold_and_whole_model(page) -> None:
    """The steps that cannot apply open from one line; the whole model is named boxes."""
    # Steps that cannot apply to this model sit under one line until it is clicked.
    fold = page.locator(".wb-na-toggle").first
    assert "not applicable to this model (" in fold.inner_text()
    assert not page.locator(".wb-na-rows .wb-row").first.is_visible()
    fold.click()
    page.wait_for_selector(".wb-na-rows .wb-row", state="visible", timeout=30_000)
    # The whole model reads like an architecture diagram: named boxes, the model's own output name.
    page.locator(".wb-graph-panel .widget-toggle-button:has-text('whole model')").first.click()
    page.wait_for_function("() => [...document.querySelectorAll('.wb-graph-after .wb-gw-label')]"
                           ".some(e => e.textContent.startsWith('layer 1 ('))", timeout=30_000)
    labels = page.evaluate("() => [...document.querySelectorAll('.wb-graph-after .wb-gw-label')]"
                           ".map(e => e.textContent)")
    assert "last_hidden_state" in labels and any(x.startswith("embeddings (") for x in labels), labels
    assert any(x.startswith("attention mask") for x in labels), labels
    page.locator(".wb-graph-panel").first.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "04_whole_model.png"))
    page.locator(".wb-graph-panel .widget-toggle-button:has-text('one layer')").first.click()


def _profile_and_benchmark(page) -> None:
    """Profile ops fills the breakdown and the overlay; a benchmark fills the live plot and the table."""
    # Profile ops: the op-type breakdown fills and the graph switches to the latency overlay.
    page.locator(".wb-profile-panel button:has-text('Profile ops')").first.click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.wb-status-line')].some(e => e.innerText.includes('profile done'))",
        timeout=120_000)
    assert page.locator(".wb-graph-panel input[type=checkbox]").nth(1).is_checked()  # latency overlay
    page.locator(".wb-profile-panel").first.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "03_profile.png"))
    # A benchmark: the live plot grows, the results table fills.
    page.locator(".wb-profile-panel button:has-text('Run')").first.click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.wb-status-line')].some(e => e.innerText.includes('benchmark done'))",
        timeout=180_000)
    # The status line says done only once the table is drawn (panels draw in the order the state was written).
    assert page.locator(".wb-results table tr").count() >= 3
    page.wait_for_selector(".wb-live-plot .js-plotly-plot .scatterlayer .trace", timeout=60_000)
    assert page.locator(".wb-live-plot .scatterlayer .trace").count() >= 2


def test_fusion_tour_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            # The screen a new user has: a 1280 x 1000 window with JupyterLab's file browser open.
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(60_000)
            console_errors = []
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            open_and_run(page, lab)
            if not page.locator("#filebrowser").is_visible():
                page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='filebrowser']").first.click()
            page.wait_for_selector("#filebrowser", state="visible", timeout=10_000)
            app = page.locator(".wb-app").first
            app.scroll_into_view_if_needed()
            page.wait_for_selector(".wb-graph-after .wb-gw-node", timeout=60_000)
            assert page.locator(".wb-graph-before .wb-gw-node").count() > 10
            assert page.locator(".wb-counts table tr").count() > 3
            assert "press Run" in _text(page, ".wb-live-plot")  # latency plots are made when first needed
            assert page.locator(".wb-app .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'], .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
            assert errors.count() == 0, errors.first.inner_text()
            page.locator(".wb-graph-panel").first.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "01_app_loaded.png"))
            # Before and after stand side by side in the ~900 px notebook column beside the file browser.
            page.wait_for_timeout(1500)  # the width probe reports, the panes are resized
            b = page.locator(".wb-graph-before").first.bounding_box()
            a = page.locator(".wb-graph-after").first.bounding_box()
            assert a["x"] >= b["x"] + b["width"] - 2 and abs(a["y"] - b["y"]) < 5, (b, a)
            widths = _never_wider_than_the_area(page)
            # The model bar says which engine auto chose; parity badges turn green by themselves.
            assert "auto → ORT transformers optimizer" in _text(page, ".wb-engine-note")
            page.wait_for_selector(".wb-row.wb-step-attention .wb-badge.wb-ok", timeout=120_000)
            page.locator(".wb-rows").first.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "00_fusion_panel.png"))

            _click_rings_and_zoom(page)

            before_counts = _text(page, ".wb-counts table")
            before_title = _text(page, ".wb-graph-after .wb-gw-title")
            before_points = page.locator(".wb-graph-after .wb-gw-node").count()
            assert "attention" in _text(page, ".wb-step-slider").lower()
            toggle = page.locator(".wb-row.wb-step-attention input[type=checkbox]").first
            assert toggle.is_checked()
            toggle_s = click_toggle(page, "attention")
            after_counts = _text(page, ".wb-counts table")
            after_title = _text(page, ".wb-graph-after .wb-gw-title")
            after_points = page.locator(".wb-graph-after .wb-gw-node").count()
            assert not toggle.is_checked()
            assert "wb-row-off" in (page.locator(".wb-row.wb-step-attention").first.get_attribute("class") or "")
            assert after_counts != before_counts
            assert after_title != before_title
            assert after_points != before_points, (before_points, after_points)
            page.locator(".wb-graph-panel").first.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "02_attention_off.png"))
            (SHOTS / "timings.txt").write_text(f"toggle click to updated graph and table ({MODEL}): {toggle_s:.2f} s\n"
                                               f"app widths per window width: {widths}\n"
                                               f"browser console errors: {console_errors}\n")
            # Clicking a step's name selects its snapshot, as the slider does.
            page.locator(".wb-row.wb-step-gelu button.wb-row-name").first.click()
            page.wait_for_function(
                "() => (document.querySelector('.wb-step-slider .widget-readout') || {}).textContent?.includes('gelu')",
                timeout=30_000)
            _fold_and_whole_model(page)
            _profile_and_benchmark(page)
            # No errors in the browser console during load, toggles, a profile and a benchmark.
            assert console_errors == [], console_errors
        except Exception:
            page.screenshot(path=str(SHOTS / "failure.png"))
            cells = page.locator(".jp-CodeCell")
            if cells.count() > 1:
                cells.nth(1).scroll_into_view_if_needed()
                page.screenshot(path=str(SHOTS / "failure-app-cell.png"))
                (SHOTS / "failure-app-cell.txt").write_text(cells.nth(1).inner_html()[:20000])
            raise
        finally:
            browser.close()
