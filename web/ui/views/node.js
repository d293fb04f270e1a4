// The node view (/): a filter bar, the overview timeline, the subsecond
// heatmap and the per-CPU view of a span, and the flame graph, top
// functions and pprof download of the selection. In compare mode a second
// selection, the baseline, turns the flame graph into a differential one.
// Its state (state.js's node) lives in the URL's hash, so a link
// reproduces the view. Names from the data (functions, commands) are only
// ever set as text (textContent, canvas fillText).
import { $, getJSON, request, pct, formatTime, measureDraw, searchRegexp, setStatus, showEmpty } from '../util.js';
import { Timeline } from '../timeline.js';
import { Heatmap } from '../heatmap.js';
import { FlameGraph, fetchTree, drawKindLegend, kindName } from '../flame.js';
import { PerCPU } from '../percpu.js';
import { EventList } from '../events.js';
import { drawLegend, formatCPU, formatChange } from '../legend.js';
import {
  node as state, nodeData, NODE_FILTERS, readNodeURL, writeNodeURL, setFilters, filterParams,
  hasBaseline, selectedRange, secs, setBusy, setRelativeOrigin, clock,
} from '../state.js';

const DEFAULT_SPAN = 120; // seconds: at most the last 2 minutes of a source
const GAP = 10; // seconds without a sample that end the data's last span
const TOP_PAGE = 20; // rows of the top functions table shown at first, and added by "more"
const TOP_LIMIT = 1000; // rows of the top functions table fetched
const ROW_CHOICES = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];
const MIN_VIEW = 10; // seconds: the narrowest the timeline zooms

// windowText names a time window: its start and its length.
function windowText(from, to) {
  return `${formatTime(from)} + ${Math.round((to - from) * 1000) / 1000} s`;
}

// emptyNote is a view's note from the API's message, which says why the
// view holds no sample ('' when it holds some). For a source on its
// capture's own clock, whose times the views write from t=0, it says
// where t=0 is on that clock, in which the message writes them.
function emptyNote(message) {
  const origin = clock.relativeOrigin;
  return message && origin !== null ? `${message} (The views' t=0 is ${origin} s on that clock.)` : message;
}

// samplesText counts samples in words.
function samplesText(n) {
  return `${n} sample${n === 1 ? '' : 's'}`;
}

function currentSource() {
  return nodeData.sources.find((s) => s.name === state.source);
}

// defaultSpan is the data's last span: the last 2 minutes of the source
// (or all of it if shorter), cut after the last gap of GAP seconds without
// a sample, idle included (the recorder was not running), so that a gap
// does not leave most of the heatmap empty.
async function defaultSpan() {
  const src = currentSource();
  if (!src) return;
  const to = Math.floor(src.last) + 1;
  let from = Math.max(Math.floor(src.first), to - DEFAULT_SPAN);
  const p = new URLSearchParams({ source: src.name, idle: 'include', from: secs(from), to: secs(to), step: '1s' });
  const data = await request('span', '/api/timeline', p);
  if (data) {
    let first = data.counts.length; // the first step of the last run of data
    let zeros = 0;
    for (let i = data.counts.length - 1; i >= 0 && zeros < GAP; i--) {
      if (data.counts[i] > 0) {
        first = i;
        zeros = 0;
      } else if (first < data.counts.length) {
        zeros++;
      }
    }
    if (first < data.counts.length) from = Math.max(from, Math.floor(data.start + first * data.step));
  }
  state.from = from;
  state.to = to;
}

function showSpan() {
  const src = currentSource();
  $('span-label').textContent = src
    ? `${src.name}: ${src.samples} samples${src.relative ? ' (times relative: the capture has no wall time)' : ''}; heatmap span ${formatTime(state.from)} + ${state.to - state.from} s`
    : '';
}

// unitName names the unit of the API's CPU figures.
function unitName(unit) {
  return unit === 'cpu-seconds' ? 'CPU time' : unit;
}

