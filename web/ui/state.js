// The UI's state and its URL. This is the one module that holds mutable
// state, and the one that reads and writes the URL's keys: each view's
// state lives in the hash of its page (/, /#fleet, /fleet/events#,
// /fleet/prediff#), so that a link reproduces the view, and the links
// from one view into another are built here too. Besides what the URL
// holds: what the API answered that several parts of a view read, the
// requests under way (the page's busy mark), the Warning headers shown,
// and the clock times are written in. Views (views/*.js) read and change
// these objects and call write*URL; widgets (timeline.js, heatmap.js,
// flame.js, ...) keep only what they draw.

// ---- every page -------------------------------------------------------

// busy counts the requests under way: body's data-busy, which tests wait
// on, shows it.
const busy = { count: 0 };

// setBusy adds delta to the requests under way.
export function setBusy(delta) {
  busy.count += delta;
  document.body.dataset.busy = String(busy.count);
}

// track counts promise as a request under way until it settles.
export async function track(promise) {
  setBusy(1);
  try {
    return await promise;
  } finally {
    setBusy(-1);
  }
}

// inflight holds the named requests under way (util.js's request, the
// fleet overview's load): a
// newer one of a name aborts the older.
export const inflight = {};

// apiWarnings holds, per API path, the Warning headers of its last answer
// (data skipped as unreadable, a bucket that does not answer, so the data
// may be stale), for the banner that shows them (util.js).
export const apiWarnings = new Map();

// clock is how times are written: relativeOrigin, when not null, is the
// first sample's second of a source whose times are its capture's own
// clock (a perf script without a wall time), from which formatTime writes
// seconds, never a date in 1970.
export const clock = { relativeOrigin: null };

// setRelativeOrigin makes formatTime write times as seconds from origin
// (null: as dates again): the relative source's first second.
export function setRelativeOrigin(origin) {
  clock.relativeOrigin = Number.isFinite(origin) ? origin : null;
}

// secs formats Unix seconds for the API and the URL (to the microsecond).
export function secs(t) {
  return String(Math.round(t * 1e6) / 1e6);
}

