"""ONNX Runtime primitives: sessions (providers checked, levels explicit), inputs, parity, the machine.

The bottom layer of the package: it imports nothing from export, fusion or measurement
(``tests/test_layers.py`` checks the direction; ``docs/architecture.md`` writes it down).
"""
