"""Loading a model: the export and its fusion timeline (`feature.py`), which engine runs and why (`engine.py`), and the
model bar that asks for it and says how it went (`panel.py`)."""
