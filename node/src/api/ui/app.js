// The CHORUS console's script. It polls this node's own JSON endpoints once a second — /status
// (its own state), /status/history (what it saw lately: the timeline), /cluster/status (each
// node's own state, which this node asks them for) — all open to anyone who reaches the port,
// and /tasks with the operator's read token, and draws what they say. Everything that comes
// from a node — ids, addresses, task output — is put in as text (textContent, SVG attributes),
// never parsed as markup.
'use strict';

(function () {
  const POLL_MS = 1000;
  // The timeline draws this much history, and at most this many rows.
  const WINDOW_MS = 10 * 60 * 1000;
  const MAX_ROWS = 40;
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

  // ---- the timeline's model: this node's history (/status/history) replayed into, per node,
  // segments of one state; a mark at each new admin; this node's lease while it held one. Times
  // are this page's clock: a node time plus `offset`, fixed when the history is (re)loaded.
  const model = {
    self: null,
    epoch: null,
    last: 0,
    offset: 0,
    since: 0, // page time the history starts at
    seen: null, // {role, term, admin, admin_term, leased, peers: Set}
    rows: new Map(), // id -> [{from, to, state}]
    marks: [], // {id, t, term}
    leases: [], // {id, from, to, open}
    lastAdmin: null,
    lastTerm: null,
  };

  // Every row's state as this node saw it: its own role (pale while admin without a lease);
  // of the others, red for the admin it knew, blue for a peer connected to it, grey otherwise.
  function rowStates(seen) {
    const states = new Map();
    let own = seen.role;
    if (own === 'admin' && !seen.leased) own = 'admin_unleased';
    states.set(model.self, own);
    for (const id of seen.peers) states.set(id, 'follower');
    // An admin whose heartbeats stopped (this node's /status says so) is drawn as not heard,
    // not as the admin, while this node still names it (issue 54, item 6).
    if (seen.admin && seen.admin !== model.self) states.set(seen.admin, seen.silent ? 'down' : 'admin');
    for (const id of model.rows.keys()) if (!states.has(id)) states.set(id, 'down');
    return states;
  }

  // Carries every row's state up to page time `t`.
  function stamp(t) {
    for (const [id, state] of rowStates(model.seen)) {
      if (!model.rows.has(id)) {
        if (model.rows.size >= MAX_ROWS) continue;
        model.rows.set(id, []);
      }
      const segs = model.rows.get(id);
      const last = segs[segs.length - 1];
      if (last) last.to = t;
      if (!last || last.state !== state) segs.push({ from: t, to: t, state });
    }
    const lease = model.leases[model.leases.length - 1];
    if (lease && lease.open) lease.to = t;
  }

  function apply(c, t) {
    const seen = model.seen;
    switch (c.kind) {
      case 'role':
        seen.role = String(c.role);
        seen.term = c.term;
        break;
      case 'admin':
        seen.admin = c.admin;
        seen.admin_term = c.term;
        seen.silent = false;
        // A spell without a known admin marks nothing: the next admin is compared with the last.
        if (c.admin && (c.admin !== model.lastAdmin || c.term !== model.lastTerm)) {
          model.marks.push({ id: c.admin, t, term: c.term });
        }
        if (c.admin) {
          model.lastAdmin = c.admin;
          model.lastTerm = c.term;
        }
        break;
      case 'lease':
        seen.leased = !!c.held;
        if (c.held) model.leases.push({ id: model.self, from: t, to: t, open: true });
        else if (model.leases.length) model.leases[model.leases.length - 1].open = false;
        break;
      case 'peer':
        if (c.up) seen.peers.add(String(c.node));
        else seen.peers.delete(String(c.node));
        break;
    }
  }

  // Starts over from a full answer: the state at its start, then its changes.
  function reset(h, receivedAt) {
    model.self = String(h.node_id);
    model.epoch = h.epoch;
    model.offset = receivedAt - h.now_ms;
    model.since = h.start_ms + model.offset;
    model.rows.clear();
    model.marks.length = 0;
    model.leases.length = 0;
    const s = h.start;
    model.seen = { role: String(s.role), term: s.term, admin: s.admin, admin_term: s.admin_term, leased: !!s.leased, peers: new Set(s.peers.map(String)) };
    model.lastAdmin = s.admin;
    model.lastTerm = s.admin_term;
    if (s.leased) model.leases.push({ id: model.self, from: model.since, to: model.since, open: true });
    stamp(model.since);
  }

  // Takes in an answer of /status/history; returns this page's time of the node's `now`.
  function absorb(h, receivedAt) {
    if (h.full || h.epoch !== model.epoch) reset(h, receivedAt);
    for (const c of h.changes) {
      const t = c.t_ms + model.offset;
      apply(c, t);
      stamp(t);
    }
    const now = h.now_ms + model.offset;
    stamp(now);
    model.last = h.last_seq;
    // Bounded: forget what left the window.
    const keep = now - WINDOW_MS;
    for (const segs of model.rows.values()) {
      while (segs.length > 1 && segs[0].to < keep) segs.shift();
    }
    while (model.marks.length && model.marks[0].t < keep) model.marks.shift();
    while (model.leases.length && model.leases[0].to < keep) model.leases.shift();
    return now;
  }

  // ---- the timeline, in the simulator's visual language: one row per node coloured by role,
  // the lease as a dark band along the bottom of its admin's row, a black tick with the term
  // at each new admin, a time axis on this browser's clock.
  const W = 1000;
  const LEFT = 90;
  const RIGHT = 20;
  const ROW = 16;
  const TOP = 34;
  const AXIS = 30;
  const LEASE_HEIGHT = 4;

  function drawTimeline(now) {
    const others = [...model.rows.keys()].filter((id) => id !== model.self).sort();
    const ids = model.rows.has(model.self) ? [model.self, ...others] : others;
    const height = TOP + ids.length * ROW + AXIS;
    const root = svg('svg', { xmlns: SVG, width: W, height, viewBox: `0 0 ${W} ${height}`, 'font-family': 'monospace', 'font-size': 10 });
    root.appendChild(svg('rect', { width: W, height, fill: '#ffffff' }));
    const start = Math.max(model.since || now, now - WINDOW_MS);
    const span = Math.max(now - start, 30000);
    const x = (t) => LEFT + ((Math.max(t, start) - start) / span) * (W - LEFT - RIGHT);
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
      for (const s of model.rows.get(id)) {
        if (s.to < start) continue;
        root.appendChild(svg('rect', {
          class: 'band', 'data-state': s.state, 'data-node': id,
          x: x(s.from).toFixed(1), y: y + 1, width: Math.max(x(s.to) - x(s.from), 0.5).toFixed(1), height: ROW - 2,
          fill: COLOURS[s.state] || COLOURS.down,
        }));
      }
      const label = svg('text', { x: 4, y: y + ROW - 4 });
      const title = svg('title', {}, id);
      label.appendChild(title);
      label.appendChild(document.createTextNode(short(id) + (id === model.self ? ' *' : '')));
      root.appendChild(label);
    });
    for (const l of model.leases) {
      const i = ids.indexOf(l.id);
      if (i < 0 || l.to < start) continue;
      root.appendChild(svg('rect', {
        class: 'lease', x: x(l.from).toFixed(1), y: TOP + (i + 1) * ROW - 1 - LEASE_HEIGHT,
        width: Math.max(x(l.to) - x(l.from), 0.5).toFixed(1), height: LEASE_HEIGHT, fill: LEASE,
      }));
    }
    for (const m of model.marks) {
      const i = ids.indexOf(m.id);
      if (i < 0 || m.t < start) continue;
      const y = TOP + i * ROW;
      const px = x(m.t);
      root.appendChild(svg('line', { x1: px, y1: y, x2: px, y2: y + ROW, stroke: '#000', 'stroke-width': 2 }));
      root.appendChild(svg('text', { class: 'term', 'data-node': m.id, x: px + 3, y: y + ROW - 4, 'font-size': 9, 'font-weight': 'bold', fill: '#000' }, 'T' + m.term));
    }
    // Axis: this browser's clock, at a round step; a dashed line where this page opened.
    const bottom = TOP + ids.length * ROW;
    root.appendChild(svg('line', { x1: LEFT, y1: bottom, x2: W - RIGHT, y2: bottom, stroke: '#444' }));
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600].map((s) => s * 1000);
    const step = steps.find((s) => span / s <= 8) || 600000;
    for (let t = Math.ceil(start / step) * step; t <= start + span; t += step) {
      const px = x(t);
      root.appendChild(svg('line', { x1: px, y1: TOP, x2: px, y2: bottom, stroke: '#000', 'stroke-opacity': 0.08 }));
      root.appendChild(svg('line', { x1: px, y1: bottom, x2: px, y2: bottom + 4, stroke: '#444' }));
      const label = new Date(t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
      root.appendChild(svg('text', { x: px, y: bottom + 15, 'text-anchor': 'middle' }, label));
    }
    if (opened > start) {
      const px = x(opened);
      root.appendChild(svg('line', { class: 'opened', x1: px, y1: TOP - 4, x2: px, y2: bottom, stroke: '#444', 'stroke-dasharray': '3 3' }));
    }
    root.appendChild(svg('text', { x: W - RIGHT, y: bottom + 26, 'text-anchor': 'end' }, 'this browser\u2019s clock; dashed: this page opened'));
    $('timeline').replaceChildren(root);
  }

  // ---- this node's own state.
  function drawSummary(status) {
    // An admin whose heartbeats stopped is still named until this node's election timeout:
    // say it is not heard, rather than that it holds the lease (issue 54, item 6).
    const silent = status.admin_silent && status.admin;
    $('admin').textContent = status.admin || 'none known';
    $('admin').className = silent ? 'bad' : '';
    $('term').textContent = status.term;
    $('role').replaceChildren(roleBadge(status.role));
    $('lease').textContent = status.role === 'admin' ? ms(status.lease_left_ms)
      : silent ? `none: the admin not heard for ${ms(status.admin_heard_ms)} (its heartbeats stopped; electing)`
      : status.admin ? 'held by the admin' : 'none: no admin';
    $('electorate').textContent = status.electorate.length
      ? `${status.electorate.length} voters, v${status.electorate_version} of term ${status.electorate_term}`
      : 'not formed yet';
    $('voters').textContent = status.voters_connected
      ? `${status.voters_connected.connected} of ${status.voters_connected.others} others`
      : '—';
    $('waiting').textContent = status.waiting || '';
  }

  let historyAt = null; // this page's time of the node's `now` in the last history answer

  async function pollSelf() {
    const since = model.epoch === null ? '' : `?epoch=${encodeURIComponent(model.epoch)}&after=${encodeURIComponent(model.last)}`;
    try {
      const [s, h] = await Promise.all([get('/status'), get('/status/history' + since)]);
      if (!s.ok || !h.ok || !s.body || !h.body) throw new Error(`status ${s.status}, history ${h.status}`);
      const received = Date.now();
      drawSummary(s.body);
      historyAt = absorb(h.body, received);
      // Whether its admin is heard is /status's to say; drawn from now on.
      model.seen.silent = !!s.body.admin_silent && !!model.seen.admin;
      stamp(historyAt);
      drawTimeline(historyAt);
      $('conn').textContent = 'updated ' + new Date(received).toLocaleTimeString();
      $('conn').className = 'muted';
    } catch (e) {
      $('conn').textContent = 'this node does not answer (' + e.message + ')';
      $('conn').className = 'bad';
      // The picture goes on in time; nothing new is drawn into it.
      if (model.seen) drawTimeline(Date.now());
    }
  }

  // ---- the cluster: a row per node, each from that node's own /status as this node got it.
  function drawCluster(doc) {
    const body = document.createElement('tbody');
    for (const n of doc.nodes) {
      const self = n.node_id === doc.node_id;
      const st = n.status;
      const tr = el('tr');
      if (self) tr.className = 'self';
      tr.dataset.node = n.node_id;
      tr.appendChild(idCell(n.node_id));
      const role = el('td', null, 'role-cell');
      if (st) role.appendChild(roleBadge(st.role));
      else role.textContent = n.connected ? 'no answer' : 'unreachable';
      if (n.error) role.title = n.error;
      tr.appendChild(role);
      tr.appendChild(el('td', st ? st.term : '—', 'term'));
      const admin = st && st.admin ? idCell(st.admin) : el('td', st ? 'none known' : '—');
      admin.classList.add('admin');
      tr.appendChild(admin);
      tr.appendChild(el('td', st ? (st.electorate_size ? `${st.electorate_size}, v${st.electorate_version}` : 'none') : '—', 'electorate'));
      tr.appendChild(el('td', st && st.role === 'admin' ? ms(st.lease_left_ms) : '—', 'lease'));
      tr.appendChild(el('td', n.voter ? 'yes' : 'no'));
      const reach = el('td', self ? 'yes' : !n.connected ? 'no' : st ? 'yes' : 'connected, API not reached', 'reach');
      if (n.error) reach.title = n.error;
      tr.appendChild(reach);
      // Connected: heard now (followers exchange no protocol message when healthy).
      tr.appendChild(el('td', self ? '—' : n.connected ? 'connected' : n.last_contact_ms === null || n.last_contact_ms === undefined ? 'never' : ms(n.last_contact_ms) + ' ago'));
      tr.appendChild(el('td', st ? st.version : '—'));
      tr.appendChild(el('td', n.http ? n.http.split('#')[0] : '—'));
      body.appendChild(tr);
    }
    $('nodes').replaceChild(body, $('nodes').tBodies[0]);
    $('nodes-state').textContent = doc.not_asked ? `${doc.not_asked} more node(s) not asked` : '';
  }

  async function pollCluster() {
    try {
      const c = await get('/cluster/status');
      if (!c.ok || !c.body) throw new Error('HTTP ' + c.status);
      drawCluster(c.body);
    } catch (e) {
      $('nodes-state').textContent = 'cluster: ' + e.message;
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
    // Each poll one at a time: the next starts a second after the last ended, so a slow node
    // is never asked faster than it answers, and a peer slow to answer this node's question
    // (/cluster/status) holds up neither this node's own state nor the tasks.
    const every = (poll) => {
      const loop = async () => {
        await poll();
        setTimeout(loop, POLL_MS);
      };
      loop();
    };
    every(pollSelf);
    every(pollCluster);
    every(pollTasks);
  }

  start();
})();
