// The UI's entry on every page, and its router: the page's path and the
// URL's hash choose the view. / shows the node view (views/node.js), or
// the fleet overview (views/fleet.js) when the hash asks for it (#fleet)
// or, with no hash, when the server holds several nodes; a hash change
// switches between them. /fleet/events and /fleet/prediff are pages of
// their own (views/fleetevents.js, views/prediff.js). Each view's state
// is in state.js.
import { setReady } from './util.js';
import { nodeData, wantsFleet } from './state.js';
import { mountNodeView } from './views/node.js';
import { Fleet, exposeFleet } from './views/fleet.js';
import { mountFleetEvents } from './views/fleetevents.js';
import { mountPrediff } from './views/prediff.js';

// pages are the views with a page of their own, by path.
const pages = {
  '/fleet/events': mountFleetEvents,
  '/fleet/prediff': mountPrediff,
};

// home shows / : the node view, or the fleet overview of several nodes.
async function home() {
  const nodeView = mountNodeView();
  let fleet = null; // once the nodes are known
  window.addEventListener('hashchange', () => {
    if (fleet && wantsFleet(nodeData.nodes.length)) {
      fleet.show();
      return;
    }
    if (fleet) fleet.hide();
    nodeView.reload();
  });
  if (!(await nodeView.loadSources())) return;
  await nodeView.loadNodes();
  fleet = new Fleet(nodeData.nodes);
  exposeFleet(fleet);
  try {
    await (wantsFleet(nodeData.nodes.length) ? fleet.show() : nodeView.loadAll());
  } finally {
    setReady();
  }
}

document.body.dataset.busy = '0';
(pages[location.pathname] || home)();
