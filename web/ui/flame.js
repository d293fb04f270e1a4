// The flame graph on canvas: click a frame to zoom into it, search with a
// regular expression (matches highlighted, their share of CPU time shown),
// flame (root at the bottom) or icicle (root at the top). Widths are CPU
// time, each sample weighing its own period, so a change of the sampling
// rate does not change a frame's width: a plain flame graph's, or in a
// differential one (from /api/diff or /api/fleet/prediff/diff) A's,
// coloured by the normalised change against B.
//
// Trees run to hundreds of thousands of nodes (50 000 distinct stacks are
// about 300 000), so they come in the API's compact encoding
// (encoding=compact, see docs/api.md): a table of names and one column per
// field, nodes in pre-order, mapped onto typed arrays with no parsing. A
// node is its index in the columns (the root is 0), its subtree the next
// size[i] nodes; a draw visits only the frames wide enough to see.
import { sizeCanvas, showTooltip, hideTooltip, pct, trimText, getBinary, littleEndian } from './util.js';
import { formatCPU, formatChange } from './legend.js';

const ROW = 17;

// The numeric columns of each kind of tree, in the encoding's order.
const COLUMNS = {
  HSF3: ['value', 'self', 'cpu', 'selfCpu', 'fp'],
  HSD1: ['a', 'b', 'selfA', 'selfB', 'delta', 'deltaTotal'],
};
const HEADER = 16;

// column reads n numbers of type T (Float64Array, Uint32Array) at off:
// in place when native (the machine is little-endian), else converted
// through a DataView.
function column(T, buf, off, n, native) {
  if (native) return new T(buf, off, n);
  const view = new DataView(buf, off, n * T.BYTES_PER_ELEMENT);
  const out = new T(n);
  for (let i = 0; i < n; i++) out[i] = T === Float64Array ? view.getFloat64(i * 8, true) : view.getUint32(i * 4, true);
  return out;
}

// decodeTree reads a compact tree (an ArrayBuffer) into
// {diff, n, names, kinds, totalA, totalB, samplesA, samplesB, message (why
// the answer is empty, '' when it is not), name, kind,
// size, and the numeric columns: value, self, cpu and selfCpu (CPU
// seconds) and fp (samples whose frame there was found with frame
// pointers in a walk with unwind tables), or a, b, selfA, selfB, delta and
// deltaTotal (CPU nanoseconds, as the header's unit says)}. It checks
// every length and index, and a differential's unit, so that a bad answer
// is an error, never a wrong drawing. native false reads the columns
// through a DataView, as on a big-endian machine (the tests use it).
export function decodeTree(buf, native = littleEndian) {
  const bad = (why) => new Error('flame graph: bad compact encoding: ' + why);
  if (buf.byteLength < HEADER) throw bad('too short');
  const view = new DataView(buf);
  const magic = String.fromCharCode(...new Uint8Array(buf, 0, 4));
  const cols = COLUMNS[magic];
  if (!cols) throw bad('magic ' + JSON.stringify(magic));
  const n = view.getUint32(4, true);
  const j = view.getUint32(8, true);
  if (HEADER + j > buf.byteLength) throw bad('header length');
  const head = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, HEADER, j)));
  let off = (HEADER + j + 7) & ~7;
  if (buf.byteLength !== off + n * (8 * cols.length + 9) || n < 1 && magic === 'HSF3') throw bad('size');
  if (magic === 'HSD1' && head.unit !== 'cpu-nanoseconds') throw bad('unit ' + JSON.stringify(head.unit));
  const t = { diff: magic === 'HSD1', n, names: head.names, kinds: head.kinds, totalA: head.totalA, totalB: head.totalB,
    samplesA: head.samplesA, samplesB: head.samplesB, message: head.message || '' };
  for (const c of cols) {
    t[c] = column(Float64Array, buf, off, n, native);
    off += 8 * n;
  }
  t.name = column(Uint32Array, buf, off, n, native);
  t.size = column(Uint32Array, buf, off + 4 * n, n, native);
  t.kind = new Uint8Array(buf, off + 8 * n, n);
  const nn = t.names.length;
  const nk = t.kinds.length;
  for (let i = 0; i < n; i++) {
    if (t.name[i] >= nn || t.kind[i] >= nk || t.size[i] < 1 || i + t.size[i] > n) throw bad('node ' + i);
  }
  if (n > 0 && t.size[0] !== n) throw bad('root');
  return t;
}

