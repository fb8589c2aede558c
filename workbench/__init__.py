"""BERT Fusion Workbench: see, switch and measure ONNX Runtime's BERT fusions.

``from workbench import Workbench`` gives the notebook app; ``%load_ext
workbench`` registers the ``%workbench MODEL`` line magic. Both are imported
lazily so the CLI and the compute modules never pull in widget libraries.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "Workbench", "load_ipython_extension"]


def __getattr__(name):
    if name == "Workbench":
        from .ui.app import Workbench  # lazy: `import workbench` (the command line) loads no widget

        return Workbench
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def load_ipython_extension(ipython):
    """``%load_ext workbench``: register the ``%workbench`` line magic."""
    from .ui.magic import register_magic  # lazy: magic.py imports this module at its load

    register_magic(ipython)
