"""Measuring in the app: the benchmark, GPU column and operator profile (`feature.py`), ablation and tune (`tuning.py`), and
the profile panel that shows them (`panel.py`)."""
