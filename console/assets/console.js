// The chunkd console: browse a service's databases, versions and tables,
// and run read-only SQL through its query API (docs/api.md). No
// dependencies; everything it loads comes from the service itself.
'use strict';

const $ = (sel) => document.querySelector(sel);
const TOKEN_KEY = 'chunkd-token';
const PAGE = 100;

const state = {
  db: '',       // the database shown
  at: '',       // the version picked; '' is the current one
  versions: [], // the database's versions, newest first
  result: null, // the last query's result
  page: 0,
};

// --- talking to the service ---

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

function authHeaders(extra) {
  const h = Object.assign({}, extra);
  if (token()) h.Authorization = 'Bearer ' + token();
  return h;
}

// dbPath is /v1/dbs/{db}, the name escaped as one path segment.
function dbPath(db) {
  const seg = db === '.' || db === '..' ? '%2E'.repeat(db.length) : encodeURIComponent(db);
  return '/v1/dbs/' + seg;
}

async function call(path, opts) {
  opts = opts || {};
  const resp = await fetch(path, Object.assign({}, opts, { headers: authHeaders(opts.headers) }));
  if (resp.status === 401) showToken('This service wants a token.');
  if (resp.status === 403 && !token()) showToken('');
  return resp;
}

// failure reads an error answer: {error, kind, sqlite}.
async function failure(resp) {
  const text = await resp.text();
  try {
    const e = JSON.parse(text);
    if (e && e.error) return Object.assign(e, { status: resp.status });
  } catch (_) { /* not JSON: a proxy's page */ }
  return { error: (text.split('\n')[0] || resp.statusText), status: resp.status };
}

// A number in a row keeps its source text: an INTEGER has neither '.' nor
// an exponent, a REAL always has one (the service writes them so).
function reviver(key, value, ctx) {
  if (typeof value !== 'number') return value;
  const src = ctx && typeof ctx.source === 'string' ? ctx.source : String(value);
  return { $num: src, real: /[.eE]/.test(src) };
}

// cell turns a value of the wire format into what the table shows.
function cell(v) {
  if (v === null) return { type: 'null', text: 'NULL' };
  if (typeof v === 'string') return { type: 'text', text: v };
  if ('$num' in v) return { type: v.real ? 'real' : 'integer', text: v.$num };
  if ('int' in v) return { type: 'integer', text: v.int };
  if ('real' in v) return { type: 'real', text: v.real };
  if ('blob' in v) return { type: 'blob', text: blobText(v.blob) };
  if ('text' in v) {
    return { type: 'text', text: new TextDecoder().decode(bytesOf(v.text)), invalid: true };
  }
  return { type: 'text', text: JSON.stringify(v) };
}

function bytesOf(b64) {
  const s = atob(b64);
  const b = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);
  return b;
}

function blobText(b64) {
  const b = bytesOf(b64);
  const shown = b.length > 64 ? b.subarray(0, 64) : b;
  let hex = '';
  for (const x of shown) hex += x.toString(16).padStart(2, '0');
  return "x'" + hex + "'" + (b.length > 64 ? '… (' + b.length + ' bytes)' : '');
}

// query runs sql at version at ('' current) and returns
// {header, rows, trailer, cache, ms}, or throws the service's error.
async function query(sql, at, maxRows, fresh) {
  const params = new URLSearchParams({ sql: sql, format: 'ndjson' });
  if (at) params.set('at', at);
  if (maxRows) params.set('max_rows', String(maxRows));
  const start = performance.now();
  let resp;
  if (sql.length < 6000) {
    // A run asks the service (revalidating what the browser keeps: a 304
    // costs no rows), so that it says whether its result cache answered.
    resp = await call(dbPath(state.db) + '/query?' + params, fresh ? { cache: 'no-cache' } : {});
  } else {
    resp = await call(dbPath(state.db) + '/query?format=ndjson', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ sql: sql, at: at || undefined, max_rows: maxRows || undefined }),
    });
  }
  if (!resp.ok) throw await failure(resp);
  const text = await resp.text();
  const ms = performance.now() - start;
  const lines = text.split('\n').filter((l) => l !== '');
  if (lines.length < 2) throw { error: 'the answer was cut short' };
  const header = JSON.parse(lines[0]);
  const trailer = JSON.parse(lines[lines.length - 1]);
  if (!trailer || typeof trailer !== 'object' || Array.isArray(trailer)) throw { error: 'the answer was cut short' };
  const rows = lines.slice(1, -1).map((l) => JSON.parse(l, reviver).map(cell));
  return {
    header: header, rows: rows, trailer: trailer, ms: ms,
    cache: resp.headers.get('Chunkd-Result-Cache') || '',
    server: resp.headers.get('Server-Timing') || '',
  };
}