// showGrowth fills the table of functions that grew from B to A, or hides
// it without a baseline: the 30 that grew most (by total or self time, as
// the API sorted them), leaving out the pass-throughs (a caller whose
// growth is nearly all one callee's) unless asked for.
function showGrowth(g) {
  nodeData.growth = g;
  $('growth-box').hidden = !g;
  if (!g) return;
  // The API's message says which window holds no sample, and why.
  showEmpty('growth-empty', emptyNote(g.message));
  $('growth-label').textContent = `A: ${formatCPU(g.cpu)} of CPU time (${samplesText(g.samples)}), B: ${formatCPU(g.cpu2)} (${samplesText(g.samples2)}), ` +
    "B scaled to A's length";
  $('growth-by-total').classList.toggle('sorted', state.growthOrder === 'total');
  $('growth-by-self').classList.toggle('sorted', state.growthOrder === 'self');
  $('growth-collapse').checked = !state.passThrough;
  const key = state.growthOrder === 'self' ? 'deltaSelfCpu' : 'deltaTotalCpu';
  const grew = g.functions.filter((f) => f[key] > 0);
  const shown = state.passThrough ? grew : grew.filter((f) => !f.via);
  const hidden = grew.length - shown.length;
  $('growth-hidden').textContent = state.passThrough ? '' : `${hidden} pass-through caller${hidden === 1 ? '' : 's'} hidden`;
  const rows = shown.slice(0, 30).map((f) => {
    const tr = document.createElement('tr');
    tr.dataset.name = f.name;
    for (const [text, cls] of [[f.name], [kindName(f.kind)], [formatCPU(f.totalCpu), 'num'], [pct(f.totalCpu, g.cpu), 'num'],
      [formatCPU(f.totalCpu2), 'num'], [pct(f.totalCpu2, g.cpu2), 'num'], [formatChange(f.deltaTotalCpu), 'num'], [formatChange(f.deltaSelfCpu), 'num']]) {
      const td = document.createElement('td');
      td.textContent = String(text);
      if (cls) td.className = cls;
      tr.append(td);
    }
    if (f.via) {
      tr.className = 'pass-through';
      const via = document.createElement('span');
      via.className = 'via';
      via.textContent = ` → ${f.via} (${formatChange(f.deltaViaCpu)})`;
      tr.cells[0].append(via);
      tr.title = `${f.name} passes ${pct(f.deltaViaCpu, f.deltaTotalCpu)} of its growth to ${f.via}; `;
    }
    tr.title += `${f.total} samples with it on the stack in A, ${f.total2} in B`;
    return tr;
  });
  $('growth').tBodies[0].replaceChildren(...rows);
}

// showTop fills the top functions table with its first TOP_PAGE rows (the
// "more" button adds more); a failed request (top null) empties it, so
// that it never shows an earlier query's rows.
function showTop(top) {
  nodeData.top = top;
  nodeData.topShown = TOP_PAGE;
  if (!top) {
    drawTop();
    showEmpty('top-empty', 'The top functions could not be loaded (see the message above).');
    return;
  }
  showEmpty('top-empty', emptyNote(top.message));
  drawTop();
}

function drawTop() {
  const top = nodeData.top;
  const list = top ? top.functions : [];
  const shown = list.slice(0, nodeData.topShown);
  const more = $('top-more');
  more.hidden = shown.length >= list.length;
  more.textContent = `${Math.min(TOP_PAGE, list.length - shown.length)} more`;
  $('top-count').textContent = list.length === 0 ? ''
    : `${shown.length} of ${list.length}${list.length === TOP_LIMIT ? ' (the first ' + TOP_LIMIT + ')' : ''} functions`;
  const rows = shown.map((f) => {
    const tr = document.createElement('tr');
    for (const [text, cls] of [[f.name], [kindName(f.kind)], [formatCPU(f.selfCpu), 'num'], [pct(f.selfCpu, top.cpu), 'num'],
      [formatCPU(f.totalCpu), 'num'], [pct(f.totalCpu, top.cpu), 'num']]) {
      const td = document.createElement('td');
      td.textContent = String(text);
      if (cls) td.className = cls;
      tr.append(td);
    }
    tr.title = `${f.self} samples, ${f.total} with it on the stack`;
    if (f.group) {
      const group = document.createElement('span');
      group.className = 'via';
      group.textContent = ` · ${f.group}`;
      tr.cells[0].append(group);
    }
    return tr;
  });
  $('top').tBodies[0].replaceChildren(...rows);
}

