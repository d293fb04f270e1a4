// The overview timeline: samples per step over the source's whole range,
// drawn as bars; dragging picks the span the heatmap shows.
import { sizeCanvas, showTooltip, hideTooltip, formatTime } from './util.js';
import { MARKER_COLOUR } from './events.js';

const HEIGHT = 70;

export class Timeline {
  constructor(canvas, onSpan) {
    this.canvas = canvas;
    this.onSpan = onSpan; // called with (from, to) in Unix seconds
    this.data = null;
    this.span = null;
    this.drag = null;
    this.events = []; // event times (Unix seconds), drawn as markers
    canvas.addEventListener('mousedown', (ev) => this.down(ev));
    window.addEventListener('mousemove', (ev) => this.move(ev));
    window.addEventListener('mouseup', (ev) => this.up(ev));
    canvas.addEventListener('mouseleave', () => hideTooltip());
    window.addEventListener('resize', () => this.draw());
  }

  set(data, span) {
    this.data = data;
    this.span = span;
    this.draw();
  }

  setEvents(times) {
    this.events = times;
    this.draw();
  }

  setSpan(span) {
    this.span = span;
    this.draw();
  }

  range() {
    const d = this.data;
    return [d.start, d.start + d.counts.length * d.step];
  }

  width() {
    return Math.max(200, this.canvas.parentElement.clientWidth - 2);
  }

  timeAt(x) {
    const [t0, t1] = this.range();
    return t0 + (Math.min(Math.max(x, 0), this.width()) / this.width()) * (t1 - t0);
  }

  xOf(t) {
    const [t0, t1] = this.range();
    return ((t - t0) / (t1 - t0)) * this.width();
  }

  draw() {
    const w = this.width();
    const ctx = sizeCanvas(this.canvas, w, HEIGHT);
    ctx.clearRect(0, 0, w, HEIGHT);
    const d = this.data;
    if (!d || d.counts.length === 0) return;
    const max = Math.max(1, ...d.counts);
    const bw = w / d.counts.length;
    ctx.fillStyle = '#4a7bb7';
    d.counts.forEach((c, i) => {
      if (c === 0) return;
      const h = Math.max(1, (c / max) * (HEIGHT - 4));
      ctx.fillRect(i * bw, HEIGHT - h, Math.max(1, bw - (bw > 3 ? 1 : 0)), h);
    });
    // event markers: a line with a triangle on top
    ctx.fillStyle = MARKER_COLOUR;
    const [t0, t1] = this.range();
    for (const t of this.events) {
      if (t < t0 || t >= t1) continue;
      const x = Math.round(this.xOf(t)) + 0.5;
      ctx.fillRect(x - 0.5, 0, 1.5, HEIGHT);
      ctx.beginPath();
      ctx.moveTo(x - 5, 0);
      ctx.lineTo(x + 5, 0);
      ctx.lineTo(x, 7);
      ctx.fill();
    }
    this.canvas.dataset.markers = String(this.events.filter((t) => t >= t0 && t < t1).length);
    let sel = this.span;
    if (this.drag && this.drag.moved) sel = [this.timeAt(Math.min(this.drag.x0, this.drag.x1)), this.timeAt(Math.max(this.drag.x0, this.drag.x1))];
    if (sel) {
      const x0 = this.xOf(sel[0]);
      const x1 = this.xOf(sel[1]);
      ctx.fillStyle = 'rgba(255, 170, 0, 0.25)';
      ctx.fillRect(x0, 0, Math.max(2, x1 - x0), HEIGHT);
      ctx.strokeStyle = '#e08a00';
      ctx.lineWidth = 1;
      ctx.strokeRect(x0 + 0.5, 0.5, Math.max(1, x1 - x0 - 1), HEIGHT - 1);
    }
  }

  localX(ev) {
    return ev.clientX - this.canvas.getBoundingClientRect().left;
  }

  down(ev) {
    if (!this.data || ev.button !== 0) return;
    ev.preventDefault();
    const x = this.localX(ev);
    this.drag = { x0: x, x1: x, moved: false };
  }

  move(ev) {
    if (!this.data) return;
    if (this.drag) {
      this.drag.x1 = this.localX(ev);
      if (Math.abs(this.drag.x1 - this.drag.x0) >= 3) this.drag.moved = true;
      this.draw();
      return;
    }
    if (ev.target !== this.canvas) return;
    const d = this.data;
    const x = this.localX(ev);
    const i = Math.floor(((this.timeAt(x) - d.start) / d.step));
    if (i < 0 || i >= d.counts.length) return hideTooltip();
    showTooltip(ev, `${formatTime(d.start + i * d.step)}\n${d.counts[i]} samples in ${d.step} s`);
  }

  up() {
    const drag = this.drag;
    this.drag = null;
    if (!drag) return;
    if (!drag.moved) {
      this.draw();
      return;
    }
    const a = Math.floor(this.timeAt(Math.min(drag.x0, drag.x1)));
    let b = Math.ceil(this.timeAt(Math.max(drag.x0, drag.x1)));
    if (b <= a) b = a + 1;
    this.span = [a, b];
    this.draw();
    this.onSpan(a, b);
  }
}