// --- the page ---

function showToken(note) {
  $('#token-form').hidden = false;
  $('#token-note').textContent = note;
}

function setError(e) {
  const box = $('#error');
  if (!e) { box.hidden = true; box.textContent = ''; return; }
  let msg = e.error || String(e);
  if (e.kind) msg = e.kind + ': ' + msg;
  if (e.sqlite) {
    msg += '\n' + e.sqlite.name + ' (' + e.sqlite.code + ')';
    if (typeof e.sqlite.offset === 'number') msg += ' at offset ' + e.sqlite.offset;
  }
  box.textContent = msg;
  box.hidden = false;
}

function option(value, text) {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = text;
  return o;
}

function short(root) { return root ? root.slice(0, 12) : ''; }

async function loadDatabases() {
  const sel = $('#db');
  sel.replaceChildren();
  const resp = await call('/v1/dbs');
  let names = [];
  if (resp.ok) {
    names = (await resp.json()).map((d) => d.name);
  } else if (resp.status !== 401) {
    setError(await failure(resp));
  }
  if (state.db && !names.includes(state.db)) names.unshift(state.db);
  if (names.length === 0) sel.append(option('', '(none yet: open one by name)'));
  for (const n of names) sel.append(option(n, n));
  sel.value = state.db;
}

async function loadVersions() {
  const sel = $('#at');
  sel.replaceChildren();
  state.versions = [];
  $('#version-note').textContent = '';
  if (!state.db) return;
  const resp = await call(dbPath(state.db) + '/versions?limit=100');
  if (!resp.ok) {
    setError(await failure(resp));
    return;
  }
  state.versions = await resp.json();
  const head = state.versions[0];
  sel.append(option('', 'current' + (head ? ' (' + short(head.root) + ')' : '')));
  for (const v of state.versions) {
    const when = v.time.replace('T', ' ').replace('Z', '');
    sel.append(option(v.root, when + '  ' + short(v.root) + (v.message ? '  ' + v.message : '')));
  }
  if (state.at && !state.versions.some((v) => v.root === state.at)) sel.append(option(state.at, short(state.at) + ' (older)'));
  sel.value = state.at;
  describeVersion();
}

function describeVersion() {
  const root = state.at || (state.versions[0] && state.versions[0].root) || '';
  const v = state.versions.find((x) => x.root === root);
  $('#version-note').textContent = v ? root + ' · ' + v.pages + ' pages of ' + v.page_size + ' bytes' : root;
}

// pinned is the version's root ('' before the versions are known): the
// tables are read at it, so that their answers are immutable.
function pinned() { return state.at || (state.versions[0] && state.versions[0].root) || ''; }

