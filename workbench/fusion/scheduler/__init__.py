"""Where fusion work runs concurrently: the engine turn, a toggle's priority, the warm-up and the rule time limit
(``timeline_work.py``, ``rule_limit.py``), on the primitives of :mod:`workbench.concurrency`, the one module that
makes threads, locks and events (elsewhere only the benchmark worker's pipe reader, see docs/architecture.md).

The timeline (``timeline.py``), its step runner and its caches are single-threaded code; this module
decides what of it runs when:

* **The engine turn** (:func:`workbench.concurrency.engine_turn`): the engines keep process-wide state (ONNX Runtime's loggers,
  which a step's log capture reconfigures; onnxscript's rule objects), so engine steps run one at a time
  in the process; the runner takes the turn around each engine call.
* **A toggle first** (:class:`FusionScheduler`): a run the user waits for (a click, a load, a change of
  plan) cancels the warm-up and marks itself waiting; background work starts no engine step while one
  waits, so a click waits for the one step in flight at most. A run whose every snapshot is in memory
  takes no turn at all.
* **The warm-up**: every single toggle of the plan shown, computed ahead on one low-priority thread,
  one engine step per turn, the steps the user looks at first; the scheduler starts it again after
  each foreground run while it is switched on.
* **Auto's engine comparison**: both engines under the plan shown, in the background, after the warm-up.
* **A participant's rule under a time limit** (:func:`run_limited`): a rule's ``match`` and ``rewrite``
  are untrusted code in a teaching room, so a pass of a rule added at run time runs on a daemon thread
  of its own and the step waits at most :func:`rule_time_limit` seconds. After that the step fails
  (:class:`~workbench.fusion.engine_types.StepFailed`, with its reason), the runner goes on from the
  graph as it was, and the rule's thread is stopped by an exception raised in it at its next Python
  bytecode (``PyThreadState_SetAsyncExc``): a rule looping in Python stops there. A rule blocked inside
  C code (a ``time.sleep``, a socket read) cannot be stopped that way in CPython; its thread is
  abandoned, its result ignored, and the CPU or memory it holds is not reclaimed until it returns or
  the process exits. A subprocess could be killed, but would need the rule's class (defined in a
  notebook cell, not importable by a child) and a copy of the graph (hundreds of MB on bert-base).
"""

from .rule_limit import DEFAULT_RULE_TIME_LIMIT_S, RuleStopped, rule_time_limit, run_limited, set_rule_time_limit
from .timeline_work import FusionScheduler

__all__ = ["FusionScheduler", "run_limited", "rule_time_limit", "set_rule_time_limit", "DEFAULT_RULE_TIME_LIMIT_S",
           "RuleStopped"]
