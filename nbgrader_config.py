# nbgrader reads this file when run from the repository root (e.g. `nbgrader generate_assignment ex01`).
# The settings live in grader/nbgrader_setup.py, shared with grader/grade.py and the tests.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "grader"))
from nbgrader_setup import make_config  # noqa: E402

c = get_config()  # noqa: F821
c.merge(make_config())

import cli_messages  # noqa: E402

cli_messages.install()  # `nbgrader validate` on an unreadable file: one line saying why, not a traceback
