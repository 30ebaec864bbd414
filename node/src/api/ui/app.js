// The CHORUS console's script. It polls this node's own JSON endpoints once a second
// (/status and /cluster, open to anyone who reaches the port; /tasks with the operator's read
// token) and draws what they say. Everything that comes from a node — ids, addresses, task
// output — is put in as text (textContent, SVG attributes), never parsed as markup.
'use strict';

(function () {
  const POLL_MS = 1000;
  // The timeline keeps this much history, and at most this many rows.
  const WINDOW_MS = 10 * 60 * 1000;
  const MAX_ROWS = 40;
  // A gap between two answers longer than this leaves the rows blank (nothing was seen).
  const GAP_MS = 3 * POLL_MS;
  // The simulator's colours (sim/src/svg.rs), so a console and a `chorus-sim svg` picture read
  // the same.
  const COLOURS = {
    admin: '#d62728',
    admin_unleased: '#f4b6b6',
    candidate: '#ff7f0e',
    pre_candidate: '#ffd27f',
    follower: '#9ecae1',
    down: '#dddddd',
  };
  const LEASE = '#5a0000';
  const SVG = 'http://www.w3.org/2000/svg';
  const TOKEN_KEY = 'chorus-token';
  const SHORT_ID = 8;

  const $ = (id) => document.getElementById(id);
  const opened = Date.now();

  // ---- the token: from the form, or once from the URL's fragment (#token=…, never sent to
  // the server), kept in this tab's sessionStorage only.
  function takeFragmentToken() {
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
      history.replaceState(null, '', location.pathname + location.search);
    }
  }
  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  async function get(path, withToken) {
    const headers = { Accept: 'application/json' };
    if (withToken && token()) headers.Authorization = 'Bearer ' + token();
    const r = await fetch(path, { headers, cache: 'no-store', credentials: 'omit' });
    let body = null;
    try {
      body = await r.json();
    } catch (e) {
      body = null;
    }
    return { ok: r.ok, status: r.status, body };
  }

  // ---- small DOM helpers (text only).
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function short(id) {
    return id.length > SHORT_ID ? id.slice(-SHORT_ID) : id;
  }
  function idCell(id) {
    const td = el('td', short(id));
    td.title = id;
    return td;
  }
  function roleBadge(role) {
    const safe = Object.prototype.hasOwnProperty.call(COLOURS, role) ? role : 'down';
    return el('span', role.replace('_', '-'), 'role role-' + safe);
  }
  function ms(v) {
    if (v === null || v === undefined) return '—';
    return v < 10000 ? v + ' ms' : (v / 1000).toFixed(1) + ' s';
  }

  // ---- what was seen, for the timeline: per node, segments of one state; election marks;
  // this node's lease while it held one.
  const rows = new Map(); // id -> [{from, to, state}]
  const marks = []; // {id, t, term}
  const leases = []; // {id, from, to}
  let lastSeen = null; // time of the last answer
  let lastAdmin = null;
  let lastTerm = null;

  function extend(list, t, value, same) {
    const last = list[list.length - 1];
    if (last && lastSeen !== null && t - lastSeen <= GAP_MS && same(last)) {
      last.to = t;
    } else {
      if (last && lastSeen !== null && t - lastSeen <= GAP_MS) last.to = t;
      list.push(Object.assign({ from: t, to: t }, value));
    }
  }

  function record(t, status, cluster) {
    const states = new Map();
    for (const m of cluster.members) {
      let state;
      if (m.node_id === status.node_id) {
        state = status.role;
        if (state === 'admin' && !status.lease_left_ms) state = 'admin_unleased';
      } else if (m.node_id === status.admin) {
        state = 'admin';
      } else {
        state = m.connected ? 'follower' : 'down';
      }
      states.set(m.node_id, state);
    }
    for (const id of rows.keys()) if (!states.has(id)) states.set(id, 'down');
    for (const [id, state] of states) {
      if (!rows.has(id)) {
        if (rows.size >= MAX_ROWS) continue;
        rows.set(id, []);
      }
      extend(rows.get(id), t, { state }, (s) => s.state === state);
    }
    if (status.admin && (status.admin !== lastAdmin || status.term !== lastTerm) && lastSeen !== null) {
      marks.push({ id: status.admin, t, term: status.term });
    }
    if (status.role === 'admin' && status.lease_left_ms) {
      const open = leases[leases.length - 1];
      if (open && open.id === status.node_id && lastSeen !== null && t - lastSeen <= GAP_MS && open.to >= lastSeen) {
        open.to = t;
      } else {
        leases.push({ id: status.node_id, from: t, to: t });
      }
    }
    // A spell without a known admin marks nothing: the next admin is compared with the last.
    if (status.admin) {
      lastAdmin = status.admin;
      lastTerm = status.term;
    }
    lastSeen = t;
    // Bounded: forget what left the window.
    const keep = t - WINDOW_MS;
    for (const segs of rows.values()) {
      while (segs.length && segs[0].to < keep) segs.shift();
    }
    while (marks.length && marks[0].t < keep) marks.shift();
    while (leases.length && leases[0].to < keep) leases.shift();
  }

  // ---- the timeline, in the simulator's visual language: one row per node coloured by role,
  // the lease as a dark band along the bottom of its admin's row, a black tick with the term
  // at each new admin, a time axis.
  const W = 1000;
  const LEFT = 90;
  const RIGHT = 20;
  const ROW = 16;
  const TOP = 34;
  const AXIS = 30;
  const LEASE_HEIGHT = 4;

  function drawTimeline(now) {
    const ids = [...rows.keys()];
    const height = TOP + ids.length * ROW + AXIS;
    const root = svg('svg', { xmlns: SVG, width: W, height, viewBox: `0 0 ${W} ${height}`, 'font-family': 'monospace', 'font-size': 10 });
    root.appendChild(svg('rect', { width: W, height, fill: '#ffffff' }));
    const start = Math.max(opened, now - WINDOW_MS);
    const span = Math.max(now - start, 30000);
    const x = (t) => LEFT + ((t - start) / span) * (W - LEFT - RIGHT);
    // Legend.
    let lx = LEFT;
    const item = (fill, label) => {
      root.appendChild(svg('rect', { x: lx, y: 8, width: 10, height: 10, fill }));
      root.appendChild(svg('text', { x: lx + 13, y: 17 }, label));
      lx += 13 + label.length * 6.1 + 14;
    };
    for (const role of ['admin', 'candidate', 'pre_candidate', 'follower', 'down']) {
      item(COLOURS[role], role === 'follower' ? 'follower / reached' : role === 'down' ? 'not reached' : role.replace('_', '-'));
    }
    item(COLOURS.admin_unleased, 'admin, no lease');
    item(LEASE, 'lease');
    item('#000', 'T: new admin of term T');
    ids.forEach((id, i) => {
      const y = TOP + i * ROW;
      for (const s of rows.get(id)) {
        root.appendChild(svg('rect', {
          class: 'band', 'data-state': s.state,
          x: x(s.from).toFixed(1), y: y + 1, width: Math.max(x(s.to) - x(s.from), 0.5).toFixed(1), height: ROW - 2,
          fill: COLOURS[s.state] || COLOURS.down,
        }));
      }
      const label = svg('text', { x: 4, y: y + ROW - 4 });
      const title = svg('title', {}, id);
      label.appendChild(title);
      label.appendChild(document.createTextNode(short(id) + (id === $('self').textContent ? ' *' : '')));
      root.appendChild(label);
    });
    for (const l of leases) {
      const i = ids.indexOf(l.id);
      if (i < 0) continue;
      root.appendChild(svg('rect', {
        class: 'lease', x: x(l.from).toFixed(1), y: TOP + (i + 1) * ROW - 1 - LEASE_HEIGHT,
        width: Math.max(x(l.to) - x(l.from), 0.5).toFixed(1), height: LEASE_HEIGHT, fill: LEASE,
      }));
    }
    for (const m of marks) {
      const i = ids.indexOf(m.id);
      if (i < 0) continue;
      const y = TOP + i * ROW;
      const px = x(m.t);
      root.appendChild(svg('line', { x1: px, y1: y, x2: px, y2: y + ROW, stroke: '#000', 'stroke-width': 2 }));
      root.appendChild(svg('text', { class: 'term', x: px + 3, y: y + ROW - 4, 'font-size': 9, 'font-weight': 'bold', fill: '#000' }, 'T' + m.term));
    }
    // Axis: seconds since the page opened, at a round step.
    const bottom = TOP + ids.length * ROW;
    root.appendChild(svg('line', { x1: LEFT, y1: bottom, x2: W - RIGHT, y2: bottom, stroke: '#444' }));
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600].map((s) => s * 1000);
    const step = steps.find((s) => span / s <= 12) || 600000;
    for (let t = Math.ceil((start - opened) / step) * step; opened + t <= start + span; t += step) {
      const px = x(opened + t);
      root.appendChild(svg('line', { x1: px, y1: TOP, x2: px, y2: bottom, stroke: '#000', 'stroke-opacity': 0.08 }));
      root.appendChild(svg('line', { x1: px, y1: bottom, x2: px, y2: bottom + 4, stroke: '#444' }));
      const label = t >= 60000 && t % 60000 === 0 ? t / 60000 + 'm' : t / 1000 + 's';
      root.appendChild(svg('text', { x: px, y: bottom + 15, 'text-anchor': 'middle' }, label));
    }
    root.appendChild(svg('text', { x: W - RIGHT, y: bottom + 26, 'text-anchor': 'end' }, 'time since this page opened'));
    $('timeline').replaceChildren(root);
  }

  // ---- the cluster.
  function drawCluster(status, cluster) {
    $('admin').textContent = status.admin || 'none known';
    $('term').textContent = status.term;
    $('role').replaceChildren(roleBadge(status.role));
    $('lease').textContent = status.role === 'admin' ? ms(status.lease_left_ms) : 'held by the admin';
    $('electorate').textContent = status.electorate.length
      ? `${status.electorate.length} voters, version ${status.electorate_version} (proposed in term ${status.electorate_term})`
      : 'not formed yet';
    $('voters').textContent = status.voters_connected
      ? `${status.voters_connected.connected} of ${status.voters_connected.others} others`
      : '—';
    $('waiting').textContent = status.waiting || '';
    const body = document.createElement('tbody');
    for (const m of cluster.members) {
      const self = m.node_id === status.node_id;
      const tr = el('tr');
      if (self) tr.className = 'self';
      tr.dataset.node = m.node_id;
      tr.appendChild(idCell(m.node_id));
      const role = el('td');
      if (self) role.appendChild(roleBadge(status.role));
      else if (m.node_id === status.admin) role.appendChild(roleBadge('admin'));
      else role.textContent = m.connected ? '—' : 'not reached';
      tr.appendChild(role);
      tr.appendChild(el('td', self ? status.term : m.node_id === status.admin ? status.term : '—'));
      tr.appendChild(el('td', m.voter ? 'yes' : 'no'));
      tr.appendChild(el('td', m.connected ? 'yes' : 'no'));
      tr.appendChild(el('td', self ? '—' : m.last_contact_ms === null || m.last_contact_ms === undefined ? 'never' : ms(m.last_contact_ms) + ' ago'));
      tr.appendChild(el('td', self && status.role === 'admin' ? ms(status.lease_left_ms) : '—'));
      tr.appendChild(el('td', m.http ? m.http.split('#')[0] : '—'));
      body.appendChild(tr);
    }
    $('nodes').replaceChild(body, $('nodes').tBodies[0]);
  }

  async function pollCluster() {
    try {
      const [s, c] = await Promise.all([get('/status'), get('/cluster')]);
      if (!s.ok || !c.ok || !s.body || !c.body) throw new Error(`status ${s.status}, cluster ${c.status}`);
      const now = Date.now();
      record(now, s.body, c.body);
      drawCluster(s.body, c.body);
      drawTimeline(now);
      $('conn').textContent = 'updated ' + new Date(now).toLocaleTimeString();
      $('conn').className = 'muted';
    } catch (e) {
      $('conn').textContent = 'this node does not answer (' + e.message + ')';
      $('conn').className = 'bad';
      drawTimeline(Date.now());
    }
  }

  // ---- tasks.
  let selected = null;

  function showTokenState(text, bad) {
    $('token-state').textContent = text;
    $('token-state').className = bad ? 'error' : 'muted';
  }

  function field(dl, name, value) {
    if (value === undefined || value === null || value === '') return;
    dl.appendChild(el('dt', name));
    dl.appendChild(el('dd', value));
  }

  function drawTask(t) {
    $('task').hidden = false;
    $('task-id').textContent = t.task;
    const dl = document.createElement('dl');
    dl.id = 'task-fields';
    const r = t.result || {};
    field(dl, 'phase', t.phase);
    field(dl, 'status', r.status);
    field(dl, 'worker', r.worker || t.worker);
    field(dl, 'attempt', r.attempt || t.attempt);
    field(dl, 'exit code', r.exit_code);
    field(dl, 'signal', r.signal);
    field(dl, 'duration', r.duration_ms !== undefined ? ms(r.duration_ms) : undefined);
    field(dl, 'error', r.error);
    field(dl, 'waiting for', t.pending);
    field(dl, 'cancel asked', t.cancel ? 'yes' : undefined);
    field(dl, 'image', t.spec && t.spec.image);
    field(dl, 'command', t.spec && Array.isArray(t.spec.command) ? JSON.stringify(t.spec.command) : undefined);
    $('task-fields').replaceWith(dl);
    const tail = (text, cut) => (cut ? `[${cut} earlier bytes not kept]\n` : '') + (text || '');
    $('task-stdout').textContent = t.result ? tail(r.stdout, r.stdout_truncated_bytes) : '(no output until it finishes)';
    $('task-stderr').textContent = t.result ? tail(r.stderr, r.stderr_truncated_bytes) : '';
  }

  async function pollTasks() {
    if (!token()) {
      showTokenState('no token: tasks are not shown', false);
      $('tasks-state').textContent = '';
      return;
    }
    try {
      const state = $('state').value;
      const r = await get('/tasks?state=' + encodeURIComponent(state), true);
      if (!r.ok) {
        const why = r.body && r.body.error ? r.body.error : 'HTTP ' + r.status;
        showTokenState(why, r.status === 401 || r.status === 403);
        return;
      }
      showTokenState('token in use (this tab only)', false);
      const body = document.createElement('tbody');
      for (const t of r.body.tasks) {
        const tr = el('tr');
        tr.dataset.task = t.task;
        if (t.task === selected) tr.className = 'selected';
        tr.appendChild(el('td', t.task));
        tr.appendChild(el('td', t.phase));
        tr.appendChild(el('td', t.status || '—'));
        tr.appendChild(el('td', t.exit_code === undefined ? '—' : t.exit_code));
        tr.appendChild(t.worker ? idCell(t.worker) : el('td', '—'));
        tr.appendChild(el('td', t.pending || ''));
        tr.addEventListener('click', () => {
          selected = t.task;
          pollTasks();
        });
        body.appendChild(tr);
      }
      $('tasks').replaceChild(body, $('tasks').tBodies[0]);
      $('tasks-state').textContent = `${r.body.tasks.length} task(s) submitted to this node`;
      if (selected) {
        const d = await get('/tasks/' + encodeURIComponent(selected), true);
        if (d.ok && d.body) drawTask(d.body);
      }
    } catch (e) {
      $('tasks-state').textContent = 'tasks: ' + e.message;
    }
  }

  // ---- wiring.
  function start() {
    takeFragmentToken();
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const value = $('token').value.trim();
      $('token').value = '';
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      pollTasks();
    });
    $('forget').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      $('tasks').replaceChild(document.createElement('tbody'), $('tasks').tBodies[0]);
      $('task').hidden = true;
      selected = null;
      pollTasks();
    });
    $('state').addEventListener('change', () => pollTasks());
    // One poll at a time: the next starts a second after the last ended, so a slow node is
    // never asked faster than it answers.
    const loop = async () => {
      await Promise.all([pollCluster(), pollTasks()]);
      setTimeout(loop, POLL_MS);
    };
    loop();
  }

  start();
})();
