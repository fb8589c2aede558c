"""The benchmark worker: what runs inside the spawned process (its entry :func:`.main.worker_main`, runners, serving).

Lowest stage of ``measure``: worker ← harness ← variants ← tune (fleet uses harness and variants).
Imports nothing from harness, variants, tune or fleet.
"""
