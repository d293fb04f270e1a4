// Shared by the fleet views (fleet events, the pre-event diff across the
// fleet): the state in the URL's hash, elements built from untrusted text
// (names and event texts are only ever set as text), links into the node
// view, and the page's busy/ready marks that tests wait on.
import { formatCPU, formatChange } from './legend.js';

export const $ = (id) => document.getElementById(id);

document.body.dataset.busy = '0';

// el builds an element: props are set as properties (className,
// textContent, title, href, ...), children appended (strings as text).
export function el(tag, props, ...children) {
  const e = document.createElement(tag);
  if (props) Object.assign(e, props);
  for (const c of children) e.append(c);
  return e;
}

// readHash reads the hash's parameters into state, keeping the keys
// state has.
export function readHash(state) {
  const p = new URLSearchParams(location.hash.slice(1));
  for (const k of Object.keys(state)) state[k] = p.get(k) || '';
}

// writeHash writes state's non-empty values into the hash.
export function writeHash(state) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) if (v) p.set(k, v);
  const hash = '#' + p.toString();
  if (location.hash !== hash) history.replaceState(null, '', hash);
}

// secs formats Unix seconds for a URL (to the microsecond).
export function secs(t) {
  return String(Math.round(t * 1e6) / 1e6);
}

// cpu formats CPU-seconds with their unit; signed adds a + to growth.
export const cpu = (sec) => (sec < 0 ? '−' + formatCPU(-sec) : formatCPU(sec));
export const signed = formatChange;

// nodeViewLink is the node view of node around an event at t (Unix s):
// the heatmap from a minute before to half a minute after, the window
// seconds before the event selected (A) and compared with the window
// before that (B), scaled by length, as a click on the event there does.
export function nodeViewLink(node, source, t, window) {
  const p = new URLSearchParams();
  if (source) p.set('source', source);
  p.set('node', node);
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

// Busy tracks requests under way: body's data-busy is their count and
// data-ready turns 1 after the first load, for tests to wait on.
let busy = 0;
export async function track(promise) {
  busy++;
  document.body.dataset.busy = String(busy);
  try {
    return await promise;
  } finally {
    busy--;
    document.body.dataset.busy = String(busy);
  }
}

export function setReady() {
  document.body.dataset.ready = '1';
}

export function setStatus(msg, error) {
  const s = $('status');
  s.textContent = msg;
  s.classList.toggle('error', !!error);
}

// showParamError shows an API error in the header's error line and marks
// the input of the parameter it names; inputs maps parameters to input
// ids. It returns whether the error named a parameter.
export function showParamError(box, inputs, e) {
  for (const id of Object.values(inputs)) $(id).classList.remove('invalid');
  if (!e) {
    $(box).hidden = true;
    return false;
  }
  $(box).textContent = e.message;
  $(box).hidden = false;
  if (e.param && inputs[e.param]) $(inputs[e.param]).classList.add('invalid');
  return !!e.param;
}

// nodeSources maps each node to its first source, from /api/nodes, for
// links into the node view (its source picker shows one source).
export async function nodeSources(getJSON) {
  const m = new Map();
  try {
    for (const n of await getJSON('/api/nodes')) m.set(n.name, (n.sources && n.sources[0]) || '');
  } catch {
    // links then leave the source to the node view's default
  }
  return m;
}
