// Resolves to "loaded" once the page's fonts have loaded (KaTeX's fonts draw the math, which the
// build has already typeset), or to a line saying they had not after `timeout` ms.
timeout => Promise.race([
  document.fonts.ready.then(() => "loaded"),
  new Promise(resolve => setTimeout(
    () => resolve(`timeout: fonts still loading after ${timeout} ms`), timeout)),
])
