"""The course's nbgrader configuration, in one place, plus two small preprocessors it needs.

``make_config(work_dir)`` returns the traitlets ``Config`` used by ``grader/grade.py``, the tests and (through
the repository-root ``nbgrader_config.py``) the ``nbgrader`` command line:

* source notebooks in ``solutions/<assignment>/``, the release in ``exercises/<assignment>/`` (committed);
* collect from the exchange (Formgrader on a hub) by the hub's identity rules (``exchange_collect.py``);
* submitted, autograded and feedback folders, the sqlite gradebook and the exchange under ``work_dir``
  (``grader/`` by default; git-ignored);
* each kernel in a sandbox with a CPU-time budget per cell, restored test cells, outputs capped in size, and
  feedback that shows neither hidden tests nor the tracebacks of test cells;
* feedback that says "to be marked by your instructor" on answers no one has marked yet (``feedback_page.py``);
* feedback that is inert: learner outputs and markdown pass nbconvert's bleach sanitizer (no script, event
  attribute, ``javascript:`` URL, iframe, object, embed or SVG; JavaScript outputs dropped), and long lines wrap.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from exchange_collect import OwnerCheckedCollect
from feedback_page import GetGradesToMark
from feedback_page import configure as configure_feedback_page
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors import (
    ClearMetadataPreprocessor,
    CSSHTMLHeaderPreprocessor,
    Preprocessor,
)
from nbconvert.preprocessors.sanitize import (  # bleach's tags, as nbconvert uses them
    ALLOWED_ATTRIBUTES,
    ALLOWED_TAGS,
    SanitizeHTML,
)
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearOutput,
    DeduplicateIds,
    IgnorePattern,
    LimitOutput,
    OverwriteKernelspec,
    SaveAutoGrades,
)
from restore_hidden import RestoreHiddenTests
from sandboxed_execute import SandboxedExecute
from traitlets import Integer
from traitlets.config import Config

# nbgrader runs the `alembic` command when it creates a gradebook; find it next to this Python even when the
# virtual environment is not activated (make grade, pytest).
if shutil.which("alembic") is None:
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

REPO = Path(__file__).resolve().parent.parent
COURSE_ID = "stage5-inference"
SOURCE_DIR = "solutions"
RELEASE_DIR = "exercises"
# CPU seconds one cell may use before it is interrupted (an infinite loop then costs this much, once per cell).
# CPU time, not wall-clock: a busy machine gives a cell the same budget as a quiet one.
CELL_TIMEOUT_S = int(os.environ.get("STAGE5_CELL_TIMEOUT", "10"))
WALL_PER_CPU = 10  # wall-clock limit per cell = this x the CPU limit: only for a cell that waits without computing
MAX_OUTPUT_CHARS = 20_000  # per output, after execution; a learner printing megabytes keeps the first part
# On a JupyterHub the exchange is a folder every account shares (hub/local_hub.py sets this); on one machine it
# defaults to <work_dir>/exchange.
EXCHANGE_ENV = "STAGE5_EXCHANGE"


def _is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


class StripTestTracebacks(Preprocessor):
    """Replace the traceback of an error in a test cell by its last line (``AssertionError: message``).

    An IPython traceback quotes the source lines around the failure, which in a hidden test would show the
    hidden code; the message our checks raise is written to be safe to show.
    """

    enabled = True

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and _is_test_cell(cell):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


class TruncateOutput(Preprocessor):
    """Cap every text output at ``max_chars`` characters (LimitOutput counts lines, not characters)."""

    enabled = True
    max_chars = Integer(MAX_OUTPUT_CHARS).tag(config=True)

    def _cut(self, text):
        if isinstance(text, list):
            text = "".join(text)
        if len(text) > self.max_chars:
            return text[: self.max_chars] + f"\n... output truncated ({len(text):,} characters) ...\n"
        return text

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                out["text"] = self._cut(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                data = out.get("data", {})
                for mime in list(data):
                    if mime.startswith("text/") or mime == "application/json":
                        data[mime] = self._cut(data[mime]) if isinstance(data[mime], (str, list)) else data[mime]
                    elif isinstance(data[mime], str) and len(data[mime]) > 50 * self.max_chars:
                        data.pop(mime)  # a multi-megabyte image or blob: drop it
            elif out.get("output_type") == "error":
                out["evalue"] = self._cut(out.get("evalue", ""))
        return cell, resources


# What a learner's HTML output may keep in feedback: bleach's defaults plus plain text structure and tables (a
# DataFrame's display). No image: a remote one would tell the learner when and where the instructor opened it.
FEEDBACK_TAGS = sorted(set(ALLOWED_TAGS) | {"p", "div", "span", "pre", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6",
                                            "sub", "sup", "table", "thead", "tbody", "tr", "th", "td", "caption"})
# bleach's attributes (a: href and title, ...) plus classes for layout and ids on headings for their anchors
FEEDBACK_ATTRIBUTES = {**ALLOWED_ATTRIBUTES, "*": ["class"], **{f"h{i}": ["id"] for i in range(1, 7)}}
_SANITIZER = SanitizeHTML(tags=FEEDBACK_TAGS, attributes=FEEDBACK_ATTRIBUTES, strip=True)
# Long lines (a hint, a traceback's last line, a wide print) wrap instead of running off the right edge.
WRAP_CSS = """
pre, div.output_area pre, div.output_text pre { white-space: pre-wrap; overflow-wrap: anywhere; }
div.output_subarea, div.text_cell_render { overflow-x: visible; max-width: 100%; }
"""


def inert_markdown2html(source: str) -> str:
    """Markdown rendered as nbconvert renders it, then cleaned by bleach with the feedback's tags and bleach's
    attributes and URL schemes (http, https, mailto). nbgrader's feedback template renders markdown cells without
    nbconvert's ``clean_html``, so a learner's ``[x](javascript:...)`` or ``<img onerror=...>`` would stay live."""
    return _SANITIZER.sanitize_html_tags(markdown2html_mistune(source))


class WrapLongLines(Preprocessor):
    """Add :data:`WRAP_CSS` to the styles the feedback page inlines (after CSSHTMLHeaderPreprocessor's)."""

    enabled = True

    def preprocess(self, nb, resources):
        resources.setdefault("inlining", {}).setdefault("css", []).append(WRAP_CSS)
        return nb, resources


def make_config(work_dir: str | Path | None = None, root: str | Path = REPO,
                cell_timeout_s: int = CELL_TIMEOUT_S) -> Config:
    """nbgrader settings for the course, with the working state (submissions, gradebook) under ``work_dir``."""
    root = Path(root).resolve()
    work = Path(work_dir).resolve() if work_dir else root / "grader"
    c = Config()
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.source_directory = SOURCE_DIR
    c.CourseDirectory.release_directory = RELEASE_DIR
    c.CourseDirectory.submitted_directory = str(work / "submitted")
    c.CourseDirectory.autograded_directory = str(work / "autograded")
    c.CourseDirectory.feedback_directory = str(work / "feedback")
    c.CourseDirectory.db_url = f"sqlite:///{work / 'gradebook.db'}"
    c.Exchange.root = os.environ.get(EXCHANGE_ENV) or str(work / "exchange")
    # Formgrader's collect: each folder's owner must be the learner it names, and only plain files are copied
    c.ExchangeFactory.collect = OwnerCheckedCollect
    c.SandboxedExecute.cell_cpu_s = cell_timeout_s  # the kernel runs in a sandbox (grader/sandboxed_execute.py)
    c.Execute.timeout = WALL_PER_CPU * cell_timeout_s
    c.Execute.interrupt_on_timeout = True
    c.OverwriteCells.add_missing_cells = True
    # nbgrader's sanitize chain, with test cells' hidden tests restored without a false "has changed!" warning
    c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, RestoreHiddenTests,
                                          CheckCellMetadata]
    c.LimitOutput.max_lines = 200
    c.LimitOutput.max_traceback = 40
    # nbgrader's default chain with outputs capped in size right after execution (the instructor still sees
    # full tracebacks in the autograded notebook; only the learner's feedback strips them)
    c.Autograde.autograde_preprocessors = [SandboxedExecute, LimitOutput, TruncateOutput, IgnorePattern,
                                           ClearMetadataPreprocessor, SaveAutoGrades, AssignLatePenalties,
                                           CheckCellMetadata]
    c.GenerateFeedback.preprocessors = [GetGradesToMark, ClearHiddenTests, StripTestTracebacks, TruncateOutput,
                                        SanitizeHTML, CSSHTMLHeaderPreprocessor, WrapLongLines]
    c.SanitizeHTML.enabled = True  # nbconvert preprocessors are off unless enabled
    c.SanitizeHTML.tags = FEEDBACK_TAGS
    c.SanitizeHTML.attributes = FEEDBACK_ATTRIBUTES
    c.SanitizeHTML.strip = True  # unsafe markup removed, not shown as text
    c.HTMLExporter.sanitize_html = True  # nbconvert's templates also clean outputs and omit JavaScript ones
    c.HTMLExporter.filters = {"markdown2html": inert_markdown2html}  # every markdown cell, whatever the template
    c.ClearHiddenTests.enforce_metadata = True
    configure_feedback_page(c)  # an answer not yet marked by hand reads "to be marked", not "Score: 0.0"
    return c

