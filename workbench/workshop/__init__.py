"""The workshop: exercises whose premises are checked on today's exports, and a room prepared in one command.

``exercises`` computes each exercise of ``notebooks/03_workshop_exercises.ipynb`` (the answer, the reason
from the tool's own data, and whether the exercise's premise holds on this export), so the notebook and
``tests/test_workshop.py`` run the same code. ``prepare`` builds everything the notebooks need into one
cache folder that is copied to participants' laptops (``workbench prepare``).
"""
