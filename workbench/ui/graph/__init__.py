"""The graph panes: what they show as plain data (`views.py`), the session layer and Netron (`tools.py`), the before/after
panes (`panel.py`) and the Netron viewer (`netron_panel.py`)."""
