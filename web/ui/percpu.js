// The per-CPU view: samples per CPU (y) per time step (x) over the
// heatmap's span, in the heatmap's colour scale, so that one saturated CPU
// stands out where the heatmap averages it with the others.
import { sizeCanvas, showTooltip, hideTooltip, formatTime, heatColour } from './util.js';
import { formatCPU } from './legend.js';

const LEFT = 44; // room for the CPU labels
const LEFT_NODES = 130; // room for the node and CPU labels
const TOP = 4;
const BOTTOM = 18; // room for the time labels

export class PerCPU {
  constructor(canvas) {
    this.canvas = canvas;
    this.data = null;
    this.enhanced = false;
    canvas.addEventListener('mousemove', (ev) => this.move(ev));
    canvas.addEventListener('mouseleave', () => hideTooltip());
    window.addEventListener('resize', () => this.draw());
  }

  set(data) {
    this.data = data;
    this.draw();
  }

  // layout gives the cell size from the box's width and the CPU count.
  layout() {
    const d = this.data;
    const cpus = d.cpus.length;
    const steps = cpus ? d.counts[0].length : 0;
    // rows of several nodes are labelled with their node too
    const left = (d.nodes || []).some((n) => n !== d.nodes[0]) ? LEFT_NODES : LEFT;
    const avail = Math.max(200, this.canvas.parentElement.clientWidth - 2) - left - 8;
    const cellW = Math.max(1, Math.min(24, avail / Math.max(1, steps)));
    const cellH = Math.max(2, Math.min(16, Math.floor(320 / Math.max(1, cpus))));
    return { cpus, steps, cellW, cellH, left, width: left + steps * cellW + 8, height: TOP + Math.max(1, cpus) * cellH + BOTTOM };
  }

  draw() {
    const d = this.data;
    if (!d) return;
    const L = this.layout();
    const cv = this.canvas;
    Object.assign(cv.dataset, { cpus: L.cpus, steps: L.steps, cellW: L.cellW, cellH: L.cellH, left: L.left, top: TOP });
    const ctx = sizeCanvas(cv, Math.max(L.width, 200), L.height);
    ctx.clearRect(0, 0, L.width, L.height);
    // colour is CPU time (d.unit), not samples: a rate change keeps it
    let max = Number.MIN_VALUE;
    for (const row of d.cpu) for (const v of row) max = Math.max(max, v);
    for (let i = 0; i < L.cpus; i++) {
      const row = d.cpu[i];
      for (let j = 0; j < L.steps; j++) {
        ctx.fillStyle = heatColour(row[j], max, this.enhanced);
        // cells overlap by a fraction of a pixel so that narrow ones leave no gaps
        ctx.fillRect(L.left + j * L.cellW, TOP + i * L.cellH, L.cellW + 0.5, L.cellH);
      }
    }
    ctx.fillStyle = '#555';
    ctx.font = '10px sans-serif';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    if (!L.cpus) {
      ctx.textAlign = 'left';
      ctx.fillText('no samples', L.left, TOP + L.cellH / 2);
    }
    const labelEvery = Math.max(1, Math.ceil(12 / L.cellH));
    for (let i = 0; i < L.cpus; i += labelEvery) {
      ctx.fillText(rowName(d, i), L.left - 4, TOP + i * L.cellH + L.cellH / 2, L.left - 6);
    }
    ctx.textAlign = 'left';
    ctx.textBaseline = 'top';
    const every = Math.max(1, Math.ceil(60 / L.cellW));
    for (let j = 0; j < L.steps; j += every) {
      const t = j * d.step;
      ctx.fillText('+' + (Math.round(t * 1000) / 1000) + 's', L.left + j * L.cellW, TOP + Math.max(1, L.cpus) * L.cellH + 3);
    }
    cv.dataset.max = String(max);
    cv.dataset.draws = String(Number(cv.dataset.draws || 0) + 1);
  }

  // cellAt returns [cpu index, step index] under the pointer, or null.
  cellAt(ev) {
    if (!this.data) return null;
    const L = this.layout();
    const rect = this.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left - L.left;
    const y = ev.clientY - rect.top - TOP;
    const j = Math.floor(x / L.cellW);
    const i = Math.floor(y / L.cellH);
    if (x < 0 || y < 0 || i >= L.cpus || j >= L.steps) return null;
    return [i, j];
  }

  move(ev) {
    const cell = this.cellAt(ev);
    if (!cell) return hideTooltip();
    const [i, j] = cell;
    const d = this.data;
    const t = d.start + j * d.step;
    showTooltip(ev, `${rowName(d, i)}\ntime: ${formatTime(t)} + ${d.step} s\nCPU time: ${formatCPU(d.cpu[i][j])} (${d.counts[i][j]} samples)`);
  }
}

// rowName names row i: its CPU, and its node when the rows come from
// several nodes (each node's CPU is a row of its own, never added into
// another node's).
function rowName(d, i) {
  const nodes = d.nodes || [];
  const several = nodes.some((n) => n !== nodes[0]);
  return several ? `${nodes[i]} CPU ${d.cpus[i]}` : `CPU ${d.cpus[i]}`;
}
