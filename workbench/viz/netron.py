"""Netron, for full detail, on a private copy of one model.

Netron's server serves every file in the folder of the model it is given and
does not check the Host header. So :class:`NetronViewer` copies the one model
into a fresh private temporary folder (mode 0700) and serves that, on
127.0.0.1 and a free port; :meth:`NetronViewer.close` stops the server and
deletes the folder (also at interpreter exit).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import socket
import tempfile
import weakref
from pathlib import Path

import onnx

from ..errors import WorkbenchError
from ..modelio import load_model, model_bytes

HOST = "127.0.0.1"
#: Models bigger than this are served without weight data unless asked.
WEIGHTS_LIMIT = 64 * 1024 * 1024


class NetronError(WorkbenchError):
    """Netron could not be started for this model."""


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _strip_weights(model):
    """A copy of ``model`` whose large initializers keep name, type and dims but no data."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if (t.raw_data and len(t.raw_data) > 1024 or len(t.float_data) > 256
                or t.data_location == onnx.TensorProto.EXTERNAL):
            t.ClearField("raw_data")
            t.ClearField("float_data")
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
            # Netron shows the tensor's type and shape; the values are left out.
            t.doc_string = "weights left out of this view"
    return m


def _proxy_available() -> bool:
    try:
        import jupyter_server_proxy  # noqa: F401
    except ImportError:
        return False
    return True


class NetronViewer:
    """One Netron server for one model; a context manager.

    Args:
        model: an ``onnx.ModelProto`` or a path to an ``.onnx`` file.
        name: file name shown in Netron (default: the file's name, else "model.onnx").
        weights: keep weight data. Default: only when the model is under
            :data:`WEIGHTS_LIMIT` (Netron must download the whole file).
    """

    def __init__(self, model, *, name: str | None = None, weights: bool | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="workbench-netron-"))
        os.chmod(self.dir, 0o700)
        self.address: tuple[str, int] | None = None
        self.weights = True
        try:
            self.file = self._write(model, name, weights)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self._finalizer = weakref.finalize(self, _cleanup, self.dir, None)
        atexit.register(self._finalizer)

    def _write(self, model, name, weights) -> Path:
        if isinstance(model, (str, os.PathLike)):
            src = Path(model)
            name = name or src.name
            if weights is None:
                weights = src.is_file() and model_bytes(src) <= WEIGHTS_LIMIT
            model = load_model(src, full_check=False, load_external_data=bool(weights))
        name = Path(name or "model.onnx").name
        if not name.endswith(".onnx"):
            name += ".onnx"
        if weights is None:
            weights = model.ByteSize() <= WEIGHTS_LIMIT
        if not weights:
            model = _strip_weights(model)
        self.weights = bool(weights)
        out = self.dir / name
        with open(out, "wb") as f:
            f.write(model.SerializeToString())
        os.chmod(out, 0o600)
        return out

    def start(self) -> "NetronViewer":
        """Start serving on 127.0.0.1 and a free port (idempotent)."""
        if self.address:
            return self
        import netron

        port = free_port()
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # netron prints "Serving ..."
                addr = netron.start(str(self.file), address=(HOST, port), browse=False)
        except Exception as e:
            raise NetronError(f"netron could not start: {e}") from e
        self.address = (HOST, port) if not isinstance(addr, tuple) else (addr[0], int(addr[1]))
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _cleanup, self.dir, self.address)
        atexit.register(self._finalizer)
        return self

    @property
    def port(self) -> int | None:
        return self.address[1] if self.address else None

    @property
    def url(self) -> str:
        """The direct URL (works when the browser runs on this machine)."""
        if not self.address:
            raise NetronError("netron is not running")
        return f"http://{self.address[0]}:{self.address[1]}/"

    def proxy_url(self, base_url: str = "/") -> str | None:
        """The jupyter-server-proxy path, when that package is installed."""
        if not self.address or not _proxy_available():
            return None
        return f"{base_url.rstrip('/')}/proxy/{self.address[1]}/"

    def browser_url(self, base_url: str = "/") -> str:
        """The URL a notebook should embed: proxied when it can be, else direct."""
        return self.proxy_url(base_url) or self.url

    def iframe_html(self, base_url: str = "/", height: int = 600) -> str:
        url = self.browser_url(base_url)
        note = "" if self.weights else "<div style='font-size:11px;color:#666'>weights left out of this view</div>"
        return (f"<iframe src='{url}' style='width:100%;height:{height}px;border:1px solid #ccc'></iframe>{note}"
                f"<div style='font-size:11px'><a href='{url}' target='_blank'>open Netron in a new tab</a></div>")

    def close(self) -> None:
        """Stop the server and delete the private copy."""
        self._finalizer()
        self.address = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


def _cleanup(folder: Path, address) -> None:
    if address:
        try:
            import netron

            with contextlib.redirect_stdout(io.StringIO()):
                netron.stop(address)
        except Exception:  # already stopped
            pass
    shutil.rmtree(folder, ignore_errors=True)