// fetchTree gets path's tree (/api/flamegraph or /api/diff) in the compact
// encoding, or throws an Error carrying the API's error message. Once the
// body has arrived, before it is decoded, it sets the performance mark
// "received PATH", from which measureDraw times the drawing.
export async function fetchTree(path, params, signal) {
  const p = new URLSearchParams(params);
  p.set('encoding', 'compact');
  return decodeTree(await getBinary(path, p, signal));
}

// FRAME_KINDS are the kinds of frame, each with the name the legend gives
// it and its colours: a hue range, saturation and lightness range, a
// frame's place in them set by its name, so neighbours of one kind differ
// a little and a kind's frames share a colour family.
// Native code is red and kernel code orange, as FlameGraph's java palette
// has them, apart enough to tell in the legend.
export const FRAME_KINDS = [
  { kind: 'kernel', name: 'kernel', hue: [30, 12], sat: 85, light: [55, 8] },
  { kind: 'user', name: 'native', hue: [0, 14], sat: 75, light: [60, 10] },
  { kind: 'jit', name: 'JIT', hue: [110, 30], sat: 55, light: [55, 10] },
  { kind: 'python', name: 'Python', hue: [200, 20], sat: 70, light: [60, 10] },
  { kind: 'unknown', name: 'unknown', hue: [0, 0], sat: 0, light: [75, 10] },
];
const KIND_STYLE = new Map(FRAME_KINDS.map((k) => [k.kind, k]));

// kindName is the name every view gives a kind (the legend's: the API's
// kind user is native code, "native"); a kind that is no frame's (root,
// process, group) or not known here keeps its own.
export function kindName(kind) {
  const k = KIND_STYLE.get(kind);
  return k ? k.name : kind;
}

// kindColour is the colour of a frame of kind at v (0 to 1) in its range;
// the middle of the range (v = 0.5) is what the legend shows. A kind not
// known here is coloured as native.
export function kindColour(kind, v = 0.5) {
  const k = KIND_STYLE.get(kind) || KIND_STYLE.get('user');
  return `hsl(${k.hue[0] + v * k.hue[1]}, ${k.sat}%, ${k.light[0] + v * k.light[1]}%)`;
}

// colour gives a stable colour per frame name and kind.
function colour(name, kind) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  const v = (h % 1000) / 1000;
  switch (kind) {
    case 'root': return '#c8c8c8';
    case 'process': return `hsl(220, 15%, ${70 + v * 10}%)`;
    case 'group': return `hsl(280, 30%, ${72 + v * 10}%)`;
    default: return kindColour(kind, v);
  }
}

// drawKindLegend fills el with a swatch and name per kind of frame,
// "colour: kind of frame ■ kernel ■ native ■ JIT ■ Python ■ unknown",
// each swatch's data-kind its kind and its colour kindColour's middle.
export function drawKindLegend(el) {
  const caption = document.createElement('span');
  caption.className = 'legend-caption';
  caption.textContent = 'colour: kind of frame';
  const items = FRAME_KINDS.map((k) => {
    const item = document.createElement('span');
    item.className = 'kind-item';
    const swatch = document.createElement('span');
    swatch.className = 'swatch';
    swatch.dataset.kind = k.kind;
    swatch.style.background = kindColour(k.kind);
    item.append(swatch, k.name);
    return item;
  });
  el.replaceChildren(caption, ...items);
}

// diffColour is red for frames with more CPU time in A than in B (B
// scaled as asked), blue for less, white for none, stronger as the change
// grows relative to the frame.
function diffColour(a, deltaTotal) {
  const t = Math.min(1, Math.abs(deltaTotal) / Math.max(1, a));
  const fade = Math.round(255 - t * 200);
  if (deltaTotal > 0) return `rgb(255,${fade},${fade})`;
  if (deltaTotal < 0) return `rgb(${fade},${fade},255)`;
  return '#f4f4f4';
}

