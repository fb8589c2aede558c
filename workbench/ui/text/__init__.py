"""Answers on real sentences: `feature.py` checks them per step and for int8 / fp16, `panel.py` takes the sentences and shows them."""
