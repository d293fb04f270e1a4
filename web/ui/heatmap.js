// The subsecond heatmap (FlameScope semantics): one column per second, one
// row per slice of the second, row 0 at the top (the highest offset).
// Clicking a start cell then an end cell selects the time from the start
// cell's start to the end cell's end; time runs bottom to top within a
// column, then on to the next column. In compare mode ('b') the clicks
// select the baseline, drawn in orange, instead.
import { sizeCanvas, showTooltip, hideTooltip, formatTime, heatColour } from './util.js';
import { MARKER_COLOUR } from './events.js';
import { formatCPU } from './legend.js';

const LEFT = 44; // room for the offset labels
const TOP = 4;
const BOTTOM = 18; // room for the second labels
const EPS = 1e-7;

export class Heatmap {
  constructor(canvas, onSelect) {
    this.canvas = canvas;
    this.onSelect = onSelect; // called with [from, to] in Unix seconds, or null, and 'a' or 'b'
    this.data = null;
    this.enhanced = false;
    this.selection = null;
    this.selection2 = null; // the baseline in compare mode
    this.mode = 'a'; // which selection clicks make
    this.pending = null; // the start cell [column, row] of a selection being made
    this.hover = null;
    this.events = []; // event times (Unix seconds): a line down the event's column, a mark at its row
    canvas.addEventListener('mousemove', (ev) => this.move(ev));
    canvas.addEventListener('mouseleave', () => { this.hover = null; hideTooltip(); this.draw(); });
    canvas.addEventListener('click', (ev) => this.click(ev));
    window.addEventListener('resize', () => this.draw());
  }

  set(data, selection, selection2) {
    this.data = data;
    this.selection = selection;
    this.selection2 = selection2 || null;
    this.pending = null;
    this.draw();
  }

  // layout gives the cell size, computed from the box's width: cells grow
  // to fill it, so that a short source (a 6-second import) is as wide as a
  // long one. The canvas publishes it as data attributes (tests click
  // cells with them).
  layout() {
    const d = this.data;
    const cols = d.columns.length;
    const rows = d.rows.length;
    const avail = Math.max(200, this.canvas.parentElement.clientWidth - 2) - LEFT - 8;
    const cellW = Math.max(1, Math.floor(avail / Math.max(1, cols)));
    const cellH = Math.max(3, Math.min(16, Math.floor(400 / rows)));
    return { cols, rows, cellW, cellH, left: LEFT, top: TOP, width: LEFT + cols * cellW + 8, height: TOP + rows * cellH + BOTTOM };
  }

  // cellRange is a cell's [start, end) in Unix seconds.
  cellRange(c, r) {
    const d = this.data;
    const slice = 1000 / d.rows.length;
    const start = d.start + d.columns[c] + d.rows[r] / 1000;
    return [start, start + slice / 1000];
  }

  colour(v, max) {
    return heatColour(v, max, this.enhanced);
  }

  selected(c, r, s) {
    if (!s) return false;
    const [a, b] = this.cellRange(c, r);
    return a >= s[0] - EPS && b <= s[1] + EPS;
  }

