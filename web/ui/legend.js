// The colour legend of the heatmap and the per-CPU view: their colour
// scale from none to the largest value, with what the colour measures and
// its unit, as the API reports it.
import { sizeCanvas, heatColour } from './util.js';

const BAR_W = 160;
const BAR_H = 12;

// formatCPU writes a CPU time in seconds with its unit: s, ms or µs, three
// significant digits.
export function formatCPU(sec) {
  if (!(sec > 0)) return '0 s';
  // the largest unit in which the rounded value is at least 1 (999.999 ms
  // is 1 s, not 1000 ms)
  for (const [unit, scale] of [['s', 1], ['ms', 1e3]]) {
    const v = +(sec * scale).toPrecision(3);
    if (v >= 1) return `${v} ${unit}`;
  }
  return `${+(sec * 1e6).toPrecision(3)} µs`;
}

// formatSignedCPU writes a CPU time in seconds that may be negative with
// its unit, a minus sign before a negative one.
export function formatSignedCPU(sec) {
  return sec < 0 ? '−' + formatCPU(-sec) : formatCPU(sec);
}

// formatChange writes a change of CPU time in seconds with its unit: a
// plus sign for growth, a minus sign for a fall.
export function formatChange(sec) {
  if (sec > 0) return '+' + formatCPU(sec);
  return sec < 0 ? '−' + formatCPU(-sec) : '0 s';
}

// drawLegend fills a legend box (a .legend element holding a
// .legend-caption, .legend-lo, canvas.legend-bar and .legend-hi) with the
// scale from 0 to max: caption says what the colour measures, hi labels
// the darkest colour. The box publishes max for tests.
export function drawLegend(box, { caption, max, hi, enhanced }) {
  box.querySelector('.legend-caption').textContent = caption;
  box.querySelector('.legend-lo').textContent = '0';
  box.querySelector('.legend-hi').textContent = hi;
  const canvas = box.querySelector('canvas.legend-bar');
  const ctx = sizeCanvas(canvas, BAR_W, BAR_H);
  for (let x = 0; x < BAR_W; x++) {
    // the same scale as the cells: x = BAR_W - 1 is max
    ctx.fillStyle = heatColour((max * x) / (BAR_W - 1), max, enhanced);
    ctx.fillRect(x, 0, 1, BAR_H);
  }
  ctx.strokeStyle = '#bbb';
  ctx.strokeRect(0.5, 0.5, BAR_W - 1, BAR_H - 1);
  box.dataset.max = String(max);
  box.hidden = false;
}
