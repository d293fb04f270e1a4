// heatscope's UI: a filter bar, the overview timeline, the subsecond
// heatmap and the per-CPU view of a span, and the flame graph, top
// functions and pprof download of the selection. In compare mode a second
// selection, the baseline, turns the flame graph into a differential one. The whole state lives in the URL's hash, so a link
// reproduces the view. Names from the data (functions, commands) are only
// ever set as text (textContent, canvas fillText).
import { getJSON, pct, formatTime } from './util.js';
import { Timeline } from './timeline.js';
import { Heatmap } from './heatmap.js';
import { FlameGraph } from './flame.js';
import { PerCPU } from './percpu.js';

const $ = (id) => document.getElementById(id);
const FILTERS = ['comm', 'pid', 'cpu', 'container', 'pod', 'namespace', 'qos', 'frame', 'stack'];
const GROUPS = ['', 'container', 'pod', 'namespace', 'qos', 'cgroup'];
const DEFAULT_SPAN = 120; // seconds: the last 2 minutes of a source
const ROW_CHOICES = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];

// state is everything the URL holds.
const state = {
  source: '', from: null, to: null, rows: 50, selFrom: null, selTo: null,
  compare: false, bFrom: null, bTo: null, // compare mode and its baseline
  comm: '', pid: '', cpu: '', container: '', pod: '', namespace: '', qos: '', frame: '', stack: 'all',
  group: '', enhanced: false, icicle: false, search: '',
};
let sources = [];
let busy = 0;
const inflight = {};

