// System events (kernel log markers, events POSTed by automation): the
// list of the events in the heatmap's span, and the marker colour the
// timeline and the heatmap draw them in. Event texts are untrusted: they
// are set as text only.
import { formatTime } from './util.js';

export const MARKER_COLOUR = '#d0006f';

export class EventList {
  constructor(list, onPick) {
    this.list = list; // a <ul>
    this.onPick = onPick; // called with the event clicked
    this.events = [];
    this.picked = null; // the time of the event picked, to highlight it
  }

  // set shows the events (sorted by time) that fall in [from, to), which
  // span names.
  set(events, from, to, span) {
    this.events = events.filter((e) => e.time >= from && e.time < to);
    this.span = span;
    this.draw();
  }

  draw() {
    if (this.events.length === 0) {
      const li = document.createElement('li');
      li.className = 'note';
      li.textContent = `No events in the heatmap's span (${this.span}).`;
      this.list.replaceChildren(li);
      return;
    }
    this.list.replaceChildren(...this.events.map((e) => {
      const li = document.createElement('li');
      const btn = document.createElement('button');
      btn.type = 'button';
      btn.className = 'event';
      btn.dataset.time = String(e.time);
      if (this.picked !== null && Math.abs(this.picked - e.time) < 1e-6) btn.classList.add('picked');
      const when = document.createElement('span');
      when.className = 'when';
      when.textContent = formatTime(e.time);
      const sev = document.createElement('span');
      sev.className = 'sev sev-' + (['emerg', 'alert', 'crit', 'err', 'warning', 'notice', 'info', 'debug'].includes(e.severity) ? e.severity : 'info');
      sev.textContent = e.severity;
      const src = document.createElement('span');
      src.className = 'src';
      const kind = e.labels && (e.labels.kind || (e.source === 'kmsg' && e.labels.pattern));
      src.textContent = e.source + (kind ? ' · ' + kind : '');
      const text = document.createElement('span');
      text.className = 'text';
      text.textContent = e.text;
      btn.append(when, sev, src, text);
      btn.title = 'select the seconds before this event, against the same length before them';
      btn.addEventListener('click', () => this.onPick(e));
      li.append(btn);
      return li;
    }));
  }
}
