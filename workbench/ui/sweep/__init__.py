"""A fleet sweep from the app: `feature.py` runs it, `panel.py` takes its spec and shows its table."""
