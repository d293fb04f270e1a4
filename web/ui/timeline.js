// The overview timeline: samples per step over the source's whole range,
// or over a zoomed view of it, drawn as bars. Dragging picks the span the
// heatmap shows; the wheel zooms around the pointer and a shift-drag pans
// (both ask the app for a new view, which it fetches at a finer step).
import { sizeCanvas, showTooltip, hideTooltip, formatTime } from './util.js';
import { MARKER_COLOUR } from './events.js';
import { formatCPU } from './legend.js';

const HEIGHT = 70;
const WHEEL_ZOOM = 1.5; // view width factor per wheel notch

export class Timeline {
  constructor(canvas, onSpan, onView) {
    this.canvas = canvas;
    this.onSpan = onSpan; // called with (from, to) in Unix seconds
    this.onView = onView; // called with the [from, to] view to show
    this.data = null;
    this.span = null;
    this.shown = null; // the view asked for, or null for the data's range
    this.drag = null;
    this.events = []; // event times (Unix seconds), drawn as markers
    canvas.addEventListener('mousedown', (ev) => this.down(ev));
    canvas.addEventListener('wheel', (ev) => this.wheel(ev), { passive: false });
    window.addEventListener('mousemove', (ev) => this.move(ev));
    window.addEventListener('mouseup', (ev) => this.up(ev));
    canvas.addEventListener('mouseleave', () => hideTooltip());
    window.addEventListener('resize', () => this.draw());
  }

  set(data, span, view) {
    this.data = data;
    this.span = span;
    this.shown = view || null;
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

  // view is the time range drawn across the width: the view asked for, or
  // the data's whole range.
  view() {
    if (this.shown) return this.shown;
    const d = this.data;
    return d ? [d.start, d.start + d.counts.length * d.step] : null;
  }

  width() {
    return Math.max(200, this.canvas.parentElement.clientWidth - 2);
  }

  timeAt(x) {
    const [t0, t1] = this.view();
    return t0 + (Math.min(Math.max(x, 0), this.width()) / this.width()) * (t1 - t0);
  }

  xOf(t) {
    const [t0, t1] = this.view();
    return ((t - t0) / (t1 - t0)) * this.width();
  }

  draw() {
    const w = this.width();
    const ctx = sizeCanvas(this.canvas, w, HEIGHT);
    ctx.clearRect(0, 0, w, HEIGHT);
    const d = this.data;
    if (!d || d.counts.length === 0) return;
    // bar heights are CPU time (d.unit), not samples: a rate change keeps them
    const max = Math.max(Number.MIN_VALUE, ...d.cpu);
    const [t0, t1] = this.view();
    const bw = (d.step / (t1 - t0)) * w;
    // while panning, the bars follow the pointer until the new view loads
    const dx = this.drag && this.drag.pan ? this.drag.x1 - this.drag.x0 : 0;
    ctx.fillStyle = '#4a7bb7';
    d.cpu.forEach((c, i) => {
      if (c === 0) return;
      const h = Math.max(1, (c / max) * (HEIGHT - 4));
      ctx.fillRect(this.xOf(d.start + i * d.step) + dx, HEIGHT - h, Math.max(1, bw - (bw > 3 ? 1 : 0)), h);
    });
    // event markers: a line with a triangle on top
    ctx.fillStyle = MARKER_COLOUR;
    for (const t of this.events) {
      if (t < t0 || t >= t1) continue;
      const x = Math.round(this.xOf(t) + dx) + 0.5;
      ctx.fillRect(x - 0.5, 0, 1.5, HEIGHT);
      ctx.beginPath();
      ctx.moveTo(x - 5, 0);
      ctx.lineTo(x + 5, 0);
      ctx.lineTo(x, 7);
      ctx.fill();
    }
    this.canvas.dataset.markers = String(this.events.filter((t) => t >= t0 && t < t1).length);
    let sel = this.span;
    if (this.drag && this.drag.moved && !this.drag.pan) {
      sel = [this.timeAt(Math.min(this.drag.x0, this.drag.x1)), this.timeAt(Math.max(this.drag.x0, this.drag.x1))];
    }
    if (sel) {
      const x0 = this.xOf(sel[0]) + (this.drag && this.drag.pan ? dx : 0);
      const x1 = this.xOf(sel[1]) + (this.drag && this.drag.pan ? dx : 0);
      ctx.fillStyle = 'rgba(255, 170, 0, 0.25)';
      ctx.fillRect(x0, 0, Math.max(2, x1 - x0), HEIGHT);
      ctx.strokeStyle = '#e08a00';
      ctx.lineWidth = 1;
      ctx.strokeRect(x0 + 0.5, 0.5, Math.max(1, x1 - x0 - 1), HEIGHT - 1);
    }
    this.canvas.dataset.draws = String(Number(this.canvas.dataset.draws || 0) + 1);
  }

  localX(ev) {
    return ev.clientX - this.canvas.getBoundingClientRect().left;
  }

  // zoom scales the view's width by factor around time t (default: the
  // view's middle).
  zoom(factor, t) {
    const v = this.view();
    if (!v) return;
    const at = t === undefined ? (v[0] + v[1]) / 2 : t;
    this.onView([at - (at - v[0]) * factor, at + (v[1] - at) * factor]);
  }

  wheel(ev) {
    if (!this.data || ev.deltaY === 0) return;
    ev.preventDefault();
    this.zoom(ev.deltaY > 0 ? WHEEL_ZOOM : 1 / WHEEL_ZOOM, this.timeAt(this.localX(ev)));
  }

  down(ev) {
    if (!this.data || ev.button !== 0) return;
    ev.preventDefault();
    const x = this.localX(ev);
    this.drag = { x0: x, x1: x, moved: false, pan: ev.shiftKey };
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
    showTooltip(ev, `${formatTime(d.start + i * d.step)}\nCPU time: ${formatCPU(d.cpu[i])} in ${d.step} s (${d.counts[i]} samples)`);
  }

  up() {
    const drag = this.drag;
    this.drag = null;
    if (!drag) return;
    if (!drag.moved) {
      this.draw();
      return;
    }
    if (drag.pan) {
      const [t0, t1] = this.view();
      const dt = ((drag.x0 - drag.x1) / this.width()) * (t1 - t0);
      this.draw();
      this.onView([t0 + dt, t1 + dt]);
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
