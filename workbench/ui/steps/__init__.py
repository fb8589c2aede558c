"""The fusion steps: their rows as plain data (`rows.py`), parity badges (`parity.py`), rules added live (`live_rules.py`),
and the panel of switches (`panel.py`)."""