// checkFilters asks the server whether a source and filters (name ->
// value) parse, with a heatmap of a millisecond in 1970 (no block holds it,
// so it reads nothing): the API's parsers are the judges, RE2 regexps
// included. It returns null, or the error ({param, message}) of a 400.
async function checkFilters(source, filters) {
  const p = new URLSearchParams({ from: '0', to: '0.001', rows: '1' });
  if (source) p.set('source', source);
  setFilters(p, filters);
  try {
    await getJSON('/api/heatmap', p);
  } catch (e) {
    if (e.status === 400) return { param: e.param || '', message: e.message };
  }
  return null;
}

// markInvalid marks the filter field a 400 named (and says why), or clears
// every mark when bad is null.
function markInvalid(bad) {
  for (const el of document.querySelectorAll('#filters .invalid')) {
    el.classList.remove('invalid');
    el.removeAttribute('aria-invalid');
    el.title = '';
  }
  const msg = $('filter-error');
  msg.hidden = !bad;
  msg.textContent = bad ? `${bad.message}: nothing was changed` : '';
  const el = bad && bad.param && $('f-' + bad.param);
  if (el) {
    el.classList.add('invalid');
    el.setAttribute('aria-invalid', 'true');
    el.title = bad.message;
  }
}

// loadSources fills the source picker from /api/sources: with a node
// picked, that node's sources with its own samples only (two nodes'
// recordings may share a source name, their hostname: node a's view read
// "vm (46586 samples)", a's and b's together), so that its counts and
// default span are the node's. It reports whether the sources loaded.
async function loadSources() {
  const node = state.node;
  // a node filter the server refuses lists every source (the views say
  // what is wrong with the filter)
  const asks = node ? [new URLSearchParams({ node }), null] : [null];
  let failure = null;
  setBusy(1);
  try {
    for (const params of asks) {
      try {
        nodeData.sources = await getJSON('/api/sources', params);
        failure = null;
        break;
      } catch (e) {
        failure = e;
      }
    }
  } finally {
    setBusy(-1);
  }
  if (failure) {
    setStatus('/api/sources: ' + failure.message, true);
    return false;
  }
  nodeData.sourcesNode = node;
  $('f-source').replaceChildren(...nodeData.sources.map((s) => new Option(`${s.name} (${s.samples} samples)`, s.name)));
  $('f-source').value = state.source;
  return true;
}

// loadNodes fills the node picker from /api/nodes: every node, with its
// labels, or a note that the server holds none (a fleet whose nodes have
// not uploaded yet).
async function loadNodes() {
  try {
    nodeData.nodes = await getJSON('/api/nodes');
  } catch (e) {
    setStatus('/api/nodes: ' + e.message, true);
    nodeData.nodes = [];
  }
  const nodes = nodeData.nodes;
  const sel = $('f-node');
  if (!nodes.length) {
    const none = new Option('no nodes yet', '');
    sel.replaceChildren(none);
    sel.disabled = true;
    sel.title = 'No node has samples here yet: nodes appear once they record (a fleet: once they upload a block).';
    return;
  }
  sel.disabled = false;
  sel.title = '';
  const label = (n) => {
    const kv = Object.entries(n.labels).map(([k, v]) => `${k}=${v}`).join(', ');
    return `${n.name}${kv ? ' (' + kv + ')' : ''}, ${n.blocks} blocks`;
  };
  sel.replaceChildren(new Option(`all ${nodes.length} nodes`, ''), ...nodes.map((n) => new Option(label(n), n.name)));
  sel.value = state.node;
}

