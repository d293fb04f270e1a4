// The flame graph on canvas: click a frame to zoom into it, search with a
// regular expression (matches highlighted, their share of samples shown),
// flame (root at the bottom) or icicle (root at the top). A differential
// flame graph (from /api/diff) is drawn with A's counts as widths and
// coloured by the normalised change against B.
//
// Trees run to hundreds of thousands of nodes (50 000 distinct stacks are
// about 300 000), so the nodes are left as JSON.parse made them, never
// extended (adding properties to that many objects costs more than the
// parse), and a draw visits only the frames wide enough to see.
import { sizeCanvas, showTooltip, hideTooltip, pct, trimText } from './util.js';

const ROW = 17;

// hue gives a stable colour per frame name and kind.
function colour(node) {
  let h = 0;
  for (let i = 0; i < node.name.length; i++) h = (h * 31 + node.name.charCodeAt(i)) >>> 0;
  const v = (h % 1000) / 1000;
  switch (node.kind) {
    case 'root': return '#c8c8c8';
    case 'process': return `hsl(220, 15%, ${70 + v * 10}%)`;
    case 'kernel': return `hsl(${25 + v * 15}, 80%, ${58 + v * 8}%)`;
    case 'jit': return `hsl(${110 + v * 30}, 55%, ${55 + v * 10}%)`;
    case 'unknown': return `hsl(0, 0%, ${75 + v * 10}%)`;
    default: return `hsl(${v * 50}, 85%, ${55 + v * 10}%)`;
  }
}

// diffColour is red for frames with more samples in A than B (scaled to
// A's total), blue for fewer, white for none, stronger as the change
// grows relative to the frame.
function diffColour(node) {
  const t = Math.min(1, Math.abs(node.deltaTotal) / Math.max(1, node.a));
  const fade = Math.round(255 - t * 200);
  if (node.deltaTotal > 0) return `rgb(255,${fade},${fade})`;
  if (node.deltaTotal < 0) return `rgb(${fade},${fade},255)`;
  return '#f4f4f4';
}

export class FlameGraph {
  constructor(canvas, namesList, onChange) {
    this.canvas = canvas;
    this.namesList = namesList; // a hidden list of the drawn frame names, for tests
    this.onChange = onChange; // called after zoom or search changes
    this.root = null;
    this.depth = 0; // the tree's depth, the root's 0
    this.zoom = null; // the zoomed frame, or null
    this.zoomPath = []; // the zoomed frame's ancestors, root first
    this.search = null;
    this.icicle = false;
    this.diff = null; // {totalA, totalB} when the graph is a differential
    this.rects = [];
    canvas.addEventListener('mousemove', (ev) => this.move(ev));
    canvas.addEventListener('mouseleave', () => hideTooltip());
    canvas.addEventListener('click', (ev) => this.click(ev));
    window.addEventListener('resize', () => this.draw());
  }

  set(root) {
    this.diff = null;
    this.show(root);
  }

  // setDiff shows a differential flame graph, /api/diff's answer: widths
  // are A's counts.
  setDiff(d) {
    this.diff = { totalA: d.totalA, totalB: d.totalB };
    this.show(d.root);
  }

  show(root) {
    this.root = root;
    this.depth = maxDepth(root);
    this.zoom = null;
    this.zoomPath = [];
    this.draw();
  }

  // value is a node's width in samples: A's in a differential graph.
  value(n) {
    return this.diff ? n.a : n.value;
  }

  // total is the samples of the whole graph.
  total() {
    return this.root ? this.value(this.root) : 0;
  }

  setSearch(re) {
    this.search = re;
    this.draw();
  }

  reset() {
    this.zoom = null;
    this.zoomPath = [];
    this.draw();
  }

  // matched counts the samples through frames matching the search, not
  // counting again a match under another.
  matched() {
    if (!this.root || !this.search) return 0;
    const walk = (n) => {
      if (n.kind !== 'root' && this.search.test(n.name)) return this.value(n);
      let s = 0;
      for (const c of n.children || []) s += walk(c);
      return s;
    };
    return walk(this.root);
  }

  draw() {
    const root = this.root;
    const width = Math.max(200, this.canvas.parentElement.clientWidth - 2);
    if (!root) {
      sizeCanvas(this.canvas, width, ROW);
      return;
    }
    const zoom = this.zoom || root;
    const height = (this.depth + 1) * ROW;
    const ctx = sizeCanvas(this.canvas, width, height);
    ctx.clearRect(0, 0, width, height);
    ctx.font = '11px ui-monospace, monospace';
    ctx.textBaseline = 'middle';
    this.rects = [];
    const names = new Set();
    const yOf = (d) => (this.icicle ? d * ROW : height - (d + 1) * ROW);
    // box draws node n at depth d; parent is the index of its parent's box
    const box = (n, d, x, w, parent) => {
      const y = yOf(d);
      const hit = this.search && n.kind !== 'root' && this.search.test(n.name);
      ctx.fillStyle = hit ? '#e040fb' : this.diff ? diffColour(n) : colour(n);
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
      const label = trimText(ctx, n.name, w - 6);
      if (label) {
        ctx.fillStyle = '#111';
        ctx.fillText(label, x + 3, y + ROW / 2);
      }
      this.rects.push({ x, y, w, node: n, parent });
      names.add(n.name);
      return this.rects.length - 1;
    };
    // the zoomed frame's ancestors span the whole width
    let parent = -1;
    this.zoomPath.forEach((a, d) => { parent = box(a, d, 0, width, parent); });
    const scale = width / Math.max(1, this.value(zoom));
    const walk = (n, d, x, p) => {
      const w = this.value(n) * scale;
      if (w < 0.3) return;
      const i = box(n, d, x, w, p);
      let cx = x;
      for (const c of n.children || []) {
        walk(c, d + 1, cx, i);
        cx += this.value(c) * scale;
      }
    };
    walk(zoom, this.zoomPath.length, 0, parent);
    // the frame names drawn, as text, for tests and assistive tools
    const items = [...names].sort().map((name) => {
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
    const i = this.boxAt(ev);
    if (i < 0) return hideTooltip();
    const n = this.rects[i].node;
    const total = this.total();
    if (this.diff) {
      const sign = (v) => (v > 0 ? '+' + v : String(v));
      return showTooltip(ev, `${n.name}\n${n.kind}: A ${n.a} (${pct(n.a, this.diff.totalA)}), B ${n.b} (${pct(n.b, this.diff.totalB)})\n` +
        `delta ${sign(n.deltaTotal)} (self: A ${n.selfA}, B ${n.selfB}, delta ${sign(n.delta)})`);
    }
    showTooltip(ev, `${n.name}\n${n.kind}: ${n.value} samples (${pct(n.value, total)}), self ${n.self}`);
  }

  click(ev) {
    const i = this.boxAt(ev);
    if (i < 0) return;
    const path = [];
    for (let j = i; j >= 0; j = this.rects[j].parent) path.unshift(this.rects[j].node);
    const n = path.pop();
    this.zoom = n.kind === 'root' ? null : n;
    this.zoomPath = this.zoom ? path : [];
    this.draw();
  }
}

// maxDepth is the depth of the tree under n (0 for a leaf).
function maxDepth(n) {
  let d = 0;
  for (const c of n.children || []) d = Math.max(d, 1 + maxDepth(c));
  return d;
}