function num(v) {
  if (v === null || v === '') return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

// secs formats Unix seconds for the API and the URL (to the microsecond).
function secs(t) {
  return String(Math.round(t * 1e6) / 1e6);
}

function readURL() {
  const p = new URLSearchParams(location.hash.slice(1));
  state.source = p.get('source') || '';
  state.from = num(p.get('from'));
  state.to = num(p.get('to'));
  const rows = num(p.get('rows'));
  state.rows = rows && rows >= 1 && rows <= 1000 ? Math.round(rows) : 50;
  state.selFrom = num(p.get('sf'));
  state.selTo = num(p.get('st'));
  state.compare = p.get('cmp') === '1' && state.selFrom !== null && state.selTo !== null;
  state.bFrom = state.compare ? num(p.get('bf')) : null;
  state.bTo = state.compare ? num(p.get('bt')) : null;
  for (const f of FILTERS) state[f] = p.get(f) || '';
  if (!['all', 'kernel', 'user'].includes(state.stack)) state.stack = 'all';
  if (!['', 'guaranteed', 'burstable', 'besteffort'].includes(state.qos)) state.qos = '';
  state.group = GROUPS.includes(p.get('group')) ? p.get('group') : '';
  state.enhanced = p.get('enhanced') === '1';
  state.icicle = p.get('icicle') === '1';
  state.search = p.get('search') || '';
}

function writeURL() {
  const p = new URLSearchParams();
  if (state.source) p.set('source', state.source);
  if (state.from !== null && state.to !== null) {
    p.set('from', secs(state.from));
    p.set('to', secs(state.to));
  }
  p.set('rows', String(state.rows));
  if (state.selFrom !== null && state.selTo !== null) {
    p.set('sf', secs(state.selFrom));
    p.set('st', secs(state.selTo));
  }
  if (state.compare) {
    p.set('cmp', '1');
    if (hasBaseline()) {
      p.set('bf', secs(state.bFrom));
      p.set('bt', secs(state.bTo));
    }
  }
  for (const f of FILTERS) if (state[f] && !(f === 'stack' && state[f] === 'all')) p.set(f, state[f]);
  if (state.enhanced) p.set('enhanced', '1');
  if (state.icicle) p.set('icicle', '1');
  if (state.group) p.set('group', state.group);
  if (state.search) p.set('search', state.search);
  const hash = '#' + p.toString();
  if (location.hash !== hash) history.replaceState(null, '', hash);
}

// filterParams are the source and filters every request takes.
function filterParams() {
  const p = new URLSearchParams();
  if (state.source) p.set('source', state.source);
  for (const f of FILTERS) if (state[f] && !(f === 'stack' && state[f] === 'all')) p.set(f, state[f]);
  return p;
}

function hasBaseline() {
  return state.compare && state.bFrom !== null && state.bTo !== null && state.bTo > state.bFrom;
}

// range is the selection, or the whole span without one.
function range() {
  if (state.selFrom !== null && state.selTo !== null) return [state.selFrom, state.selTo];
  return [state.from, state.to];
}

function setStatus(msg, error) {
  const s = $('status');
  s.textContent = msg;
  s.classList.toggle('error', !!error);
}

function setBusy(delta) {
  busy += delta;
  document.body.dataset.busy = String(busy);
}

// request runs one named request at a time: a newer one aborts the older.
async function request(name, path, params) {
  if (inflight[name]) inflight[name].abort();
  const ctl = new AbortController();
  inflight[name] = ctl;
  setBusy(1);
  try {
    const data = await getJSON(path, params, ctl.signal);
    return ctl.signal.aborted ? null : data;
  } catch (e) {
    if (e.name === 'AbortError' || ctl.signal.aborted) return null;
    setStatus(`${path}: ${e.message}`, true);
    return null;
  } finally {
    if (inflight[name] === ctl) delete inflight[name];
    setBusy(-1);
  }
}

const timeline = new Timeline($('timeline'), (from, to) => {
  state.from = from;
  state.to = to;
  state.selFrom = state.selTo = null;
  setCompare(false);
  writeURL();
  loadHeatmap();
  loadPerCPU();
  loadSelection();
});

const heatmap = new Heatmap($('heatmap'), (sel, which) => {
  if (which === 'b') {
    state.bFrom = sel[0];
    state.bTo = sel[1];
  } else {
    state.selFrom = sel ? sel[0] : null;
    state.selTo = sel ? sel[1] : null;
    if (!sel) setCompare(false);
  }
  writeURL();
  loadSelection();
});

const perCPU = new PerCPU($('percpu'));

// setCompare enters or leaves compare mode; leaving drops the baseline.
function setCompare(on) {
  state.compare = on && state.selFrom !== null;
  if (!state.compare) state.bFrom = state.bTo = null;
  heatmap.mode = state.compare ? 'b' : 'a';
  heatmap.selection2 = hasBaseline() ? [state.bFrom, state.bTo] : null;
  heatmap.pending = null;
  heatmap.draw();
  const btn = $('compare');
  btn.textContent = state.compare ? 'exit compare' : 'compare';
  btn.disabled = !state.compare && state.selFrom === null;
  $('compare-label').textContent = !state.compare ? ''
    : hasBaseline() ? `baseline B ${formatTime(state.bFrom)} + ${(state.bTo - state.bFrom).toFixed(3)} s (click two cells to change it)`
      : 'click a start cell, then an end cell, to select the baseline B';
  $('diff-legend').hidden = !hasBaseline();
}

const flame = new FlameGraph($('flame'), $('flame-names'), () => updateMatch());

function currentSource() {
  return sources.find((s) => s.name === state.source);
}

// defaultSpan is the last 2 minutes of the source, or all of it if shorter.
function defaultSpan() {
  const src = currentSource();
  if (!src) return;
  const to = Math.floor(src.last) + 1;
  state.from = Math.max(Math.floor(src.first), to - DEFAULT_SPAN);
  state.to = to;
}

function showSpan() {
  const src = currentSource();
  $('span-label').textContent = src
    ? `${src.name}: ${src.samples} samples; heatmap span ${new Date(state.from * 1000).toISOString()} + ${state.to - state.from} s`
    : '';
}

async function loadTimeline() {
  const data = await request('timeline', '/api/timeline', filterParams());
  if (data) timeline.set(data, [state.from, state.to]);
}

async function loadHeatmap() {
  showSpan();
  timeline.setSpan([state.from, state.to]);
  const p = filterParams();
  p.set('from', secs(state.from));
  p.set('to', secs(state.to));
  p.set('rows', String(state.rows));
  const data = await request('heatmap', '/api/heatmap', p);
  if (data) {
    heatmap.enhanced = state.enhanced;
    heatmap.set(data, state.selFrom !== null ? [state.selFrom, state.selTo] : null, hasBaseline() ? [state.bFrom, state.bTo] : null);
    setStatus(`heatmap: ${data.columns.length} s × ${data.rows.length} rows, busiest cell ${data.maxvalue} samples`);
  }
}

// loadPerCPU draws the per-CPU view of the heatmap's span.
async function loadPerCPU() {
  const p = filterParams();
  p.set('from', secs(state.from));
  p.set('to', secs(state.to));
  const data = await request('percpu', '/api/percpu', p);
  if (data) {
    perCPU.enhanced = state.enhanced;
    perCPU.set(data);
  }
}

async function loadSelection() {
  setCompare(state.compare);
  const [from, to] = range();
  const p = filterParams();
  p.set('from', secs(from));
  p.set('to', secs(to));
  const label = state.selFrom !== null
    ? `selection ${new Date(from * 1000).toISOString()} + ${(to - from).toFixed(3)} s`
    : 'whole span (no selection)';
  $('selection-label').textContent = label;
  $('flame-label').textContent = label;
  $('pprof-link').href = '/api/pprof?' + p.toString();
  const tp = new URLSearchParams(p);
  tp.set('limit', '100');
  let flamePath = '/api/flamegraph';
  const fp = new URLSearchParams(p);
  if (state.group && !hasBaseline()) fp.set('group', state.group);
  if (hasBaseline()) {
    flamePath = '/api/diff';
    fp.set('from2', secs(state.bFrom));
    fp.set('to2', secs(state.bTo));
    $('flame-label').textContent = label + ` (A) against baseline B ${new Date(state.bFrom * 1000).toISOString()} + ${(state.bTo - state.bFrom).toFixed(3)} s`;
  }
  const [fg, top] = await Promise.all([request('flame', flamePath, fp), request('top', '/api/top', tp)]);
  if (fg && fg.root) flame.setDiff(fg);
  else if (fg) flame.set(fg);
  if (top) showTop(top);
}

function showTop(top) {
  const rows = top.functions.map((f) => {
    const tr = document.createElement('tr');
    for (const [text, cls] of [[f.name], [f.kind], [f.self, 'num'], [pct(f.self, top.samples), 'num'],
      [f.total, 'num'], [pct(f.total, top.samples), 'num']]) {
      const td = document.createElement('td');
      td.textContent = String(text);
      if (cls) td.className = cls;
      tr.append(td);
    }
    return tr;
  });
  $('top').tBodies[0].replaceChildren(...rows);
}

function searchRegexp(text) {
  if (!text) return null;
  try {
    return new RegExp(text, 'i');
  } catch {
    return new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
  }
}

function updateMatch() {
  const m = $('flame-match');
  if (!flame.search || !flame.root) {
    m.textContent = '';
    return;
  }
  const n = flame.matched();
  m.textContent = `matched: ${n} of ${flame.root.value} samples (${pct(n, flame.root.value)})`;
}

function fillControls() {
  $('f-source').value = state.source;
  for (const f of FILTERS) $('f-' + f).value = state[f];
  $('rows').value = String(state.rows);
  $('enhanced').checked = state.enhanced;
  $('icicle').checked = state.icicle;
  $('flame-group').value = state.group;
  $('flame-search').value = state.search;
  flame.icicle = state.icicle;
  flame.search = searchRegexp(state.search);
}

async function loadAll() {
  setStatus('loading…');
  if (!currentSource() && sources.length) {
    // the recording host if there is one, else the newest import
    const withSamples = sources.filter((s) => s.samples > 0);
    const host = withSamples.find((s) => !s.imported);
    state.source = (host || [...withSamples].sort((a, b) => b.last - a.last)[0] || sources[0]).name;
    state.from = state.to = null;
  }
  if (state.from === null || state.to === null || !(state.to > state.from)) {
    defaultSpan();
    state.selFrom = state.selTo = null;
    state.compare = false;
  }
  fillControls();
  writeURL();
  if (!currentSource()) {
    setStatus('No samples yet: record or import some, then reload.');
    return;
  }
  await Promise.all([loadTimeline(), loadHeatmap(), loadPerCPU(), loadSelection()]);
}

function wire() {
  const rowsSel = $('rows');
  const choices = ROW_CHOICES.includes(state.rows) ? ROW_CHOICES : [...ROW_CHOICES, state.rows].sort((a, b) => a - b);
  rowsSel.replaceChildren(...choices.map((r) => new Option(String(r), String(r))));
  $('filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const newSource = $('f-source').value;
    if (newSource !== state.source) {
      state.source = newSource;
      state.from = state.to = state.selFrom = state.selTo = null;
    }
    for (const f of FILTERS) state[f] = $('f-' + f).value.trim();
    loadAll();
  });
  $('f-source').addEventListener('change', () => $('filters').requestSubmit());
  $('f-stack').addEventListener('change', () => $('filters').requestSubmit());
  $('f-qos').addEventListener('change', () => $('filters').requestSubmit());
  $('flame-group').addEventListener('change', () => {
    state.group = $('flame-group').value;
    writeURL();
    loadSelection();
  });
  rowsSel.addEventListener('change', () => {
    state.rows = Number(rowsSel.value);
    writeURL();
    loadHeatmap();
  });
  $('enhanced').addEventListener('change', () => {
    state.enhanced = heatmap.enhanced = perCPU.enhanced = $('enhanced').checked;
    writeURL();
    heatmap.draw();
    perCPU.draw();
  });
  $('clear-selection').addEventListener('click', () => heatmap.clear());
  $('compare').addEventListener('click', () => {
    setCompare(!state.compare);
    writeURL();
    loadSelection();
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') heatmap.clear();
  });
  $('flame-reset').addEventListener('click', () => flame.reset());
  $('icicle').addEventListener('change', () => {
    state.icicle = flame.icicle = $('icicle').checked;
    writeURL();
    flame.draw();
  });
  $('flame-search').addEventListener('input', () => {
    state.search = $('flame-search').value;
    writeURL();
    flame.setSearch(searchRegexp(state.search));
  });
  window.addEventListener('hashchange', () => {
    readURL();
    loadAll();
  });
}

async function main() {
  document.body.dataset.busy = '0';
  readURL();
  wire();
  setBusy(1);
  try {
    sources = await getJSON('/api/sources');
  } catch (e) {
    setStatus('/api/sources: ' + e.message, true);
    return;
  } finally {
    setBusy(-1);
  }
  $('f-source').replaceChildren(...sources.map((s) => new Option(`${s.name} (${s.samples} samples)`, s.name)));
  await loadAll();
  document.body.dataset.ready = '1';
}

// For tests and the console: the state and what is drawn.
window.heatscope = {
  state,
  flameNames: () => [...$('flame-names').children].map((li) => li.textContent),
  heatmap: () => heatmap.data,
  percpu: () => perCPU.data,
  // the differential flame graph's root counts, null when not comparing
  diffRoot: () => (flame.diff && flame.root ? { a: flame.root.a, b: flame.root.b, totalA: flame.diff.totalA, totalB: flame.diff.totalB } : null),
};

main();
