// The fleet events page: every event of every node in one list, with the
// counts by kind and by node, filtered by kind, node (a name, a list, or
// ~regexp, as the node view's filter) and node label. Each event links to
// its node's view around it and to the pre-event diff of its kind across
// the fleet. Event texts and names are untrusted: set as text only.
import { getJSON, formatTime } from './util.js';
import { $, el, readHash, writeHash, nodeViewLink, track, setReady, setStatus, showParamError, nodeSources } from './fleetcommon.js';

const state = { kind: '', node: '', label: '', from: '', to: '' };
const INPUTS = { kind: 'fe-kind', node: 'fe-node', label: 'fe-label', from: 'fe-from', to: 'fe-to' };
const WINDOW = 5; // seconds: the node view's window before an event
let last = null; // the last answer
let sources = new Map();

function params() {
  const p = new URLSearchParams();
  for (const k of Object.keys(state)) if (state[k]) p.set(k, state[k]);
  return p;
}

function fillForm() {
  for (const [k, id] of Object.entries(INPUTS)) if (k !== 'kind') $(id).value = state[k];
}

// fillKinds offers every kind the answer counts, keeping the one chosen.
function fillKinds(kinds) {
  const sel = $('fe-kind');
  const opts = [el('option', { value: '', textContent: 'every kind' })];
  for (const k of kinds) opts.push(el('option', { value: k.name, textContent: `${k.name || '(no kind)'} (${k.count})` }));
  if (state.kind && !kinds.some((k) => k.name === state.kind)) opts.push(el('option', { value: state.kind, textContent: `${state.kind} (0)` }));
  sel.replaceChildren(...opts);
  sel.value = state.kind;
}

function countRows(tbody, list, onPick, extra) {
  tbody.replaceChildren(...list.map((c) => {
    const tr = el('tr', { className: 'pick', title: 'show only these' },
      el('td', { className: 'mono', textContent: c.name || '(no kind)' }), el('td', { className: 'num', textContent: String(c.count) }));
    if (extra) tr.append(extra(c));
    tr.dataset.name = c.name;
    tr.addEventListener('click', () => onPick(c.name));
    return tr;
  }));
}

function render(data) {
  last = data;
  fillKinds(data.kinds);
  const nodes = data.nodes.length;
  $('fe-summary').textContent = data.total
    ? `${data.total} event${data.total === 1 ? '' : 's'} on ${nodes} node${nodes === 1 ? '' : 's'}`
    : '';
  $('fe-empty').textContent = data.message;
  $('fe-empty').hidden = !data.message;
  countRows($('fe-kinds').querySelector('tbody'), data.kinds, (k) => { state.kind = k; apply(); }, (c) => {
    const td = el('td');
    if (c.name) td.append(el('a', { href: '/fleet/prediff#' + new URLSearchParams({ kind: c.name, window: String(WINDOW) }).toString(),
      textContent: 'what grew before these', title: 'the pre-event diff of this kind across the fleet' }));
    return td;
  });
  countRows($('fe-nodes').querySelector('tbody'), data.nodes, (n) => { state.node = n; fillForm(); apply(); });
  $('fe-events').querySelector('tbody').replaceChildren(...data.events.map((e) => {
    const sev = ['emerg', 'alert', 'crit', 'err', 'warning', 'notice', 'info', 'debug'].includes(e.severity) ? e.severity : 'info';
    const links = el('td', { className: 'links' },
      el('a', { href: nodeViewLink(e.node, sources.get(e.node), e.time, WINDOW), textContent: 'node view',
        title: `${e.node}'s heatmap around the event, the ${WINDOW} s before it against the ${WINDOW} s before those` }));
    if (e.kind) {
      links.append(' · ', el('a', { href: '/fleet/prediff#' + new URLSearchParams({ kind: e.kind, window: String(WINDOW) }).toString(),
        textContent: "what grew before all " + e.kind }));
    }
    const tr = el('tr', {},
      el('td', { className: 'when', textContent: formatTime(e.time) }),
      el('td', { className: 'mono ident', textContent: e.node }),
      el('td', { className: 'mono ident', textContent: e.kind }),
      el('td', { className: 'sev-' + sev, textContent: e.severity }),
      el('td', { className: 'mono prose', textContent: e.text }),
      links);
    tr.dataset.node = e.node;
    tr.dataset.kind = e.kind;
    return tr;
  }));
  $('fe-more').hidden = !data.more;
  $('fe-more').textContent = data.more ? `The first ${data.events.length} of ${data.total} are listed: narrow the filters or the time range.` : '';
  setStatus(data.total ? `${data.total} events` : data.message);
}

async function apply() {
  writeHash(state);
  try {
    const data = await track(getJSON('/api/fleet/events', params()));
    showParamError('fe-error', INPUTS, null);
    render(data);
  } catch (e) {
    if (!showParamError('fe-error', INPUTS, e)) setStatus('/api/fleet/events: ' + e.message, true);
    else setStatus('');
  }
}

function readForm() {
  for (const [k, id] of Object.entries(INPUTS)) state[k] = $(id).value.trim();
}

async function main() {
  readHash(state);
  fillForm();
  $('fe-filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    readForm();
    apply();
  });
  $('fe-kind').addEventListener('change', () => {
    readForm();
    apply();
  });
  sources = await track(nodeSources(getJSON));
  await apply();
  setReady();
}

// For tests: the last answer and the rows shown.
window.heatscopeFleetEvents = {
  state,
  data: () => last,
  rows: () => [...$('fe-events').querySelectorAll('tbody tr')].map((tr) => ({ node: tr.dataset.node, kind: tr.dataset.kind })),
};

main();
