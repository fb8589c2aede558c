"""Measurement, one package per stage, imports running one way: worker ← harness ← variants ← tune (fleet beside tune).

- :mod:`.worker`: what runs inside the spawned benchmark process (runners, timed rounds, serving, floors).
- :mod:`.harness`: the parent's side: start a worker, read its pipe, typed results, load, profiles.
- :mod:`.variants`: the variant registry (one Recipe per variant) and the models its recipes build.
- :mod:`.tune`: this machine's plan (ablation), workloads, the as-shipped slices, the tune's rows, card, save.
- :mod:`.fleet`: fleet sweeps over machines, and the batch x sequence x threads sweep.

Sits above export and fusion (it builds the variants it times) and below viz, the report, the CLI
and the app. ``tests/test_layers.py`` checks the order.
"""
