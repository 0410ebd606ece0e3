/*
 * MathJax 2.7 configuration for the book. Loaded on every page before assets/mathjax/MathJax.js
 * (both listed in mkdocs.yml; the MathJax files are served by the site, see docs/hooks/mathjax.py).
 *
 * - Chapter pages: pymdownx.arithmatex (generic mode) writes $...$ as \( \) inside
 *   span.arithmatex and $$...$$ as \[ \] inside div.arithmatex.
 * - Notebook pages (mkdocs-jupyter): math stays as $...$ / $$...$$ in rendered Markdown cells
 *   and as LaTeX in text/latex outputs.
 * - Navigation and table of contents: a heading's math arrives there as plain \( \) text.
 * Only those elements are typeset, so a dollar sign anywhere else on a page stays a dollar sign.
 * Equations are numbered only where a page writes \tag{3.1}; AMS environments (align, ...) work.
 */
window.MathJax = {
  config: ["TeX-AMS-MML_HTMLorMML-full.js"],
  skipStartupTypeset: true,
  messageStyle: "none",
  // The right-click menu stays ("Show Math As > TeX Commands"); its renderer and language
  // choices go, because the site serves one renderer and English only.
  MathMenu: { showRenderer: false, showLocale: false },
  tex2jax: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
  TeX: {
    equationNumbers: { autoNumber: "none" },
  },
  jax: ["input/TeX", "output/HTML-CSS"],
  // jupyter-server-mathjax ships only the STIX-Web web fonts (no TeX fonts, no image fonts).
  "HTML-CSS": {
    availableFonts: [],
    preferredFont: null,
    webFont: "STIX-Web",
    imageFont: null,
    linebreaks: { automatic: true },
    // One pass over all of a page's math (our longest chapter has under 300 formulas) instead of
    // chunks of 50 shown as they finish: every chunk relays out the whole page, and one pass
    // took 17% less CPU on the longest chapter at phone width (headless Chromium, 2-core VM).
    EqnChunk: 500,
    EqnChunkFactor: 1,
    EqnChunkDelay: 0,
    // MathJax tests web fonts against a blank font at url('about:blank'), which Chromium reports
    // as a failed request; a missing local font gives the same fallback without the error.
    styles: { "@font-face": { "font-family": "MathJax_Blank", src: "local('MathJax_Blank')" } },
  },
  "fast-preview": { disabled: true },
  // Typeset the math of this page, then mark <html data-math="typeset"> (tests and the README
  // screenshot wait for it).
  AuthorInit: function () {
    MathJax.Hub.Register.StartupHook("End", function () {
      var math = Array.prototype.slice.call(document.querySelectorAll(
        ".arithmatex, .jupyter-wrapper .jp-RenderedMarkdown, .jupyter-wrapper .jp-RenderedLatex"
      ));
      // A heading with math appears again, as plain text, in the navigation and the table of
      // contents: typeset those entries too.
      document.querySelectorAll(".md-nav__link .md-ellipsis").forEach(function (entry) {
        if (entry.textContent.indexOf("\\(") !== -1) math.push(entry);
      });
      var done = function () {
        document.documentElement.setAttribute("data-math", "typeset");
      };
      // Never call Typeset with no elements: MathJax would then scan the whole page for $.
      // Pass the callback explicitly, so that MathJax cannot mistake the array for one.
      if (math.length) {
        MathJax.Hub.Queue(["Typeset", MathJax.Hub, math, done]);
      } else {
        done();
      }
    });
  },
};
