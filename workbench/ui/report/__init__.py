"""The app's report: everything on screen as one HTML file (`feature.py`, through `workbench.report`) and its button (`panel.py`)."""
