// Everything the snapshot checks of book.browser.checks need, read from the DOM in one call.
// Called with the page's measuring functions (measure_figures.js and measure_tables.js), whose
// results it returns as `figures` and `tables`.
(measureFigures, measureTables) => {
  const RENDERED = ".katex";
  // The whole-book page lays out only the chapters near the view (content-visibility in
  // print.css); measuring an element of another would lay it out, which costs seconds. Those
  // chapters are measured on their own pages; here they are counted, in `unmeasured`.
  let unmeasured = 0;
  const skipped = el => {
    const off = !!el.closest(".attn-print-section") &&
      !el.checkVisibility({contentVisibilityAuto: true});
    unmeasured += off;
    return off;
  };
  // Text a reader reads as prose: not code, not KaTeX's output (its MathML copy holds the TeX).
  const NOT_PROSE = "script, style, template, noscript, pre, code, kbd, samp, textarea, " +
    ".katex, .md-search";
  const short = s => s.replace(/\s+/g, " ").trim().slice(0, 70);
  const around = (s, i) => short(s.slice(Math.max(0, i - 25), i + 35));

  const rawMath = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || el.closest(NOT_PROSE)) continue;
    const text = node.nodeValue;
    // Display delimiters and \( \) anywhere; single dollars only in notebook Markdown, where
    // $...$ is the inline math syntax (elsewhere a dollar sign is just a dollar sign).
    let found = /\$\$|\\\(|\\\[/.exec(text);
    if (!found && el.closest(".jp-RenderedMarkdown, .jp-RenderedLatex")) {
      found = /(?<![\\$])\$[^\s$][^$]*\$/.exec(text);
    }
    if (found) rawMath.push(around(text, found.index));
  }

  const arithmatex = [...document.querySelectorAll(".arithmatex")];
  const mathml = document.querySelector(".katex-mathml");
  const math = {
    elements: arithmatex.length,
    rendered: document.querySelectorAll(RENDERED).length,
    untypeset: arithmatex.filter(el => !el.querySelector(RENDERED))
      .map(el => short(el.textContent)),
    // KaTeX's stylesheet hides the MathML copy of each formula (kept for screen readers).
    styled: !mathml || getComputedStyle(mathml).position === "absolute",
    // TeX that KaTeX could not parse, rendered as its source in red.
    errors: [...document.querySelectorAll(".katex-error")].map(el => short(el.textContent)),
  };

  // Display equations: wider than their box, or an equation number outside the box or over the
  // equation.
  const equations = [];
  for (const box of document.querySelectorAll(".md-content div.arithmatex")) {
    if (skipped(box)) continue;
    const tex = short((box.querySelector("annotation") || box).textContent);
    const outer = box.getBoundingClientRect();
    if (box.scrollWidth > box.clientWidth + 1) {
      equations.push(`${tex}: ${box.scrollWidth}px wide in a ${box.clientWidth}px box`);
    }
    const tag = box.querySelector(".katex-tag");
    if (!tag) continue;
    const number = tag.getBoundingClientRect();
    if (!number.width || number.left < outer.left - 1 || number.right > outer.right + 1) {
      equations.push(`${tex}: its number ${short(tag.textContent)} is not inside the box`);
    }
    const covered = [...box.querySelectorAll(".katex-html > .katex-base")].some(part => {
      const r = part.getBoundingClientRect();
      return r.width && r.right > number.left + 1 && r.left < number.right - 1 &&
        r.bottom > number.top + 1 && r.top < number.bottom - 1;
    });
    if (covered) equations.push(`${tex}: its number ${short(tag.textContent)} covers the equation`);
  }

  // Code and output blocks: Material's (pre > code; output blocks have the class "output") and
  // a notebook's (input cells with mkdocs-jupyter's <clipboard-copy>, and output areas).
  const COPY = "[data-clipboard-target], [data-clipboard-text], .md-clipboard, " +
    "[data-md-type=copy], clipboard-copy";
  const block = (box, output, text) =>
    ({output, buttons: box.querySelectorAll(COPY).length, text: short(text.textContent)});
  const blocks = [...document.querySelectorAll(".md-content pre > code")]
    .filter(code => !code.closest(".jupyter-wrapper"))
    .map(code => block(
      code.closest(".highlight") || code.parentElement, !!code.closest(".output"), code))
    .concat([...document.querySelectorAll(".jupyter-wrapper .jp-CodeCell .jp-InputArea-editor")]
      .map(cell => block(cell, false, cell.querySelector("pre") || cell)))
    .concat([...document.querySelectorAll(".jupyter-wrapper .jp-OutputArea-output")]
      .map(out => block(out, true, out)));

  const images = [...document.querySelectorAll("img")].map(img => ({
    src: (img.getAttribute("src") || "").slice(0, 80),
    alt: img.getAttribute("alt"),
    broken: img.complete && img.naturalWidth === 0,
  }));

  // Horizontal overflow: the outermost elements that stick out on the right, unless a box that
  // scrolls or clips them (a wide code block, a wide equation) keeps them inside the page.
  const root = document.documentElement;
  const width = root.clientWidth;
  const wide = [];
  if (root.scrollWidth > width + 1) {
    const sticksOut = el => el.getBoundingClientRect().right > width + 1;
    const contained = el => {
      for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== "visible" && !sticksOut(p)) return true;
      }
      return false;
    };
    for (const el of document.body.querySelectorAll("*")) {
      const box = el.getBoundingClientRect();
      if (box.width === 0 || !sticksOut(el)) continue;
      if (el.parentElement !== document.body && sticksOut(el.parentElement)) continue;
      if (contained(el)) continue;
      const name = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
        [...el.classList].slice(0, 3).map(c => "." + c).join("");
      wide.push(`${name} reaches ${Math.round(box.right)}px`);
      if (wide.length === 5) break;
    }
  }

  const ids = [...document.querySelectorAll("[id]")].map(el => el.id)
    .concat([...document.querySelectorAll("a[name]")].map(a => a.name));

  return {
    headings: [...document.querySelectorAll(".md-content h1, .md-content h2, .md-content h3")]
      .map(h => short(h.textContent)),
    rawMath, math, equations, blocks, images, ids,
    // Whether the theme's scripts mount the content (copy buttons): all pages but the print page
    mounted: !!document.querySelector("[data-md-component=content]"),
    tables: measureTables(skipped), figures: measureFigures(skipped), unmeasured,
    links: [...new Set([...document.querySelectorAll("a[href]")].map(a => a.href))],
    overflow: {scrollWidth: root.scrollWidth, clientWidth: width, wide},
  };
}
