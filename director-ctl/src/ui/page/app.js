// The map page: country outlines from the vendored TopoJSON, the feed's cells and sites
// over them, redrawn when the table's generation changes. No framework: the page is a
// few hundred elements and one poll.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
// Equirectangular, cropped to where people live (Antarctica has no clients).
const TOP = 84, BOTTOM = -58, K = 1000 / 360;
const W = 1000, H = Math.round((TOP - BOTTOM) * K);
const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#e377c2',
  '#17becf', '#bcbd22', '#d62728', '#393b79', '#637939', '#843c39'];
const UNCOVERED = '#9e9e9e';

const $ = (id) => document.getElementById(id);
const x = (lon) => (lon + 180) * K;
const y = (lat) => (TOP - lat) * K;

let feed = null;
let drawn = null; // the generation (and service) whose cells are on the page
let colours = new Map();

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function html(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

// TopoJSON: quantized, delta-encoded arcs; rings are lists of arc indices (~i reversed).
function countries(topo) {
  const [sx, sy] = topo.transform.scale, [tx, ty] = topo.transform.translate;
  const arcs = topo.arcs.map((arc) => {
    let a = 0, b = 0;
    return arc.map(([dx, dy]) => { a += dx; b += dy; return [a * sx + tx, b * sy + ty]; });
  });
  const ring = (r) => {
    const pts = [];
    for (const i of r) {
      const arc = i >= 0 ? arcs[i] : arcs[~i].slice().reverse();
      pts.push(...(pts.length ? arc.slice(1) : arc));
    }
    return pts;
  };
  const path = (pts) => {
    let d = '', prev = null;
    for (const [lon, lat] of pts) {
      // A jump across the antimeridian starts a new piece instead of a line across the map.
      const cmd = prev === null || Math.abs(lon - prev) > 180 ? 'M' : 'L';
      d += cmd + x(lon).toFixed(1) + ',' + y(Math.max(BOTTOM - 2, lat)).toFixed(1);
      prev = lon;
    }
    return d + 'Z';
  };
  const g = $('countries');
  for (const geo of topo.objects.countries.geometries) {
    const polys = geo.type === 'Polygon' ? [geo.arcs] : geo.type === 'MultiPolygon' ? geo.arcs : [];
    const d = polys.map((p) => p.map((r) => path(ring(r))).join('')).join('');
    if (!d) continue;
    const p = el('path', { d, 'data-country': (geo.properties && geo.properties.name) || geo.id }, g);
    el('title', {}, p).textContent = (geo.properties && geo.properties.name) || '';
  }
}

function colour(site) {
  return site === null || site === undefined ? UNCOVERED : colours.get(site) || UNCOVERED;
}

function pct(v) {
  return (100 * v).toFixed(v < 0.1 ? 1 : 0) + '%';
}

function drawCells(f) {
  const g = $('cells');
  g.replaceChildren();
  const side = f.grid * K;
  for (const c of f.cells) {
    const r = el('rect', {
      x: x(c.lon).toFixed(2), y: y(c.lat + f.grid).toFixed(2),
      width: side.toFixed(2), height: side.toFixed(2),
      fill: colour(c.site), 'fill-opacity': (0.35 + 0.6 * c.share).toFixed(2),
      class: 'cell', 'data-site': c.site === null ? '' : c.site,
      'data-lat': c.lat, 'data-lon': c.lon, 'data-share': c.share.toFixed(3),
      'data-sample': c.sample,
    }, g);
    const split = c.sites.map((s) => s.site + ' ' + pct(s.share)).join(', ') || 'uncovered';
    el('title', {}, r).textContent =
      `${c.lat}°, ${c.lon}°: ${c.clients.toFixed(1)} client networks → ${split}`;
    r.addEventListener('click', () => {
      for (const s of g.querySelectorAll('.selected')) s.classList.remove('selected');
      r.classList.add('selected');
      $('address').value = c.sample;
      explain(c.sample);
    });
  }
}

function health(site) {
  const s = site.servers;
  if (!s.length) return 'unknown';
  const out = s.filter((v) => v.out || v.health === 'down').length;
  return out === 0 ? 'up' : out === s.length ? 'down' : 'partial';
}

function drawSites(f) {
  const g = $('sites');
  g.replaceChildren();
  for (const s of f.sites) {
    if (s.lat === null || s.lon === null) continue;
    const m = el('g', { class: 'site', 'data-site': s.name, 'data-health': health(s) }, g);
    el('circle', { cx: x(s.lon).toFixed(1), cy: y(s.lat).toFixed(1), r: 6, fill: colour(s.name) }, m);
    el('text', { x: (x(s.lon) + 8).toFixed(1), y: (y(s.lat) + 3).toFixed(1) }, m).textContent = s.name;
    el('title', {}, m).textContent = `${s.name}: ${pct(s.share)} of clients; ` +
      s.servers.map((v) => `${v.name} ${v.out ? 'out' : v.health}`).join(', ');
  }
}

function drawLegend(f) {
  const box = $('legend');
  box.replaceChildren();
  for (const s of f.sites) {
    const d = html('div', undefined, 'legend-site');
    d.dataset.site = s.name;
    const head = html('div');
    const sw = html('span', undefined, 'swatch');
    sw.style.background = colour(s.name);
    head.append(sw, html('span', s.name, 'name'), ` ${pct(s.share)} of clients`);
    d.append(head);
    if (s.rate !== null) {
      const cap = s.capacity !== null ? ` of ${s.capacity.toFixed(0)}/s` : '';
      d.append(html('div', `demand ${s.rate.toFixed(1)}/s${cap}`, 'muted'));
      if (s.load !== null) {
        const bar = html('div', undefined, s.load > 1 ? 'bar over' : 'bar');
        const fill = html('div');
        fill.style.width = Math.min(100, 100 * s.load).toFixed(0) + '%';
        bar.append(fill);
        d.append(bar);
      }
    }
    const ul = html('ul', undefined, 'servers');
    for (const v of s.servers) {
      const li = html('li', v.name + (v.out ? ' (out)' : v.health === 'up' ? '' : ` (${v.health})`),
        v.out ? 'out' : v.health);
      if (v.load !== null) li.append(` load ${v.load.toFixed(2)}`);
      if (v.answers !== null) li.append(` · ${v.answers.toFixed(1)} answers/s`);
      ul.append(li);
    }
    d.append(ul);
    box.append(d);
  }
  if (f.uncovered > 0) {
    const d = html('div', undefined, 'legend-site');
    const sw = html('span', undefined, 'swatch');
    sw.style.background = UNCOVERED;
    d.append(sw, `no entry: ${pct(f.uncovered / f.clients)} of clients`);
    box.append(d);
  }
}

function ago(s) {
  if (s < 1) return 'now';
  if (s < 90) return `${s.toFixed(0)} s ago`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

// A fleet's publisher adds the fleet as `fleet status` reads it: each edge's applied
// version against the current one, and the publishers.
function drawFleet(f) {
  const box = $('fleetbox');
  const st = f.fleet;
  box.hidden = !st && !f.fleet_error;
  if (box.hidden) return;
  const out = [];
  if (f.fleet_error) out.push(html('p', `store: ${f.fleet_error}` + (st ? ' (as last read)' : ''), 'error'));
  if (!st) { $('fleet').replaceChildren(...out); return; }
  const cur = st.current === null ? 'none' : String(st.current);
  const count = (s) => st.edges.filter((e) => e.state === s).length;
  const head = html('p', `version ${cur} current` +
    (st.published_by ? ` (by ${st.published_by})` : '') +
    ` · ${st.edges.length} edges: ${count('current')} current, ${count('lagging')} lagging, ` +
    `${count('silent')} silent`);
  head.id = 'fleet-current';
  head.dataset.current = st.current === null ? '' : String(st.current);
  out.push(head);
  const t = html('table');
  t.id = 'edges';
  const top = html('tr');
  for (const h of ['edge', 'site', 'version', 'state', 'program', 'seen']) top.append(html('th', h));
  t.append(top);
  for (const e of st.edges) {
    const tr = html('tr', undefined, e.state);
    tr.dataset.edge = e.name;
    tr.dataset.version = e.version === null ? '' : String(e.version);
    tr.dataset.state = e.state;
    tr.dataset.program = e.program || '';
    const v = e.version === null ? 'none' : e.current ? String(e.version) : `${e.version} of ${cur}`;
    // Every program is director: its version is what tells edges apart.
    const program = e.program ? e.program.replace(/^director /, '') : '—';
    const cells = [e.name, e.site, v, e.state, program, ago(e.report_age_s)];
    cells.forEach((c, i) => tr.append(html('td', c, ['name', 'site', 'version', 'state', 'program', 'seen'][i])));
    tr.title = `holds version ${e.version === null ? 'none' : e.version} for ${ago(e.version_age_s).replace(' ago', '')}` +
      (e.live ? '' : '; no lease (gone or cut off)');
    t.append(tr);
  }
  out.push(t);
  const pubs = html('ul');
  pubs.id = 'publishers';
  for (const p of st.publishers) {
    const li = html('li', `publisher ${p.name}: ${p.leader ? 'leading' : 'standing by'}`);
    li.dataset.publisher = p.name;
    li.dataset.leader = String(p.leader);
    pubs.append(li);
  }
  out.push(pubs);
  if (st.overlay.length) {
    out.push(html('p', 'down by quorum: ' + st.overlay.map((d) => `${d.service}/${d.server}`).join(', '), 'muted'));
  }
  $('fleet').replaceChildren(...out);
}

function status(f) {
  const fleet = f.fleet_version !== null ? ` · fleet version ${f.fleet_version}` : '';
  $('status').textContent = `table ${f.generation.slice(0, 8)}${fleet} · ${f.cells.length} cells · ` +
    `updated ${new Date().toLocaleTimeString()}`;
  document.body.dataset.generation = f.generation;
  document.body.dataset.service = f.service;
}

function fillServices(f) {
  const sel = $('service');
  const have = [...sel.options].map((o) => o.value).join('\n');
  if (have === f.services.join('\n')) return;
  sel.replaceChildren(...f.services.map((s) => { const o = html('option', s); o.value = s; return o; }));
  sel.value = f.service;
}

async function poll() {
  const svc = $('service').value;
  try {
    const r = await fetch('/ui/feed' + (svc ? '?service=' + encodeURIComponent(svc) : ''));
    if (!r.ok) throw new Error(await r.text());
    const f = await r.json();
    feed = f;
    colours = new Map(f.sites.map((s, i) => [s.name, PALETTE[i % PALETTE.length]]));
    fillServices(f);
    const key = f.service + ' ' + f.generation;
    if (drawn !== key) {
      drawCells(f);
      drawn = key;
    }
    drawSites(f);
    drawLegend(f);
    drawFleet(f);
    status(f);
  } catch (e) {
    $('status').textContent = 'feed: ' + e.message;
  }
}

async function explain(address) {
  const panel = $('panel');
  const svc = (feed && feed.service) || $('service').value;
  panel.replaceChildren(html('p', `explaining ${address}…`, 'muted'));
  try {
    const r = await fetch(`/explain?service=${encodeURIComponent(svc)}&client=${encodeURIComponent(address)}`);
    const text = await r.text();
    if (!r.ok) throw new Error(text.trim());
    const e = JSON.parse(text);
    const out = [];
    out.push(html('p', `${e.client} → ${e.service}`, 'name'));
    const loc = e.servers.map((s) => s.location).find((l) => l);
    if (loc) {
      const where = loc.lat !== null ? `${loc.lat.toFixed(2)}°, ${loc.lon.toFixed(2)}°` : loc.node;
      out.push(html('p', `located by ${loc.prefix}: ${where}`, 'muted'));
    }
    const picks = e.pick.odds.map((o) => `${o.server} ${pct(o.share)}`).join(', ');
    const answer = html('p', `answered with: ${picks || 'nothing'}`);
    answer.id = 'explain-answer';
    out.push(answer);
    const t = html('table');
    const head = html('tr');
    for (const h of ['server', 'site', 'route', 'rtt']) head.append(html('th', h));
    t.append(head);
    for (const s of e.servers) {
      const tr = html('tr');
      const route = s.bgp ? `${s.bgp.prefix} AS${s.bgp.exit_as} len ${s.bgp.as_path_len}` : '—';
      const rtt = s.rtt ? `${s.rtt.ms.toFixed(1)} ms` : '—';
      for (const v of [s.server, s.site, route, rtt]) tr.append(html('td', v));
      t.append(tr);
    }
    out.push(t);
    const raw = html('details');
    raw.append(html('summary', 'explain --json'), html('pre', JSON.stringify(e, null, 2)));
    out.push(raw);
    panel.replaceChildren(...out);
  } catch (err) {
    panel.replaceChildren(html('p', err.message, 'error'));
  }
}

async function start() {
  const map = $('map');
  map.setAttribute('viewBox', `0 0 ${W} ${H}`);
  $('service').addEventListener('change', () => { drawn = null; poll(); });
  $('ask').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const a = $('address').value.trim();
    if (a) explain(a);
  });
  try {
    const r = await fetch('/ui/world.json');
    countries(await r.json());
  } catch (e) {
    $('status').textContent = 'country outlines: ' + e.message;
  }
  const every = Math.max(0.5, parseFloat(document.body.dataset.refresh) || 2) * 1000;
  const loop = async () => { await poll(); setTimeout(loop, every); };
  loop();
}

start();
