"""The learner's feedback page: nbgrader's, except that an answer still to be marked by hand says so.

nbgrader 0.9.6 shows an unmarked written answer as "Score: 0.0 / N" (its gradebook's ``score`` is 0 when neither
an automatic nor a manual score exists), so a learner reads points they have not lost as lost. Here:

* :class:`GetGradesToMark` is nbgrader's ``GetGrades`` that also marks each grade cell ``to_be_marked`` when the
  gradebook holds neither score for it (what nbgrader itself calls ``needs_manual_grade`` before any mark), and
  puts the points still to mark in ``resources["nbgrader"]["to_be_marked"]``;
* :class:`FeedbackExporter` renders the course's ``stage5_feedback`` template (``grader/templates``), which extends
  nbgrader's ``feedback`` template and writes "to be marked by your instructor" for those cells and a total that
  counts them apart. Once an instructor enters a mark, the cell shows it as nbgrader would.

An answer left blank is not "to be marked": nbgrader scores it 0 automatically (its checksum is the release's).

Maths on the feedback page and on Formgrader's grading page is typeset by the course's vendored MathJax, inlined
(:func:`vendored_script`, ``templates/offline``): neither page asks a CDN for anything, so both work offline.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbgrader
from markupsafe import Markup
from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import GetGrades

COURSE_TEMPLATES = Path(__file__).resolve().parent / "templates"
# A Jupyter data folder whose nbconvert/templates/base/mathjax.html.j2 replaces nbconvert's CDN MathJax macro.
OFFLINE_TEMPLATES = COURSE_TEMPLATES / "offline"
# The browser scripts the book ships (scripts/vendor_assets.py pins them); the hub's course copy carries mathjax/.
VENDOR = Path(__file__).resolve().parent.parent / "assets" / "vendor"
VENDORED_SCRIPTS = ("mathjax/tex-svg-full.js",)
TEMPLATE_NAME = "stage5_feedback"
# nbgrader's own templates and the stylesheet its feedback page inlines (as GenerateFeedback sets them up)
NBGRADER_TEMPLATES = Path(nbgrader.__file__).resolve().parent / "server_extensions" / "formgrader" / "templates"
BOOTSTRAP_CSS = (Path(nbgrader.__file__).resolve().parent / "server_extensions" / "formgrader" / "static"
                 / "node_modules" / "bootstrap" / "dist" / "css")


class GetGradesToMark(GetGrades):
    """``GetGrades``, plus ``to_be_marked`` on each grade cell no one has scored (neither autograder nor hand)."""

    def _get_score(self, cell, resources) -> None:
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        cell.metadata.nbgrader["score"] = grade.score
        cell.metadata.nbgrader["points"] = grade.max_score
        cell.metadata.nbgrader["to_be_marked"] = grade.auto_score is None and grade.manual_score is None

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        resources["nbgrader"]["to_be_marked"] = sum(
            float(c.metadata.nbgrader.get("points") or 0) for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("to_be_marked"))
        return nb, resources


class FeedbackExporter(HTMLExporter):
    """The HTML exporter of the feedback step (``GenerateFeedback.exporter_class``). Its settings go under its own
    name in the course config, so they win over the ``HTMLExporter.template_name = 'feedback'`` that nbgrader's
    API (Formgrader's "generate feedback" button included) sets for every feedback run."""


def vendored_script(name: str) -> Markup:
    """The text of a vendored script, to inline in a ``<script>`` element (a Jinja filter). Only the listed files;
    one that could end the element early is refused rather than inlined. A missing copy gives no script."""
    if name not in VENDORED_SCRIPTS:
        raise ValueError(f"{name!r} is not a vendored script; known: {', '.join(VENDORED_SCRIPTS)}")
    path = VENDOR / name
    if not path.is_file():
        return Markup("")
    text = path.read_text(encoding="utf-8")
    if "<script" in text.lower() or "</script" in text.lower():
        raise ValueError(f"{path} contains a <script> tag: it cannot be inlined in a page")
    return Markup(text)


def serve_maths_offline() -> None:
    """Put :data:`OFFLINE_TEMPLATES` first on ``JUPYTER_PATH`` in this process, so every HTML page nbconvert renders
    here (nbgrader's feedback and Formgrader's ``formgrade`` templates call the ``mathjax`` macro) finds the
    course's macro before nbconvert's. nbconvert reads the path when an exporter first renders; Formgrader's
    exporter is built in the server that loaded the course's config, so the setting reaches it."""
    paths = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    if str(OFFLINE_TEMPLATES) not in paths:
        os.environ["JUPYTER_PATH"] = os.pathsep.join([str(OFFLINE_TEMPLATES), *paths])


def configure(c) -> None:
    """Point nbgrader's feedback step at :class:`FeedbackExporter` and the course's template; serve MathJax from
    the course's copy on every page nbgrader renders (feedback and Formgrader)."""
    serve_maths_offline()
    c.HTMLExporter.filters = {**c.HTMLExporter.get("filters", {}), "stage5_vendored_script": vendored_script}
    c.GenerateFeedback.exporter_class = FeedbackExporter
    c.FeedbackExporter.template_name = TEMPLATE_NAME
    c.FeedbackExporter.extra_template_basedirs = [str(COURSE_TEMPLATES), str(NBGRADER_TEMPLATES)]
    # "feedback/index.html.j2" (what the course's template extends) and bootstrap.min.css (what it inlines)
    c.FeedbackExporter.extra_template_paths = [str(NBGRADER_TEMPLATES), str(BOOTSTRAP_CSS)]


def invalid_page(assignment: str, source: str, reasons: list[str]) -> str:
    """The feedback page of a submission that could not be graded: what was handed in, why it was refused, what to
    do. Every piece of it that came from the learner (the file name, text quoted in a reason) is escaped: inert."""
    import html

    why = "".join(f"<li>{html.escape(r)}</li>" for r in reasons) or "<li>it could not be read</li>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(assignment)}: not graded</title>
<style>body {{ font-family: sans-serif; max-width: 46em; margin: 2em auto; padding: 0 1em; line-height: 1.5; }}
li {{ overflow-wrap: anywhere; }}</style></head>
<body>
<h1>{html.escape(assignment)}: your submission could not be graded</h1>
<p>The file you handed in, <code>{html.escape(source or "(no name)")}</code>, is recorded with a score of 0 because the
grader could not read it as this assignment's notebook:</p>
<ul>{why}</ul>
<p>What to do: hand in again the <code>.ipynb</code> file you worked in, as Jupyter saved it (in JupyterLab,
<em>File &rarr; Download</em>), not renamed from another format, not edited outside Jupyter and complete. Run
<em>Validate</em> on it first if your Jupyter has the button. If it still fails, send this page to your
instructor.</p>
</body></html>
"""