// num reads a number from the URL, or null.
function num(v) {
  if (v === null || v === '') return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

function hashParams() {
  return new URLSearchParams(location.hash.slice(1));
}

// replaceHash sets the URL's hash to hash without a history entry (and
// without a hashchange).
function replaceHash(hash) {
  if (location.hash !== hash) history.replaceState(null, '', hash);
}

// ---- the node view (/) ------------------------------------------------

// NODE_FILTERS are the node view's sample filters: URL keys, API
// parameters and the filter bar's fields (f-NAME) alike.
export const NODE_FILTERS = ['node', 'comm', 'pid', 'cpu', 'container', 'pod', 'namespace', 'qos', 'frame', 'stack'];
// GROUPS are the flame graph's group-by choices.
export const GROUPS = ['', 'container', 'pod', 'namespace', 'qos', 'cgroup'];

// node is everything the node view's URL holds.
export const node = {
  source: '', from: null, to: null, rows: 50, selFrom: null, selTo: null,
  viewFrom: null, viewTo: null, // the timeline's zoomed view (null: everything)
  compare: false, bFrom: null, bTo: null, // compare mode and its baseline
  node: '', comm: '', pid: '', cpu: '', container: '', pod: '', namespace: '', qos: '', frame: '', stack: 'all',
  group: '', enhanced: false, icicle: false, search: '',
  addresses: false, // unresolved frames one per address ([gzip+0x4ce8]), not per module ([gzip])
  norm: 'total', // how the differential flame graph scales B: by 'total' CPU time or window 'length'
  growthOrder: 'total', passThrough: false, // the growth table's order, and whether it shows pass-throughs
};

// nodeData is what the node view loaded.
export const nodeData = {
  sources: [], // /api/sources: of the node picked (sourcesNode), else of all
  sourcesNode: null,
  nodes: [], // /api/nodes: the nodes whose samples the server holds
  events: [], // every event (up to the API's default limit), by time
  growth: null, // the growth table's answer, null without a baseline
  top: null, // the top functions table's answer
  topShown: 0, // how many of its rows are shown
};

// readNodeURL reads the node view's state from the URL.
export function readNodeURL() {
  const p = hashParams();
  const s = node;
  s.source = p.get('source') || '';
  s.from = num(p.get('from'));
  s.to = num(p.get('to'));
  s.viewFrom = num(p.get('vf'));
  s.viewTo = num(p.get('vt'));
  if (s.viewFrom === null || s.viewTo === null || !(s.viewTo > s.viewFrom)) s.viewFrom = s.viewTo = null;
  const rows = num(p.get('rows'));
  s.rows = rows && rows >= 1 && rows <= 1000 ? Math.round(rows) : 50;
  s.selFrom = num(p.get('sf'));
  s.selTo = num(p.get('st'));
  s.compare = p.get('cmp') === '1' && s.selFrom !== null && s.selTo !== null;
  s.bFrom = s.compare ? num(p.get('bf')) : null;
  s.bTo = s.compare ? num(p.get('bt')) : null;
  for (const f of NODE_FILTERS) s[f] = p.get(f) || '';
  if (!['all', 'kernel', 'user'].includes(s.stack)) s.stack = 'all';
  if (!['', 'guaranteed', 'burstable', 'besteffort'].includes(s.qos)) s.qos = '';
  s.group = GROUPS.includes(p.get('group')) ? p.get('group') : '';
  s.enhanced = p.get('enhanced') === '1';
  s.icicle = p.get('icicle') === '1';
  s.addresses = p.get('addr') === '1';
  s.search = p.get('search') || '';
  s.growthOrder = p.get('gorder') === 'self' ? 'self' : 'total';
  s.passThrough = p.get('passthru') === '1';
  s.norm = p.get('norm') === 'length' ? 'length' : 'total';
}

// writeNodeURL writes the node view's state into the URL.
export function writeNodeURL() {
  const s = node;
  const p = new URLSearchParams();
  if (s.source) p.set('source', s.source);
  if (s.from !== null && s.to !== null) {
    p.set('from', secs(s.from));
    p.set('to', secs(s.to));
  }
  if (s.viewFrom !== null) {
    p.set('vf', secs(s.viewFrom));
    p.set('vt', secs(s.viewTo));
  }
  p.set('rows', String(s.rows));
  if (s.selFrom !== null && s.selTo !== null) {
    p.set('sf', secs(s.selFrom));
    p.set('st', secs(s.selTo));
  }
  if (s.compare) {
    p.set('cmp', '1');
    if (hasBaseline()) {
      p.set('bf', secs(s.bFrom));
      p.set('bt', secs(s.bTo));
    }
  }
  setFilters(p, s);
  if (s.enhanced) p.set('enhanced', '1');
  if (s.icicle) p.set('icicle', '1');
  if (s.addresses) p.set('addr', '1');
  if (s.group) p.set('group', s.group);
  if (s.search) p.set('search', s.search);
  if (s.growthOrder !== 'total') p.set('gorder', s.growthOrder);
  if (s.passThrough) p.set('passthru', '1');
  if (s.norm !== 'total') p.set('norm', s.norm);
  replaceHash('#' + p.toString());
}

// activeFilters lists the filters of filters (name -> value) in force,
// as [name, value]: a stack of 'all' is none.
export function activeFilters(filters) {
  return NODE_FILTERS.filter((f) => filters[f] && !(f === 'stack' && filters[f] === 'all')).map((f) => [f, filters[f]]);
}

// setFilters sets the filters of filters in force on p.
export function setFilters(p, filters) {
  for (const [f, v] of activeFilters(filters)) p.set(f, v);
}

// filterParams are the source and filters every request of the node view
// takes.
export function filterParams() {
  const p = new URLSearchParams();
  if (node.source) p.set('source', node.source);
  setFilters(p, node);
  return p;
}

// hasBaseline says whether the node view compares with a baseline B.
export function hasBaseline() {
  return node.compare && node.bFrom !== null && node.bTo !== null && node.bTo > node.bFrom;
}

// selectedRange is the selection, or the whole span without one.
export function selectedRange() {
  if (node.selFrom !== null && node.selTo !== null) return [node.selFrom, node.selTo];
  return [node.from, node.to];
}

// nodeViewLink is the node view of node around an event at t (Unix s):
// the heatmap from a minute before to half a minute after, the window
// seconds before the event selected (A) and compared with the window
// before that (B), scaled by length, as a click on the event there does.
export function nodeViewLink(nodeName, source, t, window) {
  const p = new URLSearchParams();
  if (source) p.set('source', source);
  p.set('node', nodeName);
  p.set('from', secs(t - Math.max(60, 3 * window)));
  p.set('to', secs(t + 30));
  p.set('rows', '50');
  p.set('sf', secs(t - window));
  p.set('st', secs(t));
  p.set('cmp', '1');
  p.set('bf', secs(t - 2 * window));
  p.set('bt', secs(t - window));
  p.set('norm', 'length');
  return '/#' + p.toString();
}

// ---- the fleet overview (/#fleet) -------------------------------------

// FLEET_FILTERS are the fleet overview's node and sample filters: URL
// keys, API parameters and its form's fields (fleet-f-NAME) alike.
export const FLEET_FILTERS = ['node', 'label', 'comm', 'frame', 'container', 'namespace'];
// FLEET_SAMPLE_FILTERS are those a click into a node's view keeps.
const FLEET_SAMPLE_FILTERS = ['comm', 'frame', 'container', 'namespace'];
const FLEET_SORTS = ['peak', 'events', 'name'];
const FLEET_VALUES = ['busiest', 'total'];

// fleet is everything the fleet overview's URL holds.
export const fleet = { value: 'busiest', sort: 'peak', from: null, to: null };
for (const f of FLEET_FILTERS) fleet[f] = '';

// fleetData is what the fleet overview loaded.
export const fleetData = {
  overview: null, // the last /api/fleet/overview answer, decoded
};

// wantsFleet says whether the page to show is the fleet overview: asked
// for by the hash, or the first page of a server with several nodes.
export function wantsFleet(nodeCount) {
  const h = location.hash.slice(1);
  return h === 'fleet' || h.startsWith('fleet&') || (h === '' && nodeCount > 1);
}

// readFleetURL reads the fleet overview's state from the URL.
export function readFleetURL() {
  const p = hashParams();
  fleet.value = FLEET_VALUES.includes(p.get('value')) ? p.get('value') : 'busiest';
  fleet.sort = FLEET_SORTS.includes(p.get('sort')) ? p.get('sort') : 'peak';
  for (const f of FLEET_FILTERS) fleet[f] = p.get(f) || '';
  fleet.from = num(p.get('from'));
  fleet.to = num(p.get('to'));
}

// writeFleetURL writes the fleet overview's state into the URL, after
// "#fleet".
export function writeFleetURL() {
  const p = new URLSearchParams();
  if (fleet.value !== 'busiest') p.set('value', fleet.value);
  if (fleet.sort !== 'peak') p.set('sort', fleet.sort);
  for (const [k, v] of fleetParams()) p.set(k, v);
  const rest = p.toString();
  replaceHash('#fleet' + (rest ? '&' + rest : ''));
}

// fleetParams are the fleet overview's filters and range as API
// parameters.
export function fleetParams() {
  const p = new URLSearchParams();
  for (const f of FLEET_FILTERS) if (fleet[f]) p.set(f, fleet[f]);
  if (fleet.from !== null && fleet.to !== null) {
    p.set('from', String(fleet.from));
    p.set('to', String(fleet.to));
  }
  return p;
}

// openNodeView goes from the fleet overview to a node's view (a source of
// its, from and to in Unix s) with the overview's sample filters: a new
// hash, which the router answers.
export function openNodeView(nodeName, source, from, to) {
  const p = new URLSearchParams();
  if (source) p.set('source', source);
  p.set('from', String(from));
  p.set('to', String(to));
  p.set('node', nodeName);
  for (const f of FLEET_SAMPLE_FILTERS) if (fleet[f]) p.set(f, fleet[f]);
  location.hash = '#' + p.toString();
}

// ---- the fleet views' pages (/fleet/events, /fleet/prediff) -----------

// readHash reads the hash's parameters into state, keeping the keys
// state has ('' for those the hash lacks).
function readHash(state) {
  const p = hashParams();
  for (const k of Object.keys(state)) state[k] = p.get(k) || '';
}

// writeHash writes state's non-empty values into the hash.
function writeHash(state) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) if (v) p.set(k, v);
  replaceHash('#' + p.toString());
}

