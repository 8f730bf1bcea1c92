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
"""

from __future__ import annotations

from pathlib import Path

import nbgrader
from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import GetGrades

COURSE_TEMPLATES = Path(__file__).resolve().parent / "templates"
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


def configure(c) -> None:
    """Point nbgrader's feedback step at :class:`FeedbackExporter` and the course's template."""
    c.GenerateFeedback.exporter_class = FeedbackExporter
    c.FeedbackExporter.template_name = TEMPLATE_NAME
    c.FeedbackExporter.extra_template_basedirs = [str(COURSE_TEMPLATES), str(NBGRADER_TEMPLATES)]
    # "feedback/index.html.j2" (what the course's template extends) and bootstrap.min.css (what it inlines)
    c.FeedbackExporter.extra_template_paths = [str(NBGRADER_TEMPLATES), str(BOOTSTRAP_CSS)]
