"""Checks that the notebook front-end can draw the app, with what to install if not.

A widget whose front-end package is missing or of the wrong major version
shows up as a blank output or a "model not found" error. These checks run
before the app is drawn so the user reads a sentence instead.
"""

from __future__ import annotations

from importlib import metadata
import html
import importlib
import importlib.util
import sys
import types


#: ipywidgets major → the jupyterlab_widgets (and widgetsnbextension) major it talks to.
WIDGET_PAIRS = {8: (3, 4), 7: (1, 3)}


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _major(v: str | None) -> int | None:
    try:
        return int(str(v).split(".")[0])
    except (TypeError, ValueError):
        return None


def problems(versions: dict[str, str | None] | None = None) -> list[str]:
    """What is wrong with the widget stack, one sentence each (empty: all good).

    Args:
        versions: package → version, for testing; default: what is installed.
    """
    v = versions if versions is not None else {p: _version(p) for p in
                                               ("ipywidgets", "jupyterlab_widgets", "plotly", "anywidget")}
    out = []
    ipw = _major(v.get("ipywidgets"))
    if ipw is None:
        out.append("ipywidgets is not installed: install it with `pip install \"ipywidgets>=8.1\"`")
    elif ipw not in WIDGET_PAIRS:
        out.append(f"ipywidgets {v['ipywidgets']} is not supported: install `pip install \"ipywidgets>=8.1,<9\"`")
    else:
        lab = _major(v.get("jupyterlab_widgets"))
        want = WIDGET_PAIRS[ipw][0]
        if lab is None:
            out.append(f"jupyterlab_widgets is not installed, so JupyterLab cannot draw widgets: "
                       f"install `pip install \"jupyterlab_widgets>={want},<{want + 1}\"` and restart JupyterLab")
        elif lab != want:
            out.append(f"ipywidgets {v['ipywidgets']} needs jupyterlab_widgets {want}.x but {v['jupyterlab_widgets']} "
                       f"is installed: install `pip install \"jupyterlab_widgets>={want},<{want + 1}\"` and restart JupyterLab")
    pl = _major(v.get("plotly"))
    if pl is None:
        out.append("plotly is not installed: install it with `pip install \"plotly>=6\"`")
    elif pl >= 6 and v.get("anywidget") is None:
        out.append(f"plotly {v['plotly']} draws live figures with anywidget, which is not installed: "
                   f"install it with `pip install \"anywidget>=0.9\"`")
    return out


def error_html(message: str, title: str = "BERT Fusion Workbench") -> str:
    """An inline, self-contained error box (plain HTML: needs no widget front-end)."""
    return (f"<div style='border:1px solid #d62728;border-left:5px solid #d62728;padding:8px 12px;"
            f"background:#fff5f5;font-family:sans-serif;font-size:13px'><b>{html.escape(title)}</b>: "
            f"{html.escape(message)}</div>")


def defer_slow_imports() -> None:
    """Load ``rfc3987_syntax`` on first use instead of when plotly's FigureWidget is first imported.

    plotly's widget imports nbformat, whose jsonschema imports ``rfc3987_syntax`` for its "iri"
    format check, and that package compiles its grammars at import: 1.6 of the 2.0 s the first
    ``FigureWidget`` costs (measured with ``python -X importtime``), more than half of what opening
    a model seen before may take. A stand-in module takes its place until something calls into it;
    then the real package is imported and answers, so every check behaves as before.
    """
    name = "rfc3987_syntax"
    if name in sys.modules:
        return
    try:
        if importlib.util.find_spec(name) is None:
            return
    except (ImportError, ValueError):
        return

    def real():
        if sys.modules.get(name) is stub:
            del sys.modules[name]
        return importlib.import_module(name)

    stub = types.ModuleType(name, "stand-in: the real module is imported on first use")
    def attribute(attr: str):  # PEP 562: a public attribute loads the real module
        if attr.startswith("__"):  # what the import machinery asks of any module (__path__, __file__)
            raise AttributeError(attr)
        return getattr(real(), attr)

    stub.__getattr__ = attribute
    stub.is_valid_syntax = lambda *a, **k: real().is_valid_syntax(*a, **k)
    sys.modules[name] = stub
