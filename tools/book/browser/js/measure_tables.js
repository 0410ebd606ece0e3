// For every table of the page: whether it fits its column or scrolls in a box inside the page,
// whether its first column stays in view while it scrolls, and every code name in it that breaks
// across lines (an inline element that breaks has more than one box). Given a function ``skip``,
// the tables for which ``skip(table)`` is true are left out.
skip => [...document.querySelectorAll('.md-content table')]
    .filter(t => !(typeof skip === 'function' && skip(t))).map(t => {
  const column = t.closest('.md-typeset').getBoundingClientRect().right;
  const fits = t.getBoundingClientRect().right <= column + 1;
  let box = null;  // the box that scrolls it: the table itself, or the nearest ancestor that does
  for (let e = t; e && e !== document.body; e = e.parentElement) {
    const scrolling = ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
    if (scrolling && e.scrollWidth > e.clientWidth + 1) { box = e; break; }
  }
  const first = t.querySelector('tr > :first-child');
  return {
    name: [...t.querySelectorAll('th')].map(th => th.textContent.trim()).join(' | ').slice(0, 70),
    fits,
    scrolls: !!box && box.getBoundingClientRect().right <= document.documentElement.clientWidth + 1,
    sticky: !!first && getComputedStyle(first).position === 'sticky',
    broken: [...t.querySelectorAll('code')].filter(c => c.getClientRects().length > 1)
      .map(c => c.textContent),
  };
})
