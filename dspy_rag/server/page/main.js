// The page's two views share one document (its header and token field): the address picks the view shown and
// the script that runs it.

const VIEWS = { "/": "./research.js", "/history": "./history.js" };

const view = document.querySelector(`[data-view="${location.pathname}"]`);
view.hidden = false;
document.title = `dspy-rag: ${view.dataset.title}`;
document.querySelector(`nav a[href="${location.pathname}"]`).setAttribute("aria-current", "page");
import(VIEWS[location.pathname]);
