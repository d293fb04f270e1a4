// Shared helpers of every view: API requests, elements built from
// untrusted text, the status line and error marks, canvas set-up, the
// tooltip, formatting. They hold no state of their own (state.js does).
import { apiWarnings, clock, inflight, setBusy } from './state.js';

export const $ = (id) => document.getElementById(id);

// el builds an element: props are set as properties (className,
// textContent, title, href, ...), children appended (strings as text).
export function el(tag, props, ...children) {
  const e = document.createElement(tag);
  if (props) Object.assign(e, props);
  for (const c of children) e.append(c);
  return e;
}

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

// request runs one named request at a time: a newer one aborts the older.
// get fetches and decodes the answer (getJSON unless given). It returns
// the answer, null when the request failed (the status says why), or
// undefined when a newer request replaced it.
export async function request(name, path, params, get = getJSON) {
  if (inflight[name]) inflight[name].abort();
  const ctl = new AbortController();
  inflight[name] = ctl;
  setBusy(1);
  try {
    const data = await get(path, params, ctl.signal);
    return ctl.signal.aborted ? undefined : data;
  } catch (e) {
    if (e.name === 'AbortError' || ctl.signal.aborted) return undefined;
    setStatus(`${path}: ${e.message}`, true);
    return null;
  } finally {
    if (inflight[name] === ctl) delete inflight[name];
    setBusy(-1);
  }
}

// nodeSources maps each node to its first source, from /api/nodes, for
// links into the node view (its source picker shows one source).
export async function nodeSources() {
  const m = new Map();
  try {
    for (const n of await getJSON('/api/nodes')) m.set(n.name, (n.sources && n.sources[0]) || '');
  } catch {
    // links then leave the source to the node view's default
  }
  return m;
}

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

// showWarnings shows every path's warnings, each once, in the banner
// #api-warnings at the top of the page, so that no gap is silent in the
// UI either, and hides it when there are none.
function showWarnings() {
  const texts = [...new Set([...apiWarnings.values()].flat())];
  let box = document.getElementById('api-warnings');
  if (!box) {
    if (!texts.length) return;
    box = document.createElement('div');
    box.id = 'api-warnings';
    box.setAttribute('role', 'status');
    Object.assign(box.style, { background: '#fff3cd', color: '#664d03', borderBottom: '1px solid #e0c36c',
      padding: '4px 8px', font: '13px sans-serif', whiteSpace: 'pre-line' });
    document.body.prepend(box);
  }
  box.hidden = !texts.length;
  const more = texts.length > maxShownWarnings ? `\n… and ${texts.length - maxShownWarnings} more` : '';
  box.textContent = texts.length ? 'Warning: ' + texts.slice(0, maxShownWarnings).join('\nWarning: ') + more : '';
}

// littleEndian says whether this machine is little-endian, as the API's
// compact encodings are: their columns are then read in place.
export const littleEndian = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

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

// formatTime formats Unix seconds as a UTC date and time with
// milliseconds, or, for a source on its capture's own clock, as
// "t=12.345 s" from the start of its first sample's second.
export function formatTime(sec) {
  if (!Number.isFinite(sec)) return '';
  const origin = clock.relativeOrigin;
  if (origin !== null) return `t=${(sec - origin).toFixed(3)} s`;
  return new Date(sec * 1000).toISOString().replace('T', ' ').replace('Z', ' UTC');
}

export function pct(n, total) {
  return total > 0 ? (100 * n / total).toFixed(2) + '%' : '0%';
}

// searchRegexp is a search field's text as a case-insensitive regexp, or
// as its literal text when it does not parse; null when empty.
export function searchRegexp(text) {
  if (!text) return null;
  try {
    return new RegExp(text, 'i');
  } catch {
    return new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
  }
}

// setStatus shows msg in the page's status line, as an error or not.
export function setStatus(msg, error) {
  const s = $('status');
  s.textContent = msg;
  s.classList.toggle('error', !!error);
}

// setReady marks the page loaded (body's data-ready, which tests wait on).
export function setReady() {
  document.body.dataset.ready = '1';
}

// showEmpty shows msg in the empty-state note id, or hides it when msg is
// empty.
export function showEmpty(id, msg) {
  const e = $(id);
  e.textContent = msg || '';
  e.hidden = !msg;
}

// showParamError shows an API error in the header's error line and marks
// the input of the parameter it names; inputs maps parameters to input
// ids. It returns whether the error named a parameter.
export function showParamError(box, inputs, e) {
  for (const id of Object.values(inputs)) $(id).classList.remove('invalid');
  if (!e) {
    $(box).hidden = true;
    return false;
  }
  $(box).textContent = e.message;
  $(box).hidden = false;
  if (e.param && inputs[e.param]) $(inputs[e.param]).classList.add('invalid');
  return !!e.param;
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