function quoteName(n) { return '"' + n.replace(/"/g, '""') + '"'; }

async function loadTables() {
  const list = $('#tables');
  list.replaceChildren();
  if (!state.db) return;
  let res;
  try {
    res = await query("SELECT type, name, sql FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name", pinned());
  } catch (e) {
    setError(e);
    return;
  }
  for (const row of res.rows) {
    const [type, name, sql] = row.map((c) => c.text);
    const li = document.createElement('li');
    const det = document.createElement('details');
    const sum = document.createElement('summary');
    sum.textContent = name + (type === 'view' ? ' (view)' : '');
    const count = document.createElement('span');
    count.className = 'count';
    sum.append(count);
    const pre = document.createElement('pre');
    pre.textContent = sql;
    const browse = document.createElement('a');
    browse.href = '#';
    browse.textContent = 'browse';
    browse.addEventListener('click', (ev) => {
      ev.preventDefault();
      $('#sql').value = 'SELECT * FROM ' + quoteName(name) + ' LIMIT 1000';
      run();
    });
    det.append(sum, pre, browse);
    li.append(det);
    list.append(li);
    if (type === 'table') {
      query('SELECT count(*) FROM ' + quoteName(name), pinned())
        .then((c) => { count.textContent = Number(c.rows[0][0].text).toLocaleString('en-US') + ' rows'; })
        .catch(() => { count.textContent = '?'; });
    }
  }
}

function syncURL() {
  const p = new URLSearchParams();
  if (state.db) p.set('db', state.db);
  if (state.at) p.set('at', state.at);
  const sql = $('#sql').value;
  if (sql) p.set('sql', sql);
  history.replaceState(null, '', p.toString() ? '?' + p : location.pathname);
}

async function run() {
  const sql = $('#sql').value.trim();
  if (!state.db || !sql) return;
  syncURL();
  setError(null);
  const results = $('#results');
  results.dataset.state = 'running';
  $('#status').textContent = 'running…';
  try {
    state.result = await query(sql, state.at, 0, true);
    state.page = 0;
    render();
    results.dataset.state = 'done';
  } catch (e) {
    state.result = null;
    render();
    setError(e);
    $('#status').textContent = '';
    results.dataset.state = 'error';
  }
}

function render() {
  const res = state.result;
  const thead = $('#results thead');
  const tbody = $('#results tbody');
  thead.replaceChildren();
  tbody.replaceChildren();
  $('#csv').disabled = $('#json').disabled = !res;
  $('#pager').hidden = true;
  if (!res) return;
  const tr = document.createElement('tr');
  tr.append(document.createElement('th'));
  for (const c of res.header.columns) {
    const th = document.createElement('th');
    th.textContent = c.name;
    if (c.type) {
      const small = document.createElement('small');
      small.textContent = c.type;
      th.append(small);
    }
    tr.append(th);
  }
  thead.append(tr);
  const first = state.page * PAGE;
  const rows = res.rows.slice(first, first + PAGE);
  rows.forEach((row, i) => {
    const r = document.createElement('tr');
    const num = document.createElement('td');
    num.className = 'rownum';
    num.textContent = String(first + i + 1);
    r.append(num);
    for (const v of row) {
      const td = document.createElement('td');
      td.dataset.type = v.type;
      td.textContent = v.text;
      if (v.invalid) {
        td.classList.add('invalid');
        td.title = 'TEXT that is not valid UTF-8';
      }
      r.append(td);
    }
    tbody.append(r);
  });
  const n = res.rows.length;
  const status = $('#status');
  status.replaceChildren();
  const cache = document.createElement('span');
  cache.className = res.cache === 'hit' ? 'hit' : '';
  cache.textContent = 'result cache: ' + (res.cache || 'n/a');
  status.append(
    n.toLocaleString('en-US') + (n === 1 ? ' row' : ' rows') +
    (res.trailer.truncated ? ' (truncated: more rows than the service sends)' : '') +
    ' in ' + res.ms.toFixed(1) + ' ms · ', cache, ' · version ' + short(res.header.root));
  if (n > PAGE) {
    $('#pager').hidden = false;
    $('#page').textContent = 'rows ' + (first + 1) + '–' + Math.min(first + PAGE, n) + ' of ' + n;
    $('#prev').disabled = state.page === 0;
    $('#next').disabled = first + PAGE >= n;
  }
}

async function download(format) {
  const res = state.result;
  if (!res) return;
  const params = new URLSearchParams({ sql: $('#sql').value.trim(), format: format, at: res.header.root });
  const resp = await call(dbPath(state.db) + '/query?' + params);
  if (!resp.ok) {
    setError(await failure(resp));
    return;
  }
  const blob = await resp.blob();
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = state.db + '-' + short(res.header.root) + '.' + format;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

async function openDatabase(name) {
  state.db = name;
  state.versions = [];
  setError(null);
  await loadDatabases();
  await loadVersions();
  syncURL();
  await loadTables();
}

async function start() {
  const p = new URLSearchParams(location.search);
  state.db = p.get('db') || '';
  state.at = p.get('at') || '';
  $('#sql').value = p.get('sql') || '';
  if (token()) {
    $('#token-form').hidden = false;
    $('#token').value = token();
  }
  $('#db').addEventListener('change', () => { state.at = ''; openDatabase($('#db').value); });
  $('#db-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const n = $('#db-name').value.trim();
    if (n) { state.at = ''; openDatabase(n); }
  });
  $('#at').addEventListener('change', () => {
    state.at = $('#at').value;
    describeVersion();
    syncURL();
    loadTables();
    if ($('#sql').value.trim()) run();
  });
  $('#token-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('#token').value.trim());
    $('#token-note').textContent = '';
    await openDatabase(state.db);
    if ($('#sql').value.trim()) run();
  });
  $('#run').addEventListener('click', run);
  $('#sql').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); run(); }
  });
  $('#csv').addEventListener('click', () => download('csv'));
  $('#json').addEventListener('click', () => download('json'));
  $('#prev').addEventListener('click', () => { state.page--; render(); });
  $('#next').addEventListener('click', () => { state.page++; render(); });

  await loadDatabases();
  if (!state.db && $('#db').value) state.db = $('#db').value;
  await loadVersions();
  loadTables();
  if ($('#sql').value.trim()) await run();
}

start();
