"""The step catalog: every graph change either engine or a workbench rule makes, one row each.

Each row says what a step matches (in words and as an op pattern), the op it
emits, what must run before it and why, what it saves, and which chains run
it. Clean-ups are steps too, so no change goes unexplained. ``steps.py``
holds the rows of the engines' own steps; a workbench rule carries its row
itself (``rule.Rule``). :data:`CATALOG` and :data:`BY_NAME` are built from
the registry (``registry.py``), in display order, and follow the rules
registered at run time (``register_rule``, ``app.add_rule``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import FusionError
from .registry import CHAINS, chain, rows, rows_by_name
from .steps import Step


class _Catalog(Sequence):
    """Every row, in display order, as the registry has them now."""

    def _rows(self) -> tuple[Step, ...]:
        return rows()

    def __getitem__(self, i):
        return self._rows()[i]

    def __len__(self) -> int:
        return len(self._rows())

    def __iter__(self):
        return iter(self._rows())

    def __repr__(self) -> str:
        return f"CATALOG({', '.join(s.name for s in self)})"


class _ByName(Mapping):
    """Step name → row, as the registry has them now."""

    def _rows(self) -> dict[str, Step]:
        return rows_by_name()

    def __getitem__(self, name: str) -> Step:
        return self._rows()[name]

    def __len__(self) -> int:
        return len(self._rows())

    def __iter__(self):
        return iter(self._rows())


CATALOG: Sequence[Step] = _Catalog()
BY_NAME: Mapping[str, Step] = _ByName()


def get_step(name: str) -> Step:
    """The catalog row for ``name``.

    Raises:
        FusionError: no such step, with the list of valid names.
    """
    try:
        return BY_NAME[name]
    except KeyError:
        raise FusionError(f"unknown fusion step {name!r}; steps are: {', '.join(BY_NAME)}") from None


def runs_under(plan, name: str) -> bool:
    """Whether step ``name`` runs under ``plan`` (a ``FusionPlan``, which alone says what is off and opted in):
    off when disabled; a step off by default only when opted in."""
    return plan.enabled(name, BY_NAME[name].default_on)


def alternatives(engine: str) -> dict[str, tuple[str, ...]]:
    """Which steps of ``engine``'s chain run another step's fused op on another kernel: step → its alternatives.

    ``{"attention": ("attention_as_mha", "attention_as_standard")}`` for both chains today, read from each
    row's ``alternative_to``, in chain order. An alternative is off by default and works on its step's output
    (that step on, the alternative opted in: ``FusionPlan.with_step(alt, True)``); a plan tries its step alone
    and with each alternative on, and keeps the fastest whose answers hold (with two on, the first in chain
    order takes every layer and the other finds nothing left). Steps without alternatives are absent.

    Raises:
        FusionError: ``engine`` is no chain.
    """
    if engine not in CHAINS:
        raise FusionError(f"no chain named {engine!r}; chains are: {', '.join(CHAINS)}")
    names = chain(engine)
    out: dict[str, tuple[str, ...]] = {}
    for name in names:
        base = BY_NAME[name].alternative_to
        if base and base in names:
            out[base] = out.get(base, ()) + (name,)
    return out


def session_optimizers_off(disabled) -> tuple[str, ...]:
    """ONNX Runtime session transformers to switch off so that ``disabled`` steps stay off in a session.

    Pass the result as ``disabled_optimizers`` when creating a session at
    level "extended" or "all": otherwise the session fuses those patterns
    again and a measurement credits the step with nothing.
    """
    names: list[str] = []
    for name in sorted(set(disabled)):
        step = BY_NAME.get(name)
        for o in step.session if step else ():
            if o not in names:
                names.append(o)
    return tuple(names)
