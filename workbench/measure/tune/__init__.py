"""Tuning: this machine's fusion plan (ablation), workloads, the as-shipped slices, the tune's rows, card and saved model.

Top stage of ``measure``: worker ← harness ← variants ← tune. May import all three; nothing in measure imports tune.
"""
