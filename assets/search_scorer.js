// Sphinx's search scorer (html_search_scorer in _config.yml): Sphinx's own weights, plus one rule. A page whose
// title holds every word searched for ranks first: searching "roofline" finds the chapter called "The roofline"
// before the glossary's index entry (Sphinx scores an index entry 100) and the errata that mention it. Section and
// glossary hits keep Sphinx's scores. (Written by this course; Sphinx 7.4's searchtools.js calls score(result).)
var Scorer = {
  score: (result) => {
    const [, title, , descr, score] = result;
    const words = (new URLSearchParams(window.location.search).get("q") || "").toLowerCase().split(/\s+/)
      .filter((w) => w.length > 0);
    const page = String(title || "").split(" > ")[0].toLowerCase();
    const pageTitleHit = !descr && !String(title || "").includes(" > ") && words.length > 0
      && words.every((w) => page.includes(w));
    return score + (pageTitleHit ? 100 : 0);
  },
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: {0: 15, 1: 5, 2: -5},
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};