export class FlameGraph {
  constructor(canvas, namesList, onChange) {
    this.canvas = canvas;
    this.namesList = namesList; // a hidden list of the drawn frame names, for tests
    this.onChange = onChange; // called after zoom or search changes
    this.tree = null; // decodeTree's answer
    this.zoom = null; // the zoomed node, or null
    this.zoomPath = []; // the zoomed node's ancestors, root first
    this.search = null;
    this.hits = null; // per name: 0 not tested yet, 1 no match, 2 match
    this.colours = new Map(); // name and kind -> colour
    this.icicle = false;
    this.rects = [];
    canvas.addEventListener('mousemove', (ev) => this.move(ev));
    canvas.addEventListener('mouseleave', () => hideTooltip());
    canvas.addEventListener('click', (ev) => this.click(ev));
    window.addEventListener('resize', () => this.draw());
  }

  // set shows a tree: a flame graph, or a differential one whose widths
  // are A's CPU time.
  set(tree) {
    this.tree = tree;
    this.hits = new Uint8Array(tree.names.length);
    this.colours = new Map();
    this.zoom = null;
    this.zoomPath = [];
    this.draw();
  }

  get diff() {
    return this.tree !== null && this.tree.diff;
  }

  name(i) {
    return this.tree.names[this.tree.name[i]];
  }

  kind(i) {
    return this.tree.kinds[this.tree.kind[i]];
  }

  // value is node i's width: its CPU time in seconds, or A's in
  // nanoseconds in a differential graph.
  value(i) {
    return this.diff ? this.tree.a[i] : this.tree.cpu[i];
  }

  // format writes a value (of value or total) as CPU time with its unit.
  format(v) {
    return formatCPU(this.diff ? v / 1e9 : v);
  }

  // total is the value of the whole graph.
  total() {
    return this.tree && this.tree.n > 0 ? this.value(0) : 0;
  }

  setSearch(re) {
    this.search = re;
    if (this.tree) this.hits = new Uint8Array(this.tree.names.length);
    this.draw();
  }

  // hit says whether node i matches the search (never the root); each
  // distinct name is tested once.
  hit(i) {
    if (!this.search || this.tree.kinds[this.tree.kind[i]] === 'root') return false;
    const id = this.tree.name[i];
    if (this.hits[id] === 0) this.hits[id] = this.search.test(this.tree.names[id]) ? 2 : 1;
    return this.hits[id] === 2;
  }

  reset() {
    this.zoom = null;
    this.zoomPath = [];
    this.draw();
  }

  // matched sums the value through frames matching the search, not
  // counting again a match under another: a match's subtree is skipped.
  matched() {
    if (!this.tree || !this.search) return 0;
    const { n, size } = this.tree;
    let s = 0;
    for (let i = 0; i < n;) {
      if (this.hit(i)) {
        s += this.value(i);
        i += size[i];
      } else {
        i++;
      }
    }
    return s;
  }

  colour(i) {
    const t = this.tree;
    if (t.diff) return diffColour(t.a[i], t.deltaTotal[i]);
    const key = t.name[i] * 256 + t.kind[i];
    let c = this.colours.get(key);
    if (c === undefined) {
      c = colour(t.names[t.name[i]], t.kinds[t.kind[i]]);
      this.colours.set(key, c);
    }
    return c;
  }

