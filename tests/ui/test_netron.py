"""Netron serves one private copy of one model, on 127.0.0.1, until closed (issue 6, item 10)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import onnx
import pytest

from workbench.viz.netron import NetronViewer


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def test_serves_only_the_one_model_on_localhost(tiny_export, tmp_path):
    src = tiny_export().path
    secret = src.with_suffix(".json")  # a neighbour file in the model's folder (its meta)
    assert secret.exists()
    with NetronViewer(src) as v:
        assert v.address[0] == "127.0.0.1"
        assert v.file.parent != src.parent and [p.name for p in v.dir.iterdir()] == [src.name]
        status, page = _get(v.url)
        assert status == 200 and b"<html" in page.lower()
        status, body = _get(v.url + "data/" + src.name)
        assert status == 200 and onnx.load_from_string(body).graph.node
        for bad in (f"data/{secret.name}", f"data/../{secret.name}", "data/weights", "data/%2e%2e/%2e%2e/etc/passwd",
                    f"data/{src}", "data/../../../../etc/passwd", "../../etc/passwd"):
            status, body = _get(v.url + bad)
            assert status == 404 and b"parity" not in body, bad
        # not reachable on another interface of this machine
        other = socket.gethostbyname(socket.gethostname())
        if other != "127.0.0.1":
            with pytest.raises(OSError):
                socket.create_connection((other, v.port), timeout=2).close()
        folder, url = v.dir, v.url
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=3)
    assert not folder.exists()


def test_large_models_are_served_without_weights_and_iframe_links(tiny_export):
    m = onnx.load(str(tiny_export().path))
    with NetronViewer(m, name="step", weights=False) as v:
        assert v.file.name == "step.onnx"
        served = onnx.load_from_string(_get(v.url + "data/step.onnx")[1])
        assert all(len(t.raw_data) <= 1024 for t in served.graph.initializer)
        assert sum(len(t.raw_data) for t in m.graph.initializer) > 1_000_000
        assert {t.name for t in served.graph.initializer} == {t.name for t in m.graph.initializer}
        html = v.iframe_html()
        assert "<iframe" in html and (v.url in html or f"/proxy/{v.port}/" in html)
        assert "weights left out" in html
