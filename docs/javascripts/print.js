// Exercise and solution boxes print open in browsers without CSS ::details-content
// (docs/stylesheets/print.css does it in the others); they close again after printing.
(() => {
  let opened = [];
  window.addEventListener("beforeprint", () => {
    opened = [...document.querySelectorAll("details:not([open])")];
    opened.forEach((details) => { details.open = true; });
  });
  window.addEventListener("afterprint", () => {
    opened.forEach((details) => { details.open = false; });
    opened = [];
  });
})();