// mountNodeView builds the node view on index.html's elements: it reads
// the URL, makes the widgets, wires the controls and window.heatscope
// (for tests and the console). The router then loads it (loadSources,
// loadNodes, loadAll), and reloads it from the URL (reload) when the hash
// changes.
export function mountNodeView() {
  const timeline = new Timeline($('timeline'), (from, to) => {
    state.from = from;
    state.to = to;
    state.selFrom = state.selTo = null;
    setCompare(false);
    writeNodeURL();
    loadSpan();
  }, (view) => setView(view));

  const heatmap = new Heatmap($('heatmap'), (sel, which) => {
    if (which === 'b') {
      state.bFrom = sel[0];
      state.bTo = sel[1];
    } else {
      state.selFrom = sel ? sel[0] : null;
      state.selTo = sel ? sel[1] : null;
      if (!sel) setCompare(false);
    }
    writeNodeURL();
    loadSelection();
  });

  const perCPU = new PerCPU($('percpu'));

  const eventList = new EventList($('events'), (e) => pickEvent(e));

  const flame = new FlameGraph($('flame'), $('flame-names'), () => updateMatch());
  drawKindLegend($('flame-kinds'));

  // loadSpan loads the views of the heatmap's span: the heatmap, the
  // per-CPU view, the selection's and the events.
  function loadSpan() {
    loadHeatmap();
    loadPerCPU();
    loadSelection();
    showEvents();
  }

  // setView zooms or pans the timeline to view ([from, to], Unix seconds),
  // kept within the source and at least MIN_VIEW wide; null, or a view as
  // wide as the source, shows everything.
  function setView(view) {
    const src = currentSource();
    if (!src) return;
    const lo = Math.floor(src.first);
    const hi = Math.floor(src.last) + 1;
    let v = null;
    if (view && view[1] - view[0] < hi - lo) {
      const w = Math.max(MIN_VIEW, view[1] - view[0]);
      const from = Math.min(Math.max(view[0], lo), hi - w);
      v = [from, from + w];
    }
    [state.viewFrom, state.viewTo] = v || [null, null];
    writeNodeURL();
    loadTimeline();
  }

  // pickEvent selects the window before an event (A) and the same length
  // just before it (B), widening the heatmap's span to show both.
  function pickEvent(e) {
    let n = Number($('event-window').value);
    if (!(n > 0)) n = 5;
    n = Math.min(n, 3600);
    const t = e.time;
    if (!(state.from <= t - 2 * n && t <= state.to)) {
      state.from = Math.floor(t - 2 * n) - 5;
      state.to = Math.ceil(t) + 5;
    }
    state.selFrom = t - n;
    state.selTo = t;
    state.compare = true;
    state.bFrom = t - 2 * n;
    state.bTo = t - n;
    // equal windows before the event: compare CPU time per second, so the
    // burst shows as growth wherever it ran (FlameScope's scaling by totals
    // would paint a nearly idle baseline's few frames as shrinking)
    state.norm = 'length';
    $('diff-norm').value = state.norm;
    eventList.picked = t;
    writeNodeURL();
    loadSpan();
  }

  // loadEvents fetches the events (of the node picked, when one is) and
  // marks them on the timeline and the heatmap.
  async function loadEvents() {
    const data = await request('events', '/api/events', state.node ? new URLSearchParams({ node: state.node }) : null);
    if (!data) return;
    nodeData.events = data.events;
    showEvents();
  }

  function showEvents() {
    const times = nodeData.events.map((e) => e.time);
    timeline.setEvents(times);
    heatmap.events = times;
    heatmap.draw();
    eventList.set(nodeData.events, state.from, state.to, windowText(state.from, state.to));
  }

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
    // A differential graph colours by change, not by kind.
    $('flame-kinds').hidden = hasBaseline();
  }

  async function loadTimeline() {
    const p = filterParams();
    if (state.viewFrom !== null) {
      p.set('from', secs(state.viewFrom));
      p.set('to', secs(state.viewTo));
    }
    const data = await request('timeline', '/api/timeline', p);
    if (data) {
      showEmpty('timeline-empty', emptyNote(data.message));
      timeline.set(data, [state.from, state.to], state.viewFrom !== null ? [state.viewFrom, state.viewTo] : null);
      const tallest = data.cpu.reduce((m, v) => Math.max(m, v), 0);
      $('view-label').textContent = (state.viewFrom !== null
        ? `view ${formatTime(state.viewFrom)} + ${state.viewTo - state.viewFrom} s, ${data.step} s a bar`
        : `everything retained, ${data.step} s a bar`) +
        `; height: ${unitName(data.unit)}, the tallest ${formatCPU(tallest)} (${(tallest / data.step).toFixed(2)} CPUs busy)`;
      measureDraw('timeline', '/api/timeline');
    }
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
      measureDraw('heatmap', '/api/heatmap');
      const empty = emptyNote(data.message);
      showEmpty('heatmap-empty', empty);
      showHeatmapLegend();
      setStatus(empty || `heatmap: ${data.columns.length} s × ${data.rows.length} rows, busiest cell ${formatCPU(data.maxcpu)} of ${unitName(data.unit)}`);
    }
  }

  // showHeatmapLegend draws the heatmap's colour scale: CPU time per cell,
  // all CPUs together, its darkest colour also as CPUs busy over the slice.
  function showHeatmapLegend() {
    const d = heatmap.data;
    if (!d || !(d.maxcpu > 0)) {
      $('heatmap-legend').hidden = true;
      return;
    }
    const slice = 1 / d.rows.length; // seconds
    drawLegend($('heatmap-legend'), {
      caption: `colour: ${unitName(d.unit)} in each cell (a ${Math.round(slice * 1e4) / 10} ms slice of a second, all CPUs together)`,
      max: d.maxcpu,
      hi: `${formatCPU(d.maxcpu)} (${(d.maxcpu / slice).toFixed(2)} CPUs busy)`,
      enhanced: state.enhanced,
    });
  }

  // showPerCPULegend draws the per-CPU view's colour scale: each CPU's share
  // of a step spent busy.
  function showPerCPULegend() {
    const d = perCPU.data;
    let max = 0;
    if (d) for (const row of d.cpu) for (const v of row) max = Math.max(max, v);
    if (!(max > 0)) {
      $('percpu-legend').hidden = true;
      return;
    }
    drawLegend($('percpu-legend'), {
      caption: `colour: ${unitName(d.unit)} of each CPU in each ${d.step} s step`,
      max,
      hi: `${formatCPU(max)} (${Math.round((1000 * max) / d.step) / 10}% of the CPU)`,
      enhanced: state.enhanced,
    });
  }

  // loadPerCPU draws the per-CPU view of the heatmap's span.
  async function loadPerCPU() {
    const p = filterParams();
    p.set('from', secs(state.from));
    p.set('to', secs(state.to));
    const data = await request('percpu', '/api/percpu', p);
    if (data) {
      showEmpty('percpu-empty', emptyNote(data.message));
      perCPU.enhanced = state.enhanced;
      perCPU.set(data);
      showPerCPULegend();
    }
  }

  async function loadSelection() {
    setCompare(state.compare);
    const [from, to] = selectedRange();
    const p = filterParams();
    p.set('from', secs(from));
    p.set('to', secs(to));
    const label = state.selFrom !== null
      ? `selection ${formatTime(from)} + ${(to - from).toFixed(3)} s`
      : 'whole span (no selection)';
    $('selection-label').textContent = label;
    $('flame-label').textContent = `${label}; width: CPU time`;
    $('pprof-link').href = '/api/pprof?' + p.toString();
    if (state.addresses) p.set('addresses', 'show');
    const tp = new URLSearchParams(p);
    tp.set('limit', String(TOP_LIMIT));
    const topParams = new URLSearchParams(tp);
    // The group-by choice splits the top table's rows as it does the flame
    // graph's (not the growth table's).
    if (state.group) topParams.set('group', state.group);
    let flamePath = '/api/flamegraph';
    const fp = new URLSearchParams(p);
    if (state.group && !hasBaseline()) fp.set('group', state.group);
    if (hasBaseline()) {
      flamePath = '/api/diff';
      fp.set('from2', secs(state.bFrom));
      fp.set('to2', secs(state.bTo));
      if (state.norm !== 'total') fp.set('normalize', state.norm);
      $('flame-label').textContent = label + ` (A) against baseline B ${formatTime(state.bFrom)} + ${(state.bTo - state.bFrom).toFixed(3)} s; width: A's CPU time`;
    }
    const growthReq = hasBaseline() ? request('growth', '/api/top', (() => {
      const gp = new URLSearchParams(tp);
      gp.set('from2', secs(state.bFrom));
      gp.set('to2', secs(state.bTo));
      gp.set('order', state.growthOrder);
      return gp;
    })()) : null;
    const [fg, top, growth] = await Promise.all([request('flame', flamePath, fp, fetchTree), request('top', '/api/top', topParams), growthReq]);
    if (fg) showFlame(fg, flamePath);
    if (top !== undefined) showTop(top);
    showGrowth(growth);
  }

  // showFlame draws a flame graph (or differential) tree, or says that no
  // sample reached it, with the API's message (which names a
  // differential's empty baseline too, under a graph of the selection).
  function showFlame(fg, path) {
    const empty = fg.diff ? fg.samplesA === 0 : fg.n === 0 || fg.value[0] === 0;
    // An empty selection against a baseline that holds samples: what B holds.
    const inB = fg.diff && empty && fg.samplesB > 0
      ? ` The baseline B holds ${formatCPU(fg.totalB / 1e9)} of CPU time (${samplesText(fg.samplesB)}).` : '';
    showEmpty('flame-empty', emptyNote(fg.message) + inB);
    $('flame-box').hidden = empty;
    $('pprof-link').hidden = empty; // nothing to download
    flame.set(fg);
    measureDraw('flame', path);
  }

  function updateMatch() {
    const m = $('flame-match');
    if (!flame.search || !flame.tree) {
      m.textContent = '';
      return;
    }
    const n = flame.matched();
    m.textContent = `matched: ${flame.format(n)} of ${flame.format(flame.total())} (${pct(n, flame.total())})`;
  }

  function fillControls() {
    $('f-source').value = state.source;
    for (const f of NODE_FILTERS) $('f-' + f).value = state[f];
    $('rows').value = String(state.rows);
    $('enhanced').checked = state.enhanced;
    $('icicle').checked = state.icicle;
    $('addresses').checked = state.addresses;
    $('flame-group').value = state.group;
    $('diff-norm').value = state.norm;
    $('flame-search').value = state.search;
    flame.icicle = state.icicle;
    flame.search = searchRegexp(state.search);
  }

  // loadAll loads every view for the state; checked says that the filters
  // follow makes a change of the control id set the state (set, given the
  // element), write the URL, then redraw or reload (then).
  function follow(id, set, then, event = 'change') {
    const e = $(id);
    e.addEventListener(event, () => {
      set(e);
      writeNodeURL();
      then();
    });
  }

  // were just checked (checkFilters) and need not be again.
  async function loadAll(checked = false) {
    setStatus('loading…');
    if (nodeData.sourcesNode !== state.node && !(await loadSources())) return;
    if (!currentSource() && nodeData.sources.length) {
      // the recording host if there is one, else the newest import
      const withSamples = nodeData.sources.filter((s) => s.samples > 0);
      const host = withSamples.find((s) => !s.imported);
      state.source = (host || [...withSamples].sort((a, b) => b.last - a.last)[0] || nodeData.sources[0]).name;
      // A link's window holds without a source: only a missing one is
      // defaulted (below), never replaced unsaid.
    }
    if (state.from === null || state.to === null || !(state.to > state.from)) {
      await defaultSpan();
      state.selFrom = state.selTo = null;
      state.compare = false;
    }
    const src = currentSource();
    setRelativeOrigin(src && src.relative ? Math.floor(src.first) : null); // the heatmap's first column: t=0
    fillControls();
    writeNodeURL();
    if (!src) {
      setStatus('No samples yet: record or import some, then reload.');
      return;
    }
    const bad = checked ? null : await checkFilters(state.source, state);
    markInvalid(bad);
    if (bad) {
      setStatus('Fix the marked filter to see the views.', true);
      return;
    }
    const results = await Promise.allSettled([loadTimeline(), loadHeatmap(), loadPerCPU(), loadSelection(), loadEvents()]);
    for (const r of results) {
      if (r.status === 'rejected') {
        // a bug in a view: say so, and let the others and the page finish
        console.error(r.reason);
        setStatus('internal error: ' + (r.reason && r.reason.message), true);
      }
    }
  }

  function wire() {
    const rowsSel = $('rows');
    const choices = ROW_CHOICES.includes(state.rows) ? ROW_CHOICES : [...ROW_CHOICES, state.rows].sort((a, b) => a - b);
    rowsSel.replaceChildren(...choices.map((r) => new Option(String(r), String(r))));
    $('filters').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      // A filter the API refuses (a bad regexp) is marked, and nothing
      // changes: no view, no state, no URL.
      const newSource = $('f-source').value;
      const filters = {};
      for (const f of NODE_FILTERS) filters[f] = $('f-' + f).value.trim();
      setBusy(1);
      let bad;
      try {
        bad = await checkFilters(newSource, filters);
      } finally {
        setBusy(-1);
      }
      markInvalid(bad);
      if (bad) return;
      if (newSource !== state.source) {
        state.source = newSource;
        state.from = state.to = state.selFrom = state.selTo = state.viewFrom = state.viewTo = null;
      }
      Object.assign(state, filters);
      loadAll(true);
    });
    $('f-source').addEventListener('change', () => $('filters').requestSubmit());
    $('f-node').addEventListener('change', () => {
      // a node's samples are in its own sources: show one of them
      const node = nodeData.nodes.find((n) => n.name === $('f-node').value);
      if (node && node.sources.length && !node.sources.includes($('f-source').value)) $('f-source').value = node.sources[0];
      $('filters').requestSubmit();
    });
    $('f-stack').addEventListener('change', () => $('filters').requestSubmit());
    $('f-qos').addEventListener('change', () => $('filters').requestSubmit());
    follow('diff-norm', (e) => { state.norm = e.value; }, loadSelection);
    follow('flame-group', (e) => { state.group = e.value; }, loadSelection);
    follow('rows', (e) => { state.rows = Number(e.value); }, loadHeatmap);
    follow('enhanced', (e) => { state.enhanced = heatmap.enhanced = perCPU.enhanced = e.checked; }, () => {
      heatmap.draw();
      perCPU.draw();
      showHeatmapLegend();
      showPerCPULegend();
    });
    $('clear-selection').addEventListener('click', () => heatmap.clear());
    $('top-more').addEventListener('click', () => {
      nodeData.topShown += TOP_PAGE;
      drawTop();
    });
    $('timeline-in').addEventListener('click', () => timeline.zoom(1 / 2));
    $('timeline-out').addEventListener('click', () => timeline.zoom(2));
    $('timeline-all').addEventListener('click', () => setView(null));
    $('compare').addEventListener('click', () => {
      setCompare(!state.compare);
      writeNodeURL();
      loadSelection();
    });
    document.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape') heatmap.clear();
    });
    $('flame-reset').addEventListener('click', () => flame.reset());
    for (const order of ['total', 'self']) {
      $('growth-by-' + order).addEventListener('click', () => {
        state.growthOrder = order;
        writeNodeURL();
        loadSelection();
      });
    }
    follow('growth-collapse', (e) => { state.passThrough = !e.checked; }, () => showGrowth(nodeData.growth));
    follow('icicle', (e) => { state.icicle = flame.icicle = e.checked; }, () => flame.draw());
    follow('addresses', (e) => { state.addresses = e.checked; }, loadSelection);
    follow('flame-search', (e) => { state.search = e.value; }, () => flame.setSearch(searchRegexp(state.search)), 'input');
  }

  nodeData.topShown = TOP_PAGE;
  readNodeURL();
  wire();

  // For tests and the console: the state and what is drawn.
  window.heatscope = {
    state,
    flameNames: () => [...$('flame-names').children].map((li) => li.textContent),
    heatmap: () => heatmap.data,
    percpu: () => perCPU.data,
    events: () => eventList.events,
    // the node picker's choices: [value, text]
    nodeChoices: () => [...$('f-node').options].map((o) => [o.value, o.textContent]),
    // the source picker's choices: [value, text]
    sourceChoices: () => [...$('f-source').options].map((o) => [o.value, o.textContent]),
    // the functions in the growth table, as ranked
    growth: () => [...$('growth').tBodies[0].rows].map((r) => r.dataset.name),
    // the differential flame graph's root CPU times (ns) and totals, null
    // when not comparing
    diffRoot: () => (flame.diff && flame.tree.n > 0 ? {
      a: flame.tree.a[0], b: flame.tree.b[0], totalA: flame.tree.totalA, totalB: flame.tree.totalB,
      samplesA: flame.tree.samplesA, samplesB: flame.tree.samplesB,
    } : null),
    timeline: () => ({ data: timeline.data, view: timeline.view() }),
    // the drawn frames named name: their boxes in CSS pixels of the canvas
    flameBoxes: (name) => flame.rects.filter((b) => flame.name(b.node) === name).map((b) => ({ x: b.x, y: b.y, w: b.w, value: flame.value(b.node) })),
    // the flame graph's decoded tree, as flame.js's decodeTree made it
    flameTree: () => flame.tree,
    flameZoom: () => (flame.zoom !== null ? flame.name(flame.zoom) : null),
    // reload one view as a user action would (the UI benchmark times them)
    load: { heatmap: loadHeatmap, selection: loadSelection },
  };

  return {
    loadSources,
    loadNodes,
    loadAll,
    reload() {
      readNodeURL();
      loadAll();
    },
  };
}
