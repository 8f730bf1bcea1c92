"""One line, not a traceback, when ``nbgrader validate`` cannot read a notebook.

nbgrader 0.9.6's ``ValidateApp`` logs the whole traceback of any error (49 lines for a notebook cut short by a
download) before its own "fatal error" line. :class:`OneLineValidateErrors`, a logging filter on that app's logger
(installed by the repository's ``nbgrader_config.py``), drops the traceback and says on the fatal line what was
wrong with the file and what to do. Nothing else nbgrader logs is changed.
"""

from __future__ import annotations

import logging
import re

FATAL = "nbgrader encountered a fatal error while trying to validate"
# the exception (its class's last dotted name) -> what it means for the file
CAUSES = {
    "NotJSONError": "it is not valid JSON (cut short by a download, or not a notebook)",
    "JSONDecodeError": "it is not valid JSON (cut short by a download, or not a notebook)",
    "ValidationError": "it is JSON but not a valid notebook",
    "UnicodeDecodeError": "it is not text (not a notebook)",
    "FileNotFoundError": "there is no such file",
    "IsADirectoryError": "it is a folder, not a notebook",
}


class OneLineValidateErrors(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.cause = ""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Traceback (most recent call last)"):
            last = [line.strip() for line in message.splitlines() if line.strip()]
            self.cause = last[-1] if last else ""
            return False
        if message.startswith(FATAL) and self.cause:
            name = re.match(r"[\w.]+", self.cause)
            kind = name.group(0).rsplit(".", 1)[-1] if name else ""
            why = CAUSES.get(kind, f"{kind or 'an error'} while reading it")
            where = message[len(FATAL):].strip() or "the notebook"
            record.msg, record.args = (f"cannot validate {where}: {why}. Open the file you worked in with "
                                       "Jupyter, save it, and validate that copy."), ()
            self.cause = ""
        return True


def install() -> None:
    """Add the filter to nbgrader's ValidateApp logger (once)."""
    logger = logging.getLogger("ValidateApp")
    if not any(isinstance(f, OneLineValidateErrors) for f in logger.filters):
        logger.addFilter(OneLineValidateErrors())
