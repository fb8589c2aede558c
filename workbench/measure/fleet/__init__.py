"""Fleet sweeps: a spec over many machines (Ray or local), its rows, and the batch x sequence x threads sweep.

Beside the top stage of ``measure``: worker ← harness ← variants ← tune, fleet using harness and variants
like tune does; nothing in worker, harness, variants or tune imports fleet, and fleet does not import tune.
"""
