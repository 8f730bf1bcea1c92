"""stage5: the cost model, simulator and toy serving engine behind the course *Stage 5: Inference*.

Every number the book prints is computed here (see :mod:`stage5.figures`).
"""

__version__ = "0.1.0"
