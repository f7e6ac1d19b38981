// The tapflow console: every number comes from the JSON API under /api/v1 (docs/console.md).
// The view (window, filter, stacking key, unit) lives in the URL, so a view can be shared.
import uPlot from '/vendor/uPlot.esm.js';

const $ = (id) => document.getElementById(id);
const started = performance.now();
window.tapflowTiming = {};
const TOPS = ['srcip', 'dstip', 'dstport', 'proto', 'exporter', 'srcas', 'dstas', 'srcnet', 'dstnet'];
const COLORS = ['#2563eb', '#f59e0b', '#10b981', '#ef4444', '#8b5cf6', '#06b6d4', '#ec4899',
  '#84cc16', '#f97316', '#64748b'];

let state = readState();
// Whether the page opened on the default window (no window, from or to in its URL): if that
// window is empty, it moves to the newest hour holding flows, once.
let defaulted = !['window', 'from', 'to'].some((k) => new URLSearchParams(location.search).has(k));
let chart = null;
let refreshes = 0;
let timer = null;

function readState() {
  const p = new URLSearchParams(location.search);
  return {
    window: p.get('window') || 'last 1h',
    from: p.get('from') ? Number(p.get('from')) : null,
    to: p.get('to') ? Number(p.get('to')) : null,
    filter: p.get('filter') || '',
    key: p.get('key') || 'proto',
    metric: p.get('metric') || 'bytes',
  };
}

function writeState() {
  const p = new URLSearchParams();
  if (state.from !== null && state.to !== null) {
    p.set('from', state.from);
    p.set('to', state.to);
  } else {
    p.set('window', state.window);
  }
  if (state.filter) p.set('filter', state.filter);
  p.set('key', state.key);
  p.set('metric', state.metric);
  const url = `${location.pathname}?${p}`;
  if (url !== location.pathname + location.search) history.pushState(null, '', url);
}

function viewParams(extra = {}) {
  const p = new URLSearchParams();
  if (state.from !== null && state.to !== null) {
    p.set('from', state.from);
    p.set('to', state.to);
  } else {
    p.set('window', state.window);
  }
  if (state.filter) p.set('filter', state.filter);
  for (const [k, v] of Object.entries(extra)) p.set(k, v);
  return p;
}

