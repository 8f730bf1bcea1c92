"""The feedback page on a written answer no one has marked yet: "to be marked by your instructor", never
"Score: 0.0 / N"; its total counts those points apart; once an instructor marks the answer, the mark shows.

Two ex01 fixtures are graded (tests/submissions/ex01): ada answers the written question C1, blank leaves it as
released (nbgrader scores a blank answer 0 by itself, so it is not "to be marked").
"""

from __future__ import annotations

import html
import re

import pytest
from grading_harness import grade_classes  # first: it puts grader/ on the path
from nbconvert.exporters import HTMLExporter
from nbgrader.api import Gradebook
from nbgrader.preprocessors import GetGrades
from traitlets.config import Config

ADA, BLANK = "ada_lovelace_123", "blank"
PENDING = "To be marked by your instructor (2.0 points)"


def _page(course, student: str) -> str:
    return course._feedback_path(student, "ex01").read_text()


def _heading(page: str, grade_id: str) -> str:
    """The text of the panel heading of the cell ``grade_id`` (its score line)."""
    m = re.search(rf'<a name="{grade_id}"></a>\s*<div class="panel-heading">(.*?)</div>', page, re.S)
    assert m, f"no panel for {grade_id}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", m.group(1))).split())


def _title(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", re.search(r"<h4>(.*?)</h4>", page, re.S).group(1))).split())


def _toc(page: str, grade_id: str) -> str:
    m = re.search(rf'<li><a href="#{grade_id}">(.*?)</li>', page, re.S)
    assert m, f"no contents line for {grade_id}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", m.group(1))).split())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("marks")
    course, results = grade_classes(root, {"ex01": "ex01"},
                                    only={"ex01": ["ada lovelace_123_ex01.ipynb", "blank_ex01.ipynb"]})
    pages = {s: _page(course, s) for s in (ADA, BLANK)}
    return course, results, pages


def test_an_unmarked_written_answer_is_to_be_marked_not_zero(graded):
    course, results, pages = graded
    assert results[("ex01", ADA)].score == 20  # every autograded point; C1 is not marked yet
    heading = _heading(pages[ADA], "c1_written")
    assert PENDING in heading and "Score" not in heading, heading
    assert _toc(pages[ADA], "c1_written") == "Written response (to be marked by your instructor, 2.0 points)"
    assert "Score: 0.0 / 2.0" not in html.unescape(re.sub(r"<[^>]+>", " ", pages[ADA]))
    assert _title(pages[ADA]) == ("ex01 (Score: 20.0 / 20.0 marked so far; 2.0 more points to be marked by your "
                                  "instructor)")


def test_autograded_cells_keep_their_scores(graded):
    _, _, pages = graded
    assert _heading(pages[ADA], "a2_ridge").endswith("Score: 1.0 / 1.0 (Top)"), _heading(pages[ADA], "a2_ridge")
    assert _heading(pages[BLANK], "a2_ridge").endswith("Score: 0.0 / 1.0 (Top)"), _heading(pages[BLANK], "a2_ridge")
    assert _toc(pages[ADA], "a2_ridge") == "Test cell (Score: 1.0 / 1.0)"


def test_a_blank_written_answer_is_scored_zero_as_nbgrader_scores_it(graded):
    _, _, pages = graded
    heading = _heading(pages[BLANK], "c1_written")
    assert heading.endswith("Score: 0.0 / 2.0 (Top)") and "to be marked" not in heading.lower(), heading
    assert _title(pages[BLANK]) == "ex01 (Score: 0.0 / 22.0)"


def test_a_blank_hand_in_gets_one_verdict_everywhere(graded):
    """make grade's line, summary.csv and the feedback page say the same thing of a blank hand-in: 0 of 22, the
    written answer scored 0 (as nbgrader and Formgrader score it), nothing left to mark by hand."""
    import csv

    course, results, pages = graded
    r = results[("ex01", BLANK)]
    assert (r.score, r.out_of, r.manual_pending) == (0, 22, 0), r.line()
    assert " 0.0 / 22  ok" in r.line() and "to mark by hand" not in r.line(), r.line()
    with (course.work / "summary.csv").open(newline="") as fh:
        row = next(row for row in csv.DictReader(fh) if row["student"] == BLANK)
    assert (row["score"], row["manual_pending"]) == ("0", "0"), row
    assert "c1_written: answer left as released" in row["reasons"], row
    assert _title(pages[BLANK]) == "ex01 (Score: 0.0 / 22.0)"
    # ada's written answer is still to be marked, and all three say that too
    ada = results[("ex01", ADA)]
    assert ada.manual_pending == 2 and "(+2 to mark by hand)" in ada.line()
    assert "2.0 more points to be marked" in _title(pages[ADA])


@pytest.fixture(scope="module")
def marked(graded):
    """The instructor marks ada's C1 (1.5 of 2) as Formgrader would, then feedback is generated again: with the
    course's page, and with nbgrader's own (its GetGrades and 'feedback' template) for comparison."""
    course, results, _ = graded
    with Gradebook(course.db_url) as gb:
        grade = gb.find_grade("c1_written", "ex01", "ex01", ADA)
        grade.manual_score = 1.5
        gb.db.commit()
    course.feedback([results[("ex01", ADA)]])
    ours = _page(course, ADA)
    stock = Config()
    stock.GenerateFeedback.exporter_class = HTMLExporter
    stock.GenerateFeedback.preprocessors = [GetGrades if p.__name__ == "GetGradesToMark" else p
                                            for p in course.config.GenerateFeedback.preprocessors]
    stock_course = type(course)(course.work, config=stock)
    out = stock_course.api().generate_feedback("ex01", ADA, force=True)
    assert out["success"], out.get("error")
    nbgraders = _page(stock_course, ADA)
    return ours, nbgraders


def test_a_mark_given_by_hand_shows(marked):
    ours, _ = marked
    heading = _heading(ours, "c1_written")
    assert heading.endswith("Score: 1.5 / 2.0 (Top)") and "to be marked" not in ours.lower(), heading
    assert _title(ours) == "ex01 (Score: 21.5 / 22.0)"


def test_with_nothing_to_mark_the_page_is_nbgraders(marked):
    """The course's template changes only what is to be marked: with every answer marked it renders nbgrader's
    page byte for byte (so it follows nbgrader's template, sanitizing filters included)."""
    ours, nbgraders = marked
    assert ours == nbgraders


def test_the_course_config_names_its_exporter():
    """nbgrader's API sets HTMLExporter.template_name = 'feedback' for every feedback run (Formgrader's button
    too); the course's settings are under FeedbackExporter, which wins over them."""
    from feedback_page import FeedbackExporter  # grader/ is on the path once grading_harness is imported
    from nbgrader_setup import make_config

    c = make_config("/tmp/unused")
    c.HTMLExporter.template_name = "feedback"
    exporter = FeedbackExporter(config=c)
    assert exporter.template_name == "stage5_feedback"
    assert exporter.sanitize_html and "markdown2html" in exporter.filters
