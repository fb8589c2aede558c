"""The PyTorch variants: eager (the "before" users know) and ``torch.compile`` (inductor), on the same weights."""

from __future__ import annotations

from .recipe import Build, Recipe


def _eager(ctx: Build, name: str):
    from ..results import Variant

    return Variant(name, provider=ctx.provider, kind="torch", torch_source=ctx.torch_source)


def _compiled(ctx: Build, name: str):
    from ..results import Variant

    return Variant(name, provider=ctx.provider, kind="torch", torch_source=ctx.torch_source,
                   options={"compile": True})


def _compiler() -> tuple[bool, str]:
    from ..peers import compiler_status

    return compiler_status()


TORCH = dict(engine="pytorch", kind="torch", runner="workbench.measure.runners:TorchRunner", needs=("pytorch",),
             peer=True)
RECIPES = (
    Recipe("torch", "PyTorch eager", build=_eager, standard=True, default_on=("cpu", "cuda"), **TORCH),
    Recipe("torch-compile", "torch.compile (inductor)", build=_compiled, check=_compiler, **TORCH),
)

__all__ = ["RECIPES"]