async function api(path, extra) {
  const r = await fetch(`/api/v1/${path}?${viewParams(extra)}`);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

// Human units: 1,000-based for rates and counts, 1,024-based for byte totals.
function si(v, unit) {
  const prefixes = ['', 'k', 'M', 'G', 'T', 'P'];
  let i = 0;
  while (Math.abs(v) >= 1000 && i < prefixes.length - 1) { v /= 1000; i++; }
  const digits = Math.abs(v) >= 100 || i === 0 ? 0 : 1;
  return `${v.toFixed(digits)} ${prefixes[i]}${unit}`.trim();
}
function bytes(v) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}
const rate = (v, unit) => si(v, unit.replace('bit/s', 'bit/s'));
function amount(row, metric) {
  if (metric === 'bytes') return bytes(row.bytes);
  if (metric === 'packets') return si(row.packets, '');
  return si(row.flows, '');
}
function time(us) {
  return new Date(us / 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function showError(e) {
  const el = $('error');
  if (e) {
    el.textContent = e.message;
    el.hidden = false;
  } else {
    el.hidden = true;
  }
}

function addFilter(term) {
  state.filter = state.filter ? `(${state.filter}) and ${term}` : term;
  $('filter').value = state.filter;
  writeState();
  refresh();
}

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function drawChart(s) {
  const el = $('chart');
  const xs = s.times.map((t) => t / 1e6);
  // Stacked: each series is drawn as the sum of itself and those below it, top first, so each
  // fill covers the ones under it; the legend shows each series' own value.
  const raw = s.series.map((x) => x.values);
  const cumulative = [];
  let acc = new Array(xs.length).fill(0);
  for (const values of raw) {
    acc = acc.map((a, i) => a + values[i]);
    cumulative.push(acc);
  }
  const order = [...cumulative.keys()].reverse();
  const fmt = (v) => (v == null ? '–' : rate(v, s.unit));
  const series = [{}];
  const data = [xs];
  for (const i of order) {
    const c = COLORS[i % COLORS.length];
    series.push({
      label: s.series[i].name,
      stroke: c,
      fill: `${c}cc`,
      width: 1,
      value: (u, v, si_, di) => (di == null ? '–' : fmt(raw[i][di])),
    });
    data.push(cumulative[i]);
  }
  series.push({ label: 'previous period', stroke: css('--muted'), dash: [6, 4], width: 1.5,
    value: (u, v) => fmt(v) });
  data.push(s.previous);
  const axis = { stroke: css('--muted'), grid: { stroke: css('--line'), width: 1 },
    ticks: { stroke: css('--line') } };
  const opts = {
    width: Math.max(300, el.clientWidth - 4),
    height: 300,
    series,
    scales: { x: { time: true } },
    axes: [axis, { ...axis, size: 80, values: (u, vals) => vals.map((v) => rate(v, s.unit)) }],
    cursor: { drag: { x: true, y: false, setScale: false } },
    hooks: {
      setSelect: [(u) => {
        if (u.select.width < 5) return;
        const a = u.posToVal(u.select.left, 'x');
        const b = u.posToVal(u.select.left + u.select.width, 'x');
        state.from = Math.round(a * 1e6);
        state.to = Math.round(b * 1e6);
        u.setSelect({ left: 0, width: 0 }, false);
        writeState();
        refresh();
      }],
    },
  };
  if (chart) chart.destroy();
  chart = new uPlot(opts, data, el);
  for (const [i, s_] of order.entries()) {
    const f = s.series[s_].filter;
    const legend = el.querySelectorAll('.u-legend .u-series')[i + 1];
    if (f && legend) {
      legend.title = `filter: ${f}`;
      legend.addEventListener('dblclick', () => addFilter(f));
    }
  }
  $('range').textContent = `${time(s.from)} – ${time(s.to)}, ${s.every_us / 1e6} s buckets` +
    (s.tier_seconds ? `, from the ${s.tier_seconds} s rollup` : '');
  $('totals').textContent = `${si(s.flows, 'flows')}, ${si(s.packets, 'packets')}, ` +
    `${bytes(s.bytes)} in the window`;
}

function cell(tr, text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  tr.append(td);
  return td;
}

function drawTop(key, t) {
  const table = $(`top-${key}`);
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  for (const h of [key, 'total', 'avg', '95th', 'last', 'flows']) {
    const th = document.createElement('th');
    th.textContent = h;
    head.append(th);
  }
  const body = table.createTBody();
  for (const row of t.rows) {
    const tr = body.insertRow();
    tr.dataset.filter = row.filter;
    tr.title = `filter: ${row.filter}`;
    // An AS with its name beside the number (AS13335 Cloudflare, Inc.).
    cell(tr, row.label ?? row.value);
    cell(tr, amount(row, t.metric));
    cell(tr, rate(row.average, t.unit));
    cell(tr, rate(row.p95, t.unit));
    cell(tr, rate(row.last, t.unit));
    cell(tr, si(row.flows, ''));
    tr.addEventListener('click', () => addFilter(row.filter));
  }
  if (!t.rows.length) {
    cell(body.insertRow(), 'no flows in the window', 'muted');
  }
}

function drawHealth(h) {
  const box = $('health-body');
  box.replaceChildren();
  const table = document.createElement('table');
  table.id = 'exporters';
  const head = table.createTHead().insertRow();
  for (const x of ['exporter', 'domain', 'records', 'records/s', 'lost (sequence)', 'lost %',
    'no template', 'bad messages']) cell(head, x);
  const body = table.createTBody();
  const count = (v) => (v === null ? '–' : si(v, ''));
  for (const e of h.exporters) {
    const tr = body.insertRow();
    tr.className = e.alarm ? 'alarm' : 'ok';
    cell(tr, e.exporter);
    cell(tr, e.domain === null ? '–' : String(e.domain));
    cell(tr, si(e.records, ''));
    cell(tr, e.records_per_second < 10 ? e.records_per_second.toFixed(2) : si(e.records_per_second, ''));
    cell(tr, count(e.sequence_lost));
    cell(tr, e.lost_percent === null ? '–' : `${e.lost_percent.toFixed(2)} %`);
    cell(tr, count(e.template_missing));
    cell(tr, count(e.bad_messages));
  }
  box.append(table);
  if (h.interfaces.length) box.append(interfaceTable(h.interfaces));
  if (h.probes.length) box.append(probeTable(h.probes));
}

// One row per interface: those sFlow agents sent counters for, with their rates and what they
// lost in the window (alarm: errors or discards, or administratively up but operationally
// down), and those of a known speed whose rates come from the flows. Each with its name and
// its utilisation, the rate as a share of its speed.
function interfaceTable(interfaces) {
  const table = document.createElement('table');
  table.id = 'interfaces';
  const head = table.createTHead().insertRow();
  for (const x of ['exporter', 'ifIndex', 'name', 'speed', 'state', 'in', 'in use', 'out',
    'out use', 'in errors', 'in discards', 'out errors', 'out discards']) cell(head, x);
  const body = table.createTBody();
  const use = (v) => (v === null ? '–' : `${v.toFixed(1)} %`);
  for (const i of interfaces) {
    const tr = body.insertRow();
    tr.className = i.alarm ? 'alarm' : 'ok';
    tr.dataset.from = i.from;
    cell(tr, i.exporter);
    cell(tr, String(i.if_index));
    const name = cell(tr, i.name || '–');
    if (i.description) name.title = i.description;
    cell(tr, i.speed ? si(i.speed, 'b/s') : '–');
    cell(tr, i.up === null ? 'from flows' : i.up ? 'up' : 'down');
    cell(tr, si(i.in_bps, 'b/s'));
    cell(tr, use(i.in_percent)).dataset.key = 'in_percent';
    cell(tr, si(i.out_bps, 'b/s'));
    cell(tr, use(i.out_percent)).dataset.key = 'out_percent';
    for (const k of ['in_errors', 'in_discards', 'out_errors', 'out_discards']) {
      const td = cell(tr, i[k] === null ? '–' : si(i[k], ''));
      td.dataset.key = k;
      td.title = String(i[k]);
    }
  }
  return table;
}

function percent(v) {
  return v == null ? '—' : `${(v * 100).toFixed(1)} %`;
}

// One row per probe: its counters, its ring fill, and its state (alarm: losing packets or
// unreachable; warning: a ring has been 90 % full or more).
function probeTable(probes) {
  const table = document.createElement('table');
  table.id = 'probes';
  const head = table.createTHead().insertRow();
  for (const x of ['probe', 'received', 'recorded', 'dropped: kernel', 'tapflow', 'in transit',
    'ring fill', 'peak', 'state']) cell(head, x);
  const body = table.createTBody();
  for (const p of probes) {
    const tr = body.insertRow();
    tr.dataset.address = p.address;
    tr.className = p.alarm ? 'alarm' : p.warning ? 'warn' : 'ok';
    cell(tr, p.address);
    if (p.error) {
      const td = cell(tr, `unreachable: ${p.error}`);
      td.colSpan = 8;
      td.className = 'state';
      continue;
    }
    for (const k of ['received', 'recorded', 'dropped_kernel', 'dropped_ours',
      'dropped_in_transit']) {
      const td = cell(tr, si(p[k], ''));
      td.dataset.key = k;
      td.title = String(p[k]);
    }
    cell(tr, percent(p.ring_fill)).dataset.key = 'ring_fill';
    cell(tr, percent(p.ring_fill_peak)).dataset.key = 'ring_fill_peak';
    cell(tr, p.alarm ? 'LOSING PACKETS' : p.warning ? 'ring nearly full' : 'ok').className =
      'state';
  }
  return table;
}

// The flood alerts the store kept (`--detect`) over the window; a click opens the alert's
// view: its time range, filtered to its target, stacked by source address in packets/s.
function drawAlerts(r) {
  const table = $('alert-list');
  table.replaceChildren();
  $('alerts-note').textContent =
    r.unreadable ? `${r.unreadable} unreadable lines of the alert log left out` : '';
  const head = table.createTHead().insertRow();
  for (const h of ['start', 'end', 'target', 'kind', 'peak packets/s', 'limit', 'peak bits/s',
    'limit', 'top sources']) cell(head, h);
  const body = table.createTBody();
  const limit = (v, unit) => (v == null ? '–' : si(v, unit));
  for (const a of r.alerts) {
    const tr = body.insertRow();
    tr.className = a.state;
    tr.dataset.target = a.target;
    tr.dataset.filter = a.filter;
    tr.title = `${a.filter ? `filter: ${a.filter}, ` : ''}${time(a.view_from)} – ` +
      `${time(a.view_to)}\ntapflow query ${a.query}`;
    cell(tr, time(a.start_us));
    cell(tr, a.end_us != null ? time(a.end_us) : a.state === 'running' ? 'running' : 'never ended');
    cell(tr, a.target);
    cell(tr, a.kind);
    cell(tr, si(a.packets_per_second, ''));
    cell(tr, limit(a.threshold.packets_per_second, ''));
    cell(tr, si(a.bits_per_second, 'bit/s'));
    cell(tr, limit(a.threshold.bits_per_second, 'bit/s'));
    cell(tr, a.top_sources.slice(0, 3).map((x) => `${x.source} ${si(x.packets_per_second, '')}/s`)
      .join(', '));
    tr.addEventListener('click', () => openAlert(a));
  }
  if (!r.alerts.length) cell(body.insertRow(), 'no alerts in the window', 'muted');
}

function openAlert(a) {
  state.from = a.view_from;
  state.to = a.view_to;
  state.filter = a.filter;
  state.key = 'srcip';
  state.metric = 'packets';
  $('notice').hidden = true;
  writeState();
  refresh();
}

let flowRows = [];
let flowSort = { col: 'start_us', desc: false };
const FLOW_COLS = ['start_us', 'src', 'sport', 'dst', 'dport', 'protocol_name', 'packets',
  'bytes', 'exporter'];
function drawFlows() {
  const table = $('flows');
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  for (const c of FLOW_COLS) {
    const th = document.createElement('th');
    th.textContent = c === 'start_us' ? 'start' : c === 'protocol_name' ? 'proto' : c;
    th.addEventListener('click', () => {
      flowSort = { col: c, desc: flowSort.col === c ? !flowSort.desc : true };
      drawFlows();
    });
    head.append(th);
  }
  const rows = [...flowRows].sort((a, b) => {
    const x = a[flowSort.col] ?? '';
    const y = b[flowSort.col] ?? '';
    const r = typeof x === 'number' ? x - y : String(x).localeCompare(String(y));
    return flowSort.desc ? -r : r;
  });
  const body = table.createTBody();
  for (const f of rows) {
    const tr = body.insertRow();
    for (const c of FLOW_COLS) {
      let v = f[c];
      if (c === 'start_us') v = time(v);
      else if (c === 'bytes') v = bytes(v);
      else if (c === 'protocol_name') v = v ?? f.protocol;
      cell(tr, String(v));
    }
  }
}

async function searchFlows() {
  try {
    const r = await api('flows', { limit: 1000 });
    flowRows = r.flows;
    drawFlows();
    showError(null);
  } catch (e) {
    showError(e);
  }
}

// The default window was empty: go to the hour ending at the newest stored flow, and say so.
async function goToNewest() {
  const n = await fetch('/api/v1/newest').then((r) => r.json());
  if (n.newest_us === null || n.newest_us === undefined) return false;
  state.from = n.from;
  state.to = n.to;
  writeState();
  const el = $('notice');
  el.textContent = `No flows in the last hour: showing the newest hour with flows, ` +
    `${time(n.from)} – ${time(n.to)}.`;
  el.hidden = false;
  return true;
}

async function refresh() {
  $('filter').value = state.filter;
  $('key').value = state.key;
  $('metric').value = state.metric;
  $('window').value = state.from !== null ? 'zoom' : state.window;
  $('search-csv').href = `/api/v1/flows?${viewParams({ limit: 100000, format: 'csv' })}`;
  const mine = ++refreshes;
  showError(null);
  try {
    const series = api('series', { key: state.key, metric: state.metric, n: 6 }).then(async (s) => {
      if (mine !== refreshes) return;
      const first = defaulted;
      defaulted = false;
      if (first && s.flows === 0 && await goToNewest()) {
        refresh();
        return;
      }
      drawChart(s);
      if (window.tapflowTiming.chart === undefined) {
        window.tapflowTiming.chart = performance.now() - started;
      }
    });
    // The chart first: the tables' scans would share the server's cores with it.
    const drawn = series.catch(() => {});
    const tops = drawn.then(() => Promise.all(TOPS.map((k) =>
      api('top', { key: k, metric: state.metric, n: 10 }).then((t) => {
        if (mine === refreshes) drawTop(k, t);
      })))).then(() => {
      if (window.tapflowTiming.top === undefined) {
        window.tapflowTiming.top = performance.now() - started;
      }
    });
    // The health view after the tables: its scan of the flows would slow them.
    const health = tops.catch(() => {}).then(() => api('health'))
      .then((h) => { if (mine === refreshes) drawHealth(h); });
    const alerts = api('alerts').then((r) => { if (mine === refreshes) drawAlerts(r); });
    await Promise.all([series, tops, health, alerts]);
    if (flowRows.length) await searchFlows();
  } catch (e) {
    showError(e);
  }
  if (mine === refreshes) document.body.dataset.refreshed = String(mine);
  clearTimeout(timer);
  if (state.from === null) timer = setTimeout(refresh, 15000);
}

$('controls').addEventListener('submit', (ev) => {
  ev.preventDefault();
  state.filter = $('filter').value.trim();
  writeState();
  refresh();
});
$('clear').addEventListener('click', () => {
  state.filter = '';
  writeState();
  refresh();
});
$('window').addEventListener('change', () => {
  if ($('window').value === 'zoom') return;
  state.window = $('window').value;
  state.from = state.to = null;
  $('notice').hidden = true;
  writeState();
  refresh();
});
for (const id of ['key', 'metric']) {
  $(id).addEventListener('change', () => {
    state[id] = $(id).value;
    writeState();
    refresh();
  });
}
$('search-run').addEventListener('click', searchFlows);
window.addEventListener('popstate', () => {
  state = readState();
  refresh();
});
window.addEventListener('resize', () => {
  if (chart) chart.setSize({ width: Math.max(300, $('chart').clientWidth - 4), height: 300 });
});
refresh();
