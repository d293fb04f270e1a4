// The pre-event diff across the fleet: an event kind and a window length;
// for every such event on every selected node, the window before it (A)
// against the window of the same length before that (B), summed over the
// events, as one differential flame graph and a table of the functions
// that grew, each saying before how many of the events it grew. A row's
// click shows that function per node and per event, and each event links
// to its node's view with the two windows selected. Every figure is CPU
// time. Its state (state.js's prediff) lives in the URL's hash. Names and
// event texts are untrusted: set as text only.
import { $, el, getJSON, formatTime, pct, setReady, setStatus, showParamError, nodeSources } from '../util.js';
import { FlameGraph, fetchTree, kindName } from '../flame.js';
import { formatSignedCPU as cpu, formatChange as signed } from '../legend.js';
import { prediff as state, prediffData as loaded, readPrediffURL, writePrediffURL, nodeViewLink, track } from '../state.js';

const FILTERS = { node: 'pd-node', label: 'pd-label', comm: 'pd-comm', frame: 'pd-frame' };
const INPUTS = { kind: 'pd-kind', window: 'pd-window', ...FILTERS, stack: 'pd-stack' };
const ROWS = 100; // rows of the functions table

// mountPrediff builds and loads the pre-event diff page
// (fleet-prediff.html), and sets window.heatscopeFleetDiff for tests.
export async function mountPrediff() {
  const flame = new FlameGraph($('pd-flame'), $('pd-flame-names'), () => showMatch());

  function showMatch() {
    const m = flame.matched();
    $('pd-match').textContent = flame.search ? `${cpu(m / 1e9)} of A's CPU time through matches (${pct(m, flame.total())})` : '';
  }

  function params(withFocus) {
    const p = new URLSearchParams();
    p.set('kind', state.kind);
    p.set('window', state.window);
    for (const k of Object.keys(FILTERS)) if (state[k]) p.set(k, state[k]);
    if (state.stack && state.stack !== 'all') p.set('stack', state.stack);
    if (withFocus && state.fn) {
      p.set('function', state.fn);
      p.set('functionKind', state.fnKind);
    }
    return p;
  }

  function fillForm() {
    $('pd-window').value = state.window || '5';
    for (const [k, id] of Object.entries(FILTERS)) $(id).value = state[k];
    $('pd-stack').value = state.stack || 'all';
  }

  function readForm() {
    state.kind = $('pd-kind').value;
    state.window = $('pd-window').value.trim();
    for (const [k, id] of Object.entries(FILTERS)) state[k] = $(id).value.trim();
    state.stack = $('pd-stack').value === 'all' ? '' : $('pd-stack').value;
  }

  // loadKinds offers the kinds of event the selected nodes have, most
  // frequent first, and picks the API's default when none is chosen: the
  // most frequent incident (never heatscope's own overhead-guard episodes).
  // It returns how many kinds there are.
  async function loadKinds() {
    const p = new URLSearchParams();
    if (state.node) p.set('node', state.node);
    if (state.label) p.set('label', state.label);
    let kinds = [];
    let defaultKind = '';
    try {
      const d = await track(getJSON('/api/fleet/events', p));
      kinds = d.kinds.filter((k) => k.name);
      defaultKind = d.defaultKind || '';
    } catch {
      // the comparison's own request reports a bad filter
    }
    if (!state.kind) state.kind = defaultKind;
    const opts = kinds.map((k) => el('option', { value: k.name, textContent: `${k.name} (${k.count})` }));
    if (state.kind && !kinds.some((k) => k.name === state.kind)) opts.push(el('option', { value: state.kind, textContent: `${state.kind} (0)` }));
    if (!opts.length) opts.push(el('option', { value: '', textContent: 'no events' }));
    else if (!state.kind) opts.unshift(el('option', { value: '', textContent: 'choose a kind' }));
    $('pd-kind').replaceChildren(...opts);
    $('pd-kind').value = state.kind;
    return kinds.length;
  }

  function grewText(f, d) {
    return `${f.grew} of ${d.withSamples} ${d.kind} events, on ${f.grewNodes} of ${d.eventNodes} node${d.eventNodes === 1 ? '' : 's'}`;
  }

  function renderFunctions(d) {
    const tbody = $('pd-functions').querySelector('tbody');
    const grown = d.functions.filter((f) => f.delta > 0 || f.grew > 0);
    const shown = state.passthru ? grown : grown.filter((f) => !f.via);
    const rows = shown.slice(0, ROWS);
    const collapsed = grown.length - shown.length;
    $('pd-hidden').textContent = collapsed ? `${collapsed} pass-through caller${collapsed === 1 ? '' : 's'} ${state.passthru ? 'shown' : 'hidden'}` : '';
    tbody.replaceChildren(...rows.map((f) => {
      const tr = el('tr', { className: 'pick' + (f.name === state.fn && f.kind === state.fnKind ? ' picked' : ''), title: 'per node and per event' },
        el('td', { className: 'mono' }, f.name, ...(f.via ? [el('span', { className: 'via', textContent: ` → ${f.via}` })] : [])),
        el('td', { textContent: kindName(f.kind) }),
        el('td', { className: 'num', textContent: cpu(f.a) }),
        el('td', { className: 'num', textContent: cpu(f.b) }),
        el('td', { className: 'num ' + (f.delta > 0 ? 'grew' : f.delta < 0 ? 'shrank' : ''), textContent: signed(f.delta) }),
        el('td', { className: 'num ' + (f.deltaSelf > 0 ? 'grew' : f.deltaSelf < 0 ? 'shrank' : ''), textContent: signed(f.deltaSelf) }),
        el('td', { className: 'grew-before', textContent: grewText(f, d) }));
      tr.dataset.name = f.name;
      tr.dataset.kind = f.kind;
      tr.addEventListener('click', () => {
        state.fn = f.name;
        state.fnKind = f.kind;
        writePrediffURL();
        renderFunctions(loaded.last);
        loadFocus();
      });
      return tr;
    }));
    const hidden = d.functionCount - rows.length - (state.passthru ? 0 : collapsed);
    $('pd-functions-more').hidden = rows.length > 0 && hidden <= 0;
    $('pd-functions-more').textContent = rows.length === 0 && d.events.length
      ? 'No function took more CPU time in the windows before the events than in the windows before those.'
      : `${hidden} more function${hidden === 1 ? '' : 's'} ran in the windows (those that did not grow, or past the first ${ROWS}).`;
  }

  function render(d) {
    loaded.last = d;
    const n = d.events.length;
    const w = d.window;
    $('pd-summary').textContent = n
      ? `${n}${d.more ? '+' : ''} ${d.kind} event${n === 1 ? '' : 's'} on ${d.eventNodes} node${d.eventNodes === 1 ? '' : 's'}` +
        (d.withSamples < n ? ` (${n - d.withSamples} without samples in either window)` : '') +
        `; A: the ${w} s before each, ${cpu(d.a)} of CPU time; B: the ${w} s before those, ${cpu(d.b)}`
      : '';
    $('pd-empty').textContent = d.message;
    $('pd-empty').hidden = !d.message;
    renderFunctions(d);
    setStatus(d.message || `${n} events compared`);
  }

  async function loadFocus() {
    if (!state.fn || !loaded.last || !loaded.last.events.length) {
      $('pd-focus').hidden = true;
      loaded.focus = null;
      return;
    }
    let d;
    try {
      d = await track(getJSON('/api/fleet/prediff', params(true)));
    } catch (e) {
      setStatus('/api/fleet/prediff: ' + e.message, true);
      return;
    }
    loaded.focus = d;
    $('pd-focus').hidden = false;
    $('pd-focus-name').textContent = `${state.fn} (${kindName(state.fnKind)})`;
    $('pd-nodes').querySelector('tbody').replaceChildren(...d.nodes.map((nd) => {
      const delta = nd.focusA - nd.focusB;
      const tr = el('tr', { className: 'pick', title: `compare ${nd.node}'s events only` },
        el('td', { className: 'mono', textContent: nd.node }),
        el('td', { className: 'num', textContent: String(nd.events) }),
        el('td', { className: 'grew-before', textContent: `${nd.focusGrew} of ${nd.withSamples}` }),
        el('td', { className: 'num', textContent: cpu(nd.focusA) }),
        el('td', { className: 'num', textContent: cpu(nd.focusB) }),
        el('td', { className: 'num ' + (delta > 0 ? 'grew' : delta < 0 ? 'shrank' : ''), textContent: signed(delta) }));
      tr.dataset.node = nd.node;
      tr.addEventListener('click', () => {
        state.node = nd.node;
        fillForm();
        apply();
      });
      return tr;
    }));
    const w = Number(d.window);
    $('pd-events').querySelector('tbody').replaceChildren(...d.events.map((e) => {
      const delta = e.focusA - e.focusB;
      const noSamples = e.a === 0 && e.b === 0;
      const tr = el('tr', {},
        el('td', { className: 'when', textContent: formatTime(e.time) }),
        el('td', { className: 'mono', textContent: e.node }),
        el('td', { className: 'mono', textContent: e.text }),
        el('td', { className: 'num', textContent: noSamples ? 'no samples' : cpu(e.focusA) }),
        el('td', { className: 'num', textContent: noSamples ? '' : cpu(e.focusB) }),
        el('td', { className: 'num ' + (delta > 0 ? 'grew' : delta < 0 ? 'shrank' : ''), textContent: noSamples ? '' : signed(delta) }),
        el('td', {}, el('a', { href: nodeViewLink(e.node, loaded.sources.get(e.node), e.time, w), textContent: 'node view',
          title: `${e.node}'s heatmap around the event, the ${w} s before it against the ${w} s before those` })));
      tr.dataset.node = e.node;
      tr.dataset.grew = delta > 0 ? '1' : '0';
      return tr;
    }));
  }

  async function apply() {
    readForm();
    if (!state.kind) await loadKinds();
    writePrediffURL();
    try {
      // Both at once; a bad parameter is reported from the table's answer,
      // which names it.
      const [rd, rt] = await track(Promise.allSettled([
        getJSON('/api/fleet/prediff', params(false)),
        fetchTree('/api/fleet/prediff/diff', params(false)),
      ]));
      if (rd.status === 'rejected') throw rd.reason;
      if (rt.status === 'rejected') throw rt.reason;
      const [d, tree] = [rd.value, rt.value];
      showParamError('pd-error', INPUTS, null);
      flame.set(tree);
      $('pd-flame-section').hidden = d.events.length === 0 || d.withSamples === 0;
      render(d);
      if (state.fn && !d.functions.some((f) => f.name === state.fn && f.kind === state.fnKind)) state.fn = state.fnKind = '';
      await loadFocus();
    } catch (e) {
      if (!showParamError('pd-error', INPUTS, e)) setStatus('/api/fleet/prediff: ' + e.message, true);
      else setStatus('');
    }
  }

  // For tests: the answers and what the tables show.
  window.heatscopeFleetDiff = {
    state,
    data: () => loaded.last,
    focus: () => loaded.focus,
    functions: () => [...$('pd-functions').querySelectorAll('tbody tr')].map((tr) => ({
      name: tr.dataset.name, kind: tr.dataset.kind, grewBefore: tr.querySelector('.grew-before').textContent })),
    flameNames: () => [...$('pd-flame-names').children].map((li) => li.textContent),
    flameTree: () => flame.tree,
    // the root frame's box, in page coordinates
    flameRoot: () => {
      const r = flame.rects.find((b) => b.node === 0);
      const c = $('pd-flame').getBoundingClientRect();
      return r ? { top: c.top + window.scrollY + r.y, left: c.left + r.x, width: r.w } : null;
    },
  };

  readPrediffURL();
  fillForm();
  loaded.sources = await track(nodeSources());
  const kinds = await loadKinds();
  $('pd-filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.fn = state.fnKind = '';
    apply();
  });
  $('pd-flame-reset').addEventListener('click', () => flame.reset());
  flame.icicle = !state.rootBottom;
  $('pd-icicle').checked = flame.icicle;
  $('pd-icicle').addEventListener('change', () => {
    flame.icicle = $('pd-icicle').checked;
    state.rootBottom = flame.icicle ? '' : '1';
    writePrediffURL();
    flame.draw();
  });
  $('pd-collapse').checked = !state.passthru;
  $('pd-collapse').addEventListener('change', () => {
    state.passthru = $('pd-collapse').checked ? '' : '1';
    writePrediffURL();
    if (loaded.last) renderFunctions(loaded.last);
  });
  $('pd-search').addEventListener('input', () => {
    let re = null;
    try {
      re = $('pd-search').value ? new RegExp($('pd-search').value) : null;
      $('pd-search').classList.remove('invalid');
    } catch {
      $('pd-search').classList.add('invalid');
    }
    flame.setSearch(re);
    showMatch();
  });
  if (state.kind) await apply();
  else {
    $('pd-empty').textContent = kinds
      ? 'Only heatscope\'s own events (overhead-guard: the agent lowering its sampling rate) on the selected nodes, no incident: choose a kind to compare before.'
      : 'No event on the selected nodes: nothing to compare.';
    $('pd-empty').hidden = false;
    $('pd-flame-section').hidden = true;
  }
  setReady();
}
