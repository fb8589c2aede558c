"""The timing harness, run in the parent process: start a worker, read its pipe, typed results, load, profiles.

(The floor and the precision conversions run in the worker too, so they are :mod:`workbench.measure.worker`'s.)

Stage order of ``measure``: worker ← harness ← variants ← tune (fleet uses harness and variants).
Imports the worker package only; never variants, tune or fleet.
"""
