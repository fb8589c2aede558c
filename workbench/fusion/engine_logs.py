"""What the engines say, as data: ORT's fusion log lines and onnxscript's matcher traces.

ONNX Runtime's transformers optimizer explains a failed match only in its
debug log, and onnxscript only through a ``MatchingTracer``; both are
collected here as plain lines for the diagnostics.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import warnings
from typing import Any

from ..concurrency import new_lock


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        try:
            msg = record.getMessage().strip()
        except Exception:
            return
        if msg:
            self.lines.append(f"{record.name}: {msg.splitlines()[0]}")


_ORT_LOGGER_PREFIXES = ("fusion_", "onnx_model", "onnxruntime.transformers", "shape_infer", "symbolic_shape")


def _no_caller(*args, **kwargs):
    # ORT's matchers log every failed parent match at DEBUG with stack_info=True; walking and
    # formatting that stack costs more than the match. Only the message's first line is kept.
    return "(unknown file)", 0, "(unknown function)", None


def _set_levels(saved: list, level_of) -> None:
    for lg, level, _ in saved:
        lg.level = level_of(lg, level)
    # ``Logger.setLevel`` clears the level cache of every logger of the process (thousands once
    # torch and transformers are loaded) on each call; set the levels, then clear it once.
    clear = getattr(logging.root.manager, "_clear_cache", None)
    if clear is not None:
        clear()
    else:  # pragma: no cover - older or newer logging without the private helper
        for lg, level, _ in saved:
            lg.setLevel(lg.level)


@contextlib.contextmanager
def capture_ort_logs():
    """Collect the ORT transformers optimizer's own debug log lines, silently."""
    handler = _Collect()
    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith(_ORT_LOGGER_PREFIXES)]
    saved = []
    for n in names:
        lg = logging.getLogger(n)
        saved.append((lg, lg.level, lg.propagate))
        lg.propagate = False
        lg.addHandler(handler)
        lg.findCaller = _no_caller
    _set_levels(saved, lambda lg, level: logging.DEBUG)
    try:
        yield handler.lines
    finally:
        for lg, level, prop in saved:
            lg.removeHandler(handler)
            lg.propagate = prop
            lg.__dict__.pop("findCaller", None)
        _set_levels(saved, lambda lg, level: level)


#: How many ``quiet_stdout`` blocks the current thread is in (each thread starts at 0).
_QUIET: contextvars.ContextVar = contextvars.ContextVar("workbench_quiet_stdout", default=0)
_INSTALL = new_lock()


class _PerThreadStdout:
    """``sys.stdout`` as it was, for every thread but one inside :func:`quiet_stdout`, whose writes go nowhere.

    ``contextlib.redirect_stdout`` swaps the process-wide ``sys.stdout``: an engine step quieted in the
    background warm-up swallowed whatever the notebook's own cell printed meanwhile.
    """

    def __init__(self, real):
        self._real = real

    def write(self, text):
        if _QUIET.get():
            return len(text)
        return self._real.write(text)

    def flush(self):
        if not _QUIET.get():
            self._real.flush()

    def __getattr__(self, name):
        return getattr(self._real, name)


@contextlib.contextmanager
def quiet_stdout():
    """Silence what the engines print, in the calling thread only (and their warnings)."""
    with _INSTALL:
        if not isinstance(sys.stdout, _PerThreadStdout):
            sys.stdout = _PerThreadStdout(sys.stdout)
    token = _QUIET.set(_QUIET.get() + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        _QUIET.reset(token)


def rules_of(func) -> Any:
    """The RewriteRule/RewriteRuleSet an ``apply_fusion_rules`` function closes over."""
    from onnxscript.rewriter._rewrite_rule import RewriteRule, RewriteRuleSet

    for cell in getattr(func, "__closure__", None) or ():
        obj = cell.cell_contents
        if isinstance(obj, (RewriteRule, RewriteRuleSet)):
            return obj
    return None


def trace_rules(model, rules) -> list[str]:
    """Why ``rules`` did not match: onnxscript's MatchingTracer best partial matches, as lines."""
    from onnxscript.rewriter._basics import MatchingTracer

    if rules is None:
        return []
    tracer = MatchingTracer()
    try:
        with quiet_stdout():
            rules.apply_to_model(model, tracer=tracer)
    except Exception as e:  # a tracer run must never break the timeline
        return [f"(tracing failed: {type(e).__name__})"]
    return _trace_lines(tracer)


def _trace_lines(tracer) -> list[str]:
    """The two best partial matches a ``MatchingTracer`` recorded, as lines."""
    from onnxscript.rewriter._basics import MatchStatus

    best = []
    for rule, matches in tracer.best_matches_map.items():
        if matches:
            best.append((matches[0].score(), rule, matches))
    best.sort(key=lambda x: -x[0])
    lines = []
    for score, rule, matches in best[:2]:
        m = matches[0]
        status = m.status
        reason = m.match_result.reason or "no reason given"
        nodes = len(m.match_result.nodes)
        where = []
        for cause in (m.match_result.failure_nodes_and_values or [])[:2]:
            nm = getattr(cause, "name", None)
            if nm:
                where.append(str(nm))
        what = "its condition check failed" if status == MatchStatus.CONDITION_FAILED else "matching stopped"
        lines.append(f"rule {getattr(rule, 'name', None) or rule!s}: matched {nodes} node(s) on {len(matches)} "
                     f"site(s), then {what}: {reason}" + (f" (at {', '.join(where)})" if where else ""))
    return lines
