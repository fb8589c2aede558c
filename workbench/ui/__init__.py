"""The notebook app: widget state and wiring over the package's functions."""
