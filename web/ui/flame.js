// The flame graph on canvas: click a frame to zoom into it, search with a
// regular expression (matches highlighted, their share of samples shown),
// flame (root at the bottom) or icicle (root at the top). A differential
// flame graph (from /api/diff) is drawn with A's counts as widths and
// coloured by the normalised change against B.
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
    case 'group': return `hsl(280, 30%, ${72 + v * 10}%)`;
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
  const t = Math.min(1, Math.abs(node.deltaTotal) / Math.max(1, node.value));
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
    this.zoom = null;
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
    const prep = (n) => {
      n.value = n.a;
      n.self = n.selfA;
      for (const c of n.children || []) prep(c);
    };
    prep(d.root);
    this.diff = { totalA: d.totalA, totalB: d.totalB };
    this.show(d.root);
  }

  show(root) {
    this.root = root;
    link(root, null, 0);
    this.zoom = null;
    this.draw();
  }

  setSearch(re) {
    this.search = re;
    this.draw();
  }

  reset() {
    this.zoom = null;
    this.draw();
  }

  // matched counts the samples through frames matching the search, not
  // counting again a match under another.
  matched() {
    if (!this.root || !this.search) return 0;
    const walk = (n) => {
      if (n.kind !== 'root' && this.search.test(n.name)) return n.value;
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
    const depth = maxDepth(root);
    const height = (depth + 1) * ROW;
    const ctx = sizeCanvas(this.canvas, width, height);
    ctx.clearRect(0, 0, width, height);
    ctx.font = '11px ui-monospace, monospace';
    ctx.textBaseline = 'middle';
    this.rects = [];
    const names = new Set();
    const yOf = (d) => (this.icicle ? d * ROW : height - (d + 1) * ROW);
    const box = (n, x, w) => {
      const y = yOf(n.depth);
      const hit = this.search && n.kind !== 'root' && this.search.test(n.name);
      ctx.fillStyle = hit ? '#e040fb' : this.diff ? diffColour(n) : colour(n);
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
      const label = trimText(ctx, n.name, w - 6);
      if (label) {
        ctx.fillStyle = '#111';
        ctx.fillText(label, x + 3, y + ROW / 2);
      }
      this.rects.push({ x, y, w, node: n });
      names.add(n.name);
    };
    // the zoomed frame's ancestors span the whole width
    for (let a = zoom.parent; a; a = a.parent) box(a, 0, width);
    const scale = width / Math.max(1, zoom.value);
    const walk = (n, x) => {
      const w = n.value * scale;
      if (w < 0.3) return;
      box(n, x, w);
      let cx = x;
      for (const c of n.children || []) {
        walk(c, cx);
        cx += c.value * scale;
      }
    };
    walk(zoom, 0);
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

  at(ev) {
    const r = this.canvas.getBoundingClientRect();
    const x = ev.clientX - r.left;
    const y = ev.clientY - r.top;
    for (let i = this.rects.length - 1; i >= 0; i--) {
      const b = this.rects[i];
      if (x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + ROW) return b.node;
    }
    return null;
  }

  move(ev) {
    const n = this.at(ev);
    if (!n) return hideTooltip();
    const total = this.root.value;
    if (this.diff) {
      const sign = (v) => (v > 0 ? '+' + v : String(v));
      return showTooltip(ev, `${n.name}\n${n.kind}: A ${n.a} (${pct(n.a, this.diff.totalA)}), B ${n.b} (${pct(n.b, this.diff.totalB)})\n` +
        `delta ${sign(n.deltaTotal)} (self: A ${n.selfA}, B ${n.selfB}, delta ${sign(n.delta)})`);
    }
    showTooltip(ev, `${n.name}\n${n.kind}: ${n.value} samples (${pct(n.value, total)}), self ${n.self}`);
  }

  click(ev) {
    const n = this.at(ev);
    if (!n) return;
    this.zoom = n.kind === 'root' ? null : n;
    this.draw();
  }
}

function link(n, parent, depth) {
  n.parent = parent;
  n.depth = depth;
  for (const c of n.children || []) link(c, n, depth + 1);
}

function maxDepth(n) {
  let d = n.depth;
  for (const c of n.children || []) d = Math.max(d, maxDepth(c));
  return d;
}
