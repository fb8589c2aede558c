"""BERT Fusion Workbench: see, switch and measure ONNX Runtime's BERT fusions."""

__version__ = "0.1.0"

__all__ = ["__version__"]