// fleetEvents is everything the fleet events page's URL holds.
export const fleetEvents = { kind: '', node: '', label: '', from: '', to: '' };

// fleetEventsData is what the fleet events page loaded.
export const fleetEventsData = {
  last: null, // the last /api/fleet/events answer
  sources: new Map(), // each node's first source, for links into its view
};

export function readFleetEventsURL() {
  readHash(fleetEvents);
}

export function writeFleetEventsURL() {
  writeHash(fleetEvents);
}

// prediff is everything the pre-event diff page's URL holds: fn and
// fnKind the function whose rows per node and event are shown; rootBottom
// '1' draws the flame graph with its root at the bottom (by default the
// root is at the top, in view however deep the stacks).
export const prediff = { kind: '', window: '5', node: '', label: '', comm: '', frame: '', stack: '', fn: '', fnKind: '', passthru: '', rootBottom: '' };

// prediffData is what the pre-event diff page loaded.
export const prediffData = {
  last: null, // /api/fleet/prediff's last answer
  focus: null, // its answer for the function clicked
  sources: new Map(), // each node's first source, for links into its view
};

export function readPrediffURL() {
  readHash(prediff);
}

export function writePrediffURL() {
  writeHash(prediff);
}

// prediffLink is the pre-event diff page of an event kind with a window
// of seconds.
export function prediffLink(kind, window) {
  return '/fleet/prediff#' + new URLSearchParams({ kind, window: String(window) }).toString();
}