  draw() {
    const d = this.data;
    if (!d) return;
    const L = this.layout();
    const cv = this.canvas;
    Object.assign(cv.dataset, { cols: L.cols, rows: L.rows, cellW: L.cellW, cellH: L.cellH, left: L.left, top: L.top });
    const ctx = sizeCanvas(cv, L.width, L.height);
    ctx.clearRect(0, 0, L.width, L.height);
    // colour is CPU time (d.unit), not samples: a rate change keeps it
    const max = d.maxcpu > 0 ? d.maxcpu : 1;
    for (let c = 0; c < L.cols; c++) {
      const col = d.cpu[c];
      for (let r = 0; r < L.rows; r++) {
        ctx.fillStyle = this.colour(col[r], max);
        ctx.fillRect(L.left + c * L.cellW, L.top + r * L.cellH, L.cellW, L.cellH);
      }
    }
    // the selection: a translucent blue over its cells; the baseline orange
    for (const [sel, fill] of [[this.selection, 'rgba(40, 100, 220, 0.45)'], [this.selection2, 'rgba(240, 150, 20, 0.5)']]) {
      if (!sel) continue;
      ctx.fillStyle = fill;
      for (let c = 0; c < L.cols; c++) {
        for (let r = 0; r < L.rows; r++) {
          if (this.selected(c, r, sel)) ctx.fillRect(L.left + c * L.cellW, L.top + r * L.cellH, L.cellW, L.cellH);
        }
      }
    }
    const outline = (cell, colour) => {
      ctx.strokeStyle = colour;
      ctx.lineWidth = 2;
      ctx.strokeRect(L.left + cell[0] * L.cellW + 1, L.top + cell[1] * L.cellH + 1, Math.max(1, L.cellW - 2), Math.max(1, L.cellH - 2));
    };
    let markers = 0;
    for (const t of this.events) {
      const cell = this.cellOf(t);
      if (!cell) continue;
      markers++;
      const x = L.left + cell[0] * L.cellW;
      ctx.fillStyle = MARKER_COLOUR;
      ctx.fillRect(x + Math.floor(L.cellW / 2) - 1, L.top, 2, L.rows * L.cellH);
      ctx.strokeStyle = MARKER_COLOUR;
      ctx.lineWidth = 2;
      ctx.strokeRect(x - 1, L.top + cell[1] * L.cellH - 1, L.cellW + 2, L.cellH + 2);
    }
    cv.dataset.markers = String(markers);
    if (this.pending) outline(this.pending, '#1a5fd0');
    if (this.hover) outline(this.hover, '#000');
    // axes: offsets on the left, seconds below
    ctx.fillStyle = '#555';
    ctx.font = '10px sans-serif';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    const labelEvery = Math.max(1, Math.ceil(12 / L.cellH));
    for (let r = 0; r < L.rows; r += labelEvery) {
      ctx.fillText(Math.round(d.rows[r]) + ' ms', L.left - 4, L.top + r * L.cellH + L.cellH / 2);
    }
    ctx.textAlign = 'left';
    ctx.textBaseline = 'top';
    const colEvery = Math.max(1, Math.ceil(40 / L.cellW));
    for (let c = 0; c < L.cols; c += colEvery) {
      ctx.fillText(String(d.columns[c]) + 's', L.left + c * L.cellW, L.top + L.rows * L.cellH + 3);
    }
    cv.dataset.draws = String(Number(cv.dataset.draws || 0) + 1);
  }

  // cellOf returns the [column, row] of the cell holding time t, or null.
  cellOf(t) {
    const d = this.data;
    const c = d.columns.indexOf(Math.floor(t - d.start));
    if (c < 0) return null;
    const offset = (t - Math.floor(t)) * 1000;
    const slice = 1000 / d.rows.length;
    const r = d.rows.findIndex((ms) => offset >= ms - 1e-6 && offset < ms + slice - 1e-6);
    return r < 0 ? null : [c, r];
  }

  cellAt(ev) {
    if (!this.data) return null;
    const L = this.layout();
    const rect = this.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left - L.left;
    const y = ev.clientY - rect.top - L.top;
    const c = Math.floor(x / L.cellW);
    const r = Math.floor(y / L.cellH);
    if (x < 0 || y < 0 || c >= L.cols || r >= L.rows) return null;
    return [c, r];
  }

  move(ev) {
    const cell = this.cellAt(ev);
    const same = cell && this.hover && cell[0] === this.hover[0] && cell[1] === this.hover[1];
    if (!same) {
      this.hover = cell;
      this.draw();
    }
    if (!cell) return hideTooltip();
    const [c, r] = cell;
    const d = this.data;
    const [a] = this.cellRange(c, r);
    const slice = 1000 / d.rows.length;
    showTooltip(ev, `time: ${formatTime(a)} (second ${d.columns[c]})\n` +
      `offset: ${d.rows[r].toFixed(1)}–${(d.rows[r] + slice).toFixed(1)} ms\nCPU time: ${formatCPU(d.cpu[c][r])} (${d.values[c][r]} samples)`);
  }

  click(ev) {
    const cell = this.cellAt(ev);
    if (!cell) return;
    if (!this.pending) {
      this.pending = cell;
      this.draw();
      return;
    }
    let [a0, a1] = this.cellRange(...this.pending);
    let [b0, b1] = this.cellRange(...cell);
    this.pending = null;
    const sel = [Math.min(a0, b0), Math.max(a1, b1)];
    if (this.mode === 'b') this.selection2 = sel;
    else this.selection = sel;
    this.draw();
    this.onSelect(sel, this.mode);
  }

  clear() {
    const had = this.selection || this.selection2 || this.pending;
    this.pending = null;
    this.selection = this.selection2 = null;
    this.draw();
    if (had) this.onSelect(null, 'a');
  }
}