  draw() {
    const t = this.tree;
    const width = Math.max(200, this.canvas.parentElement.clientWidth - 2);
    if (!t || t.n === 0) {
      sizeCanvas(this.canvas, width, ROW);
      this.rects = [];
      this.namesList.replaceChildren();
      return;
    }
    const zoom = this.zoom === null ? 0 : this.zoom;
    // Lay out the frames wide enough to see first (at least 0.3 px), so
    // that the canvas is as tall as what is drawn: the deepest stacks are
    // often too narrow to show, and sizing for them left a tall empty
    // canvas with the flame graph at its bottom.
    const boxes = []; // {i, d, x, w, parent}
    const lay = (i, d, x, w, parent) => {
      boxes.push({ i, d, x, w, parent });
      return boxes.length - 1;
    };
    // the zoomed frame's ancestors span the whole width
    let parent = -1;
    this.zoomPath.forEach((a, d) => { parent = lay(a, d, 0, width, parent); });
    const vals = t.diff ? t.a : t.cpu;
    const size = t.size;
    const scale = vals[zoom] > 0 ? width / vals[zoom] : 0;
    let deepest = 0;
    const walk = (i, d, x, p) => {
      const w = vals[i] * scale;
      if (w < 0.3) return;
      const b = lay(i, d, x, w, p);
      deepest = Math.max(deepest, d);
      let cx = x;
      for (let c = i + 1, end = i + size[i]; c < end; c += size[c]) {
        walk(c, d + 1, cx, b);
        cx += vals[c] * scale;
      }
    };
    walk(zoom, this.zoomPath.length, 0, parent);
    const height = (deepest + 1) * ROW;
    const ctx = sizeCanvas(this.canvas, width, height);
    ctx.clearRect(0, 0, width, height);
    ctx.font = '11px ui-monospace, monospace';
    ctx.textBaseline = 'middle';
    this.rects = [];
    const names = new Set();
    const kinds = new Set();
    for (const { i, d, x, w, parent: p } of boxes) {
      const y = this.icicle ? d * ROW : height - (d + 1) * ROW;
      ctx.fillStyle = this.hit(i) ? '#e040fb' : this.colour(i);
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
      const label = trimText(ctx, this.name(i), w - 6);
      if (label) {
        ctx.fillStyle = '#111';
        ctx.fillText(label, x + 3, y + ROW / 2);
      }
      this.rects.push({ x, y, w, node: i, parent: p });
      names.add(t.name[i]);
      kinds.add(this.kind(i));
    }
    this.canvas.dataset.depth = String(deepest);
    // the kinds of frame drawn, for the legend and tests
    this.canvas.dataset.kinds = [...kinds].filter((k) => KIND_STYLE.has(k)).sort().join(' ');
    // the frame names drawn, as text, for tests and assistive tools
    const items = [...names].map((id) => t.names[id]).sort().map((name) => {
      const li = document.createElement('li');
      li.textContent = name;
      return li;
    });
    this.namesList.replaceChildren(...items);
    this.canvas.dataset.draws = String(Number(this.canvas.dataset.draws || 0) + 1);
    if (this.onChange) this.onChange();
  }

  // boxAt returns the index of the box under the pointer, or -1.
  boxAt(ev) {
    const r = this.canvas.getBoundingClientRect();
    const x = ev.clientX - r.left;
    const y = ev.clientY - r.top;
    for (let i = this.rects.length - 1; i >= 0; i--) {
      const b = this.rects[i];
      if (x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + ROW) return i;
    }
    return -1;
  }

  move(ev) {
    const j = this.boxAt(ev);
    if (j < 0) return hideTooltip();
    const i = this.rects[j].node;
    const t = this.tree;
    if (t.diff) {
      const f = (ns) => formatCPU(ns / 1e9);
      const change = (ns) => formatChange(ns / 1e9);
      return showTooltip(ev, `${this.name(i)}\n${kindName(this.kind(i))}: A ${f(t.a[i])} (${pct(t.a[i], t.totalA)}), B ${f(t.b[i])} (${pct(t.b[i], t.totalB)}) of CPU time\n` +
        `change ${change(t.deltaTotal[i])} (self: A ${f(t.selfA[i])}, B ${f(t.selfB[i])}, change ${change(t.delta[i])})`);
    }
    // How the frame was found, when the stacks were walked with unwind
    // tables and some of its samples reached it by frame pointers (which
    // a binary built without them gets wrong); nothing when not known.
    const fp = t.fp[i] > 0 ? `\nreached by frame pointers: ${pct(t.fp[i], t.value[i])} of its samples` : '';
    showTooltip(ev, `${this.name(i)}\n${kindName(this.kind(i))}: ${formatCPU(t.cpu[i])} of CPU time (${pct(t.cpu[i], this.total())}), ` +
      `self ${formatCPU(t.selfCpu[i])} (${pct(t.selfCpu[i], this.total())})\n${t.value[i]} samples, self ${t.self[i]}${fp}`);
  }

  click(ev) {
    const j = this.boxAt(ev);
    if (j < 0) return;
    const path = [];
    for (let k = j; k >= 0; k = this.rects[k].parent) path.unshift(this.rects[k].node);
    const i = path.pop();
    this.zoom = this.kind(i) === 'root' ? null : i;
    this.zoomPath = this.zoom === null ? [] : path;
    this.draw();
  }
}
