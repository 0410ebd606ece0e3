// For every inline figure: its name, the rendered size of its smallest text (a text's size is that
// of its largest characters: sub- and superscripts are drawn at 70 percent), its <text> count and
// whether any glyph is drawn as a path instead of text. Of a figure's two drawings (desktop and
// phone layout) only the one shown is measured. Given a function ``skip``, the figures for which
// ``skip(svg)`` is true are left out (page.evaluate passes no function: none is left out).
skip => [...document.querySelectorAll('.attn-figure > svg')]
    .filter(svg => !(typeof skip === 'function' && skip(svg)))
    .filter(svg => getComputedStyle(svg).display !== 'none').map(svg => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const texts = [...svg.querySelectorAll('text')];
  const sizes = texts.map(t => Math.max(...[t, ...t.querySelectorAll('tspan')].map(
    e => parseFloat(getComputedStyle(e).fontSize))));
  return {name: svg.parentElement.dataset.figure, label: svg.getAttribute('aria-label') || '',
          smallest: Math.min(...sizes) * scale, texts: texts.length,
          glyphPaths: svg.querySelectorAll('[id*="DejaVu"]').length};
})
