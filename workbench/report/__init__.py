"""The report: :mod:`.data` runs the main job headless and gathers plain data and its summary; :mod:`.html`
renders that data as one self-contained HTML file. ``workbench report`` (``cli/report.py``) and the app's
report feature (``ui/report/``: the feature and its panel) are their two callers."""
