// Shared helpers: API requests, canvas set-up, the tooltip, formatting.

// getJSON fetches an API path and returns its JSON, or throws an Error
// carrying the API's error message, with the HTTP status as its status and
// the parameter a 400 names as its param. Once the body has arrived, before it is
// parsed, it sets the performance mark "received PATH", from which
// measureDraw times the drawing.
export async function getJSON(path, params, signal) {
  const url = params ? path + '?' + params.toString() : path;
  const resp = await fetch(url, { signal, headers: { Accept: 'application/json' } });
  noteWarnings(path, resp);
  let body;
  try {
    const text = await resp.text();
    performance.mark('received ' + path);
    body = JSON.parse(text);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new Error(`${path}: ${resp.status} ${resp.statusText}`);
  }
  if (!resp.ok) {
    const e = new Error(body && body.error ? body.error : `${path}: ${resp.status}`);
    e.status = resp.status;
    e.param = body && body.param;
    throw e;
  }
  return body;
}

// getBinary gets path's answer in a binary encoding as an ArrayBuffer, or
// throws an Error carrying the API's error message (and, like getJSON's,
// its status and the parameter it names). Once the body has arrived,
// before it is decoded, it sets the performance mark "received PATH".
export async function getBinary(path, params, signal) {
  const resp = await fetch(path + '?' + params.toString(), { signal, headers: { Accept: 'application/octet-stream' } });
  noteWarnings(path, resp);
  let buf;
  try {
    buf = await resp.arrayBuffer();
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new Error(`${path}: ${resp.status} ${resp.statusText}`);
  }
  performance.mark('received ' + path);
  if (!resp.ok) {
    let body = null;
    try {
      body = JSON.parse(new TextDecoder().decode(buf));
    } catch {
      // not JSON: the status says it
    }
    const e = new Error((body && body.error) || `${path}: ${resp.status} ${resp.statusText}`);
    e.status = resp.status;
    e.param = body && body.param;
    throw e;
  }
  return buf;
}

// apiWarnings holds, per API path, the Warning headers of its last answer
// (data skipped as unreadable, a bucket that does not answer, so the data
// may be stale): the banner #api-warnings at the top of the page shows
// them, so that no gap is silent in the UI either.
const apiWarnings = new Map();

// noteWarnings keeps the Warning headers of path's answer and shows them.
function noteWarnings(path, resp) {
  const texts = parseWarnings(resp.headers.get('Warning') || '');
  if (texts.length) apiWarnings.set(path, texts);
  else apiWarnings.delete(path);
  showWarnings();
}

// parseWarnings returns the texts of a Warning header, its values joined
// by ", " as fetch joins them: each is 199 heatscope "text" (RFC 7234),
// the text's quotes and backslashes escaped.
function parseWarnings(header) {
  const out = [];
  const re = /\d{3} \S+ "((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(header)) !== null) out.push(m[1].replace(/\\(.)/g, '$1'));
  return out;
}

// maxShownWarnings bounds the banner's lines.
const maxShownWarnings = 5;

// showWarnings shows every path's warnings, each once, in the banner,
// and hides it when there are none.
function showWarnings() {
  const texts = [...new Set([...apiWarnings.values()].flat())];
  let el = document.getElementById('api-warnings');
  if (!el) {
    if (!texts.length) return;
    el = document.createElement('div');
    el.id = 'api-warnings';
    el.setAttribute('role', 'status');
    Object.assign(el.style, { background: '#fff3cd', color: '#664d03', borderBottom: '1px solid #e0c36c',
      padding: '4px 8px', font: '13px sans-serif', whiteSpace: 'pre-line' });
    document.body.prepend(el);
  }
  el.hidden = !texts.length;
  const more = texts.length > maxShownWarnings ? `\n… and ${texts.length - maxShownWarnings} more` : '';
  el.textContent = texts.length ? 'Warning: ' + texts.slice(0, maxShownWarnings).join('\nWarning: ') + more : '';
}

// sizeCanvas gives a canvas a size in CSS pixels, backed by device pixels,
// and returns its 2D context scaled to CSS pixels.
export function sizeCanvas(canvas, width, height) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.round(width * dpr));
  canvas.height = Math.max(1, Math.round(height * dpr));
  canvas.style.width = width + 'px';
  canvas.style.height = height + 'px';
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

const tooltip = () => document.getElementById('tooltip');

// showTooltip shows text (untrusted: set as text only) near the pointer.
export function showTooltip(ev, text) {
  const tip = tooltip();
  tip.textContent = text;
  tip.hidden = false;
  const pad = 14;
  let x = ev.clientX + pad;
  let y = ev.clientY + pad;
  const r = tip.getBoundingClientRect();
  if (x + r.width > window.innerWidth) x = Math.max(0, ev.clientX - r.width - pad);
  if (y + r.height > window.innerHeight) y = Math.max(0, ev.clientY - r.height - pad);
  tip.style.left = x + 'px';
  tip.style.top = y + 'px';
}

export function hideTooltip() {
  tooltip().hidden = true;
}

// relativeOrigin, when not null, is the first sample's time of a source
// whose times are its capture's own clock (a perf script without a wall
// time), floored to its second: formatTime then writes seconds from it,
// never a date in 1970.
let relativeOrigin = null;

// setRelativeOrigin makes formatTime write times as seconds from origin
// (null: as dates again): the relative source's first second.
export function setRelativeOrigin(origin) {
  relativeOrigin = Number.isFinite(origin) ? origin : null;
}

// formatTime formats Unix seconds as a UTC date and time with
// milliseconds, or, for a source on its capture's own clock, as
// "t=12.345 s" from the start of its first sample's second.
export function formatTime(sec) {
  if (!Number.isFinite(sec)) return '';
  if (relativeOrigin !== null) return `t=${(sec - relativeOrigin).toFixed(3)} s`;
  return new Date(sec * 1000).toISOString().replace('T', ' ').replace('Z', ' UTC');
}

export function pct(n, total) {
  return total > 0 ? (100 * n / total).toFixed(2) + '%' : '0%';
}

// trimText shortens text with an ellipsis to fit width pixels.
export function trimText(ctx, text, width) {
  if (width < 12) return '';
  if (ctx.measureText(text).width <= width) return text;
  const avg = ctx.measureText('m').width * 0.8;
  let n = Math.floor(width / avg);
  while (n > 1 && ctx.measureText(text.slice(0, n) + '…').width > width) n--;
  return n > 1 ? text.slice(0, n) + '…' : '';
}

// heatColour is the heatmap's colour scale, shared by the per-CPU view:
// white for none, then white to a deep red, linear in v/max; enhanced
// makes small counts (1 to 3 samples) visible.
export function heatColour(v, max, enhanced) {
  if (v <= 0) return '#ffffff';
  let t = v / max;
  if (enhanced) t = Math.max(0.3, Math.sqrt(t));
  const r = Math.round(255 - t * (255 - 178));
  const g = Math.round(255 - t * (255 - 24));
  const b = Math.round(255 - t * (255 - 24));
  return `rgb(${r},${g},${b})`;
}

// measureDraw records how long a view took from the arrival of path's
// response to its drawing: the performance measures "NAME:draw" (the
// JavaScript done) and "NAME:paint" (the next frame painted). The UI
// benchmark (bench/ui) reads them.
export function measureDraw(name, path) {
  const start = 'received ' + path;
  performance.measure(name + ':draw', start);
  requestAnimationFrame(() => setTimeout(() => performance.measure(name + ':paint', start), 0));
}
