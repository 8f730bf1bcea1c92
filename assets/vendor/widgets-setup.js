// Written for this course (not vendored). Loaded after require.js and before the widgets' embed script
// (_config.yml, nb_ipywidgets_js), on pages that hold saved widget state.
(function () {
  // The embed script sets each bundle's asset path (webpack's publicPath) from the bundle's AMD module address,
  // which require.js resolves against its base URL: point that at this folder, so the icon fonts come from
  // vendor/@jupyter-widgets/html-manager/dist/ and not from a path next to the page.
  var here = document.currentScript.src;
  require.config({ baseUrl: here.slice(0, here.lastIndexOf("/") + 1) });
  // html-manager 1.0 typesets widget labels with MathJax 2's API (MathJax.Hub.Queue), but the book loads
  // MathJax 3: give it that one call, mapped onto MathJax 3's typesetPromise. Deferred scripts (MathJax) have
  // run by DOMContentLoaded, and this listener is registered before the embed script's.
  document.addEventListener("DOMContentLoaded", function () {
    var mj = window.MathJax;
    if (mj && mj.startup && !mj.Hub) {
      mj.Hub = {
        Queue: function (job) {
          mj.startup.promise.then(function () { return mj.typesetPromise([job[2]]); });
        },
      };
    }
  });
})();
