// The fleet events page: every event of every node in one list, with the
// counts by kind and by node, filtered by kind, node (a name, a list, or
// ~regexp, as the node view's filter) and node label. Each event links to
// its node's view around it and to the pre-event diff of its kind across
// the fleet. Its state (state.js's fleetEvents) lives in the URL's hash.
// Event texts and names are untrusted: set as text only.
import { $, el, getJSON, formatTime, setReady, setStatus, showParamError, nodeSources } from '../util.js';
import {
  fleetEvents as state, fleetEventsData as loaded, readFleetEventsURL, writeFleetEventsURL, nodeViewLink, prediffLink, track,
} from '../state.js';

const INPUTS = { kind: 'fe-kind', node: 'fe-node', label: 'fe-label', from: 'fe-from', to: 'fe-to' };
const WINDOW = 5; // seconds: the node view's window before an event

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
  loaded.last = data;
  fillKinds(data.kinds);
  const nodes = data.nodes.length;
  $('fe-summary').textContent = data.total
    ? `${data.total} event${data.total === 1 ? '' : 's'} on ${nodes} node${nodes === 1 ? '' : 's'}`
    : '';
  $('fe-empty').textContent = data.message;
  $('fe-empty').hidden = !data.message;
  countRows($('fe-kinds').querySelector('tbody'), data.kinds, (k) => { state.kind = k; apply(); }, (c) => {
    const td = el('td');
    if (c.name) td.append(el('a', { href: prediffLink(c.name, WINDOW),
      textContent: 'what grew before these', title: 'the pre-event diff of this kind across the fleet' }));
    return td;
  });
  countRows($('fe-nodes').querySelector('tbody'), data.nodes, (n) => { state.node = n; fillForm(); apply(); });
  $('fe-events').querySelector('tbody').replaceChildren(...data.events.map((e) => {
    const sev = ['emerg', 'alert', 'crit', 'err', 'warning', 'notice', 'info', 'debug'].includes(e.severity) ? e.severity : 'info';
    const links = el('td', { className: 'links' },
      el('a', { href: nodeViewLink(e.node, loaded.sources.get(e.node), e.time, WINDOW), textContent: 'node view',
        title: `${e.node}'s heatmap around the event, the ${WINDOW} s before it against the ${WINDOW} s before those` }));
    if (e.kind) {
      links.append(' · ', el('a', { href: prediffLink(e.kind, WINDOW),
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
  writeFleetEventsURL();
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

// mountFleetEvents builds and loads the fleet events page (fleet-events.html),
// and sets window.heatscopeFleetEvents for tests: the last answer and
// the rows shown.
export async function mountFleetEvents() {
  window.heatscopeFleetEvents = {
    state,
    data: () => loaded.last,
    rows: () => [...$('fe-events').querySelectorAll('tbody tr')].map((tr) => ({ node: tr.dataset.node, kind: tr.dataset.kind })),
  };
  readFleetEventsURL();
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
  loaded.sources = await track(nodeSources());
  await apply();
  setReady();
}
