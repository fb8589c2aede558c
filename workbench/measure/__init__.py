"""Measurement: the benchmark worker and its protocol, recipes, profiles, floors, precision, ablation, sweeps.

Sits above export and fusion (it builds the variants it times) and below viz, the report, the CLI
and the app.
"""
