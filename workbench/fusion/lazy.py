"""Modules imported on first use, so the catalog, the chains and the rules' rows are read without them."""

from __future__ import annotations

import importlib


class LazyModule:
    """A module imported on first attribute access (``ir = LazyModule("onnx_ir")``)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


#: ``onnx_ir``, imported when a rule first runs (about 0.5 s on its own).
ir = LazyModule("onnx_ir")
