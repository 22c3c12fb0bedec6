// lagbridge dashboard: polls v1/lag, v1/quotas and v1/events (relative to
// the page), backfills its charts from v1/history on load and when the
// window changes, and draws SVG charts with the quota decisions as markers,
// a timeline of the decisions, and each target's partitions.
// Plain ES2017, no dependencies, no build step. Every value from the API is
// put in the page with textContent or as an SVG attribute, never as HTML.
//
// Query parameters: refresh (poll interval: 500ms, 2s; default 1s) and
// window (history shown: 90s, 10m; default 5m; also chosen on the page).
//
// For tests and curious humans the page exposes its progress as attributes:
// body[data-ready] ("true" after the first successful poll), body[data-polls]
// (successful polls), body[data-history] ("true" once the history is
// loaded), on every chart [data-chart] data-points (points of its main
// series drawn), data-max (their largest value), data-from and data-to
// (the times of the first and last of them, Unix ms) and data-markers
// (decision markers drawn); on the timeline's rows data-kind and data-rule;
// on partition rows data-partition.
'use strict';
(function () {
  const params = new URLSearchParams(location.search);
  const REFRESH = parseDur(params.get('refresh'), 1000, 100, 60000);
  let WINDOW = parseDur(params.get('window'), 5 * 60000, 10000, 2 * 3600000);
  const SVGNS = 'http://www.w3.org/2000/svg';
  const SEVERITY = { stopped: 0, stalled: 1, lagging: 2, stale: 3, abandoned: 4, ok: 5 };

  const series = new Map(); // target key -> {points: [], lastSeen: ms}
  const cards = new Map(); // target key -> card element parts
  const events = new Map(); // decision events by seq
  let eventsFrom = null; // the time of the newest event fetched (the next fetch starts there)
  let eventsNote = '';
  let eventsStarted = null; // the daemon's startedAt the events belong to
  let hist = { started: null, since: null, note: '' }; // what v1/history said of itself
  let polls = 0;
  let lastNow = Date.now(); // server time of the newest answer
  let firstSeen = null; // server time of the oldest point: the axis grows from it up to WINDOW
  let policies = new Map(); // the policies of the newest v1/quotas answer, by name (clientQuotaOf)

  // ---------- small helpers ----------

  function parseDur(s, def, lo, hi) {
    if (!s) return def;
    const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(s.trim());
    if (!m) return def;
    const n = parseFloat(m[1]);
    const v = m[2] === 's' ? n * 1000 : m[2] === 'm' ? n * 60000 : n;
    return Math.min(Math.max(v, lo), hi);
  }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === 'class') e.className = attrs[k];
      else if (k === 'text') e.textContent = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (const c of kids) if (c != null) e.append(c);
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }

  function num(v) {
    if (v == null || Number.isNaN(v)) return '–';
    if (v === Infinity) return '∞';
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + 'G';
    if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + 'k';
    if (a >= 100 || Number.isInteger(v)) return Math.round(v).toLocaleString('en-US');
    return v.toFixed(a >= 10 ? 1 : 2);
  }

  function dur(s) {
    if (s == null || Number.isNaN(s)) return '–';
    if (s < 0) return 'never';
    if (s === Infinity) return '∞';
    if (s === 0) return '0';
    if (s < 1) return Math.round(s * 1000) + 'ms';
    if (s < 10) return s.toFixed(2) + 's';
    if (s < 120) return s.toFixed(1) + 's';
    if (s < 7200) return Math.floor(s / 60) + 'm ' + String(Math.round(s % 60)).padStart(2, '0') + 's';
    return Math.floor(s / 3600) + 'h ' + String(Math.round((s % 3600) / 60)).padStart(2, '0') + 'm';
  }

  // ago labels the time axis: -30s, -1m, -1m30s.
  function ago(ms) {
    const sec = Math.round(ms / 1000), m = Math.floor(sec / 60), r = sec % 60;
    return '-' + (m ? m + 'm' + (r ? r + 's' : '') : r + 's');
  }

  const rate = (v) => (v == null ? '–' : v === Infinity ? 'unlimited' : num(v) + '/s');
  const keyOf = (t) => [t.kind, t.cluster, t.topic, t.group].join('/');
  const topicKeyOf = (t) => [t.kind, t.cluster, t.topic].join('/');
  const clock = (ms) => new Date(ms).toLocaleTimeString('en-GB', { hour12: false });
  const winParam = () => Math.ceil(WINDOW / 1000) + 's';

  function badge(text, cls, title) {
    const b = el('span', { class: 'badge s-' + (cls || text), text: text });
    if (title) b.title = title;
    return b;
  }

  // ---------- fetching ----------

  // A read or admin token (when the daemon requires one) comes in
  // the fragment, #token=..., which browsers never send to the server; it
  // is kept for the tab's session and removed from the address bar.
  let token = sessionStorage.getItem('lagbridge-token') || '';
  const frag = new URLSearchParams(location.hash.slice(1));
  if (frag.get('token')) {
    token = frag.get('token');
    sessionStorage.setItem('lagbridge-token', token);
    history.replaceState(null, '', location.pathname + location.search);
  }

  async function getJSON(url) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), Math.max(5000, 2 * REFRESH));
    const headers = { Accept: 'application/json' };
    if (token) headers.Authorization = 'Bearer ' + token;
    try {
      const r = await fetch(url, { signal: ctl.signal, cache: 'no-store', headers });
      if (!r.ok) return { status: r.status };
      return { status: r.status, body: await r.json() };
    } finally {
      clearTimeout(timer);
    }
  }

  // quotasOf turns the answer of v1/quotas into what the page draws, and
  // says why there is nothing when there is nothing.
  function quotasOf(res) {
    const q = { ok: false, why: 'no quotas configured', producers: [], byTarget: new Map(), byTopic: new Map(), policies: new Map() };
    policies = q.policies;
    if (!res || res.error) {
      q.why = 'quotas unavailable: ' + (res && res.error ? res.error.message : 'no answer');
      return q;
    }
    if (res.status === 404) return q; // the daemon has no quota controller
    if (res.status === 401 || res.status === 403) {
      q.why = 'quotas need an admin or read token: open this page as …/#token=<token>';
      return q;
    }
    if (res.status !== 200) {
      q.why = 'quotas unavailable: HTTP ' + res.status;
      return q;
    }
    const body = res.body || {};
    q.ok = true;
    q.producers = Array.isArray(body.producers) ? body.producers : [];
    for (const p of Array.isArray(body.policies) ? body.policies : []) if (p && p.name) q.policies.set(p.name, p);
    for (const d of Array.isArray(body.targets) ? body.targets : []) {
      const t = d && d.target;
      if (!t) continue;
      if (t.group) q.byTarget.set(keyOf(t), d);
      else q.byTopic.set([t.kind, t.cluster, t.topic].join('/'), d);
    }
    return q;
  }

  function decisionFor(q, t) {
    return q.byTarget.get(keyOf(t)) || q.byTopic.get([t.kind, t.cluster, t.topic].join('/')) || null;
  }

  // maxAgeOf is the deadline in seconds: the decision's own maxAge, or its
  // policy's, when the daemon tells them; null otherwise.
  function maxAgeOf(q, d) {
    if (!d) return null;
    if (typeof d.maxAge === 'number' && d.maxAge > 0) return d.maxAge / 1e9;
    const p = q.policies.get(d.policy);
    if (p && typeof p.maxAge === 'number' && p.maxAge > 0) return p.maxAge / 1e9;
    return null;
  }

  // allowedOf is the decision's rate as the SDK's producers get it: under
  // stop the SDK admits nothing whatever the rate (ErrStop), so 0 (the rate,
  // the policy's minRate, reaches only a Kafka client quota: grantText).
  function allowedOf(d) {
    if (!d) return null;
    if (d.signal === 'stop') return 0;
    if (d.unlimited || typeof d.rate !== 'number') return Infinity;
    return d.rate;
  }

  // clientQuotaOf says whether the daemon sets a Kafka client quota from
  // the rate of policy's decisions on a topic of kind: the policy sets
  // kafkaClientQuota, enforces and lists producer (with none, any).
  function clientQuotaOf(kind, policy, producer) {
    const p = policies.get(policy);
    if (!p || kind !== 'kafka' || !p.kafkaClientQuota || p.mode === 'advise') return false;
    return (Array.isArray(p.producers) ? p.producers : []).some((s) => s && (!producer || s.id === producer));
  }

  // grantText is rate v under signal as the SDK's producers get it: under
  // stop the SDK admits nothing whatever the rate (ErrStop); the rate, the
  // policy's minRate, reaches only a Kafka client quota (producers without
  // the SDK), named where one is set (quoted). As status and why say it.
  // With known false (a lease's topic name on clusters that disagree) it
  // may be.
  function grantText(v, signal, quoted, known = true) {
    if (signal !== 'stop' || !v) return rate(v);
    if (!known) return '0/s (client quota, if set: ' + rate(v) + ')';
    return quoted ? '0/s (client quota ' + rate(v) + ')' : '0/s';
  }

  // ---------- the loop ----------

  async function tick() {
    try {
      const [lagRes, qRes] = await Promise.all([
        getJSON('v1/lag'),
        getJSON('v1/quotas').catch((e) => ({ error: e })),
        fetchEvents().catch((e) => { eventsNote = 'decisions unavailable: ' + e.message; }),
      ]);
      if (lagRes.status === 401 || lagRes.status === 403) {
        throw new Error('v1/lag needs a read or admin token: open this page as …/#token=<token>');
      }
      if (lagRes.status !== 200) throw new Error('v1/lag answered HTTP ' + lagRes.status);
      update(lagRes.body, quotasOf(qRes));
      polls++;
      document.body.dataset.polls = String(polls);
      document.body.dataset.ready = 'true';
      setConn('live', 'live · every ' + dur(REFRESH / 1000));
    } catch (e) {
      setConn('error', 'disconnected: ' + (e && e.name === 'AbortError' ? 'timed out' : e.message));
    } finally {
      setTimeout(tick, REFRESH);
    }
  }

  // backfill loads the window's history from the daemon into the charts:
  // the page shows what happened before it was opened. Live points newer
  // than the history's last one are kept.
  async function backfill() {
    const res = await getJSON('v1/history?points=300&since=' + winParam()).catch((e) => ({ status: 0, error: e }));
    if (res.status !== 200 || !res.body) {
      hist.note = res.status === 404 ? 'this daemon keeps no history' : 'history unavailable' + (res.status ? ': HTTP ' + res.status : '');
      return;
    }
    const b = res.body;
    hist.started = Date.parse(b.startedAt) || null;
    hist.since = b.dataSince ? Date.parse(b.dataSince) : null;
    hist.note = '';
    let oldest = Infinity;
    for (const s of Array.isArray(b.targets) ? b.targets : []) {
      const pts = (Array.isArray(s.points) ? s.points : []).map((p) => ({
        t: p.t, lag: p.lag, head: p.headAgeSeconds, produce: p.produceRate, consume: p.consumeRate,
        allowed: p.signal === 'stop' ? 0 : p.unlimited ? Infinity : p.allowed, maxAge: null, targetWait: null,
      }));
      if (!pts.length) continue;
      const key = keyOf(s);
      const last = pts[pts.length - 1].t;
      let h = series.get(key);
      if (!h) series.set(key, (h = { points: [], lastSeen: last }));
      h.points = pts.concat(h.points.filter((p) => p.t > last));
      h.lastSeen = Math.max(h.lastSeen, last);
      oldest = Math.min(oldest, pts[0].t);
    }
    if (oldest !== Infinity) firstSeen = firstSeen == null ? oldest : Math.min(firstSeen, oldest);
    document.body.dataset.history = 'true';
  }

  // fetchEvents adds the decisions logged since the newest one held (the
  // whole window on the first call) and forgets those out of the window.
  async function fetchEvents() {
    const since = eventsFrom ? new Date(eventsFrom).toISOString() : winParam();
    const res = await getJSON('v1/events?since=' + encodeURIComponent(since));
    if (res.status !== 200 || !res.body) {
      eventsNote = res.status === 404 ? 'this daemon keeps no decision log'
        : (res.status === 401 || res.status === 403) ? 'decisions name producers: they need a read or admin token (#token=...)'
        : 'decisions unavailable: HTTP ' + res.status;
      return;
    }
    eventsNote = '';
    // A restarted daemon numbers its events from 1 again: start afresh.
    if (eventsStarted !== res.body.startedAt) {
      if (eventsStarted !== null) {
        events.clear();
        eventsFrom = null;
      }
      eventsStarted = res.body.startedAt;
    }
    for (const e of Array.isArray(res.body.events) ? res.body.events : []) {
      if (!e || typeof e.seq !== 'number') continue;
      e.ms = Date.parse(e.at);
      events.set(e.seq, e);
      if (!eventsFrom || e.ms > eventsFrom) eventsFrom = e.ms;
    }
    const gen = Date.parse(res.body.generatedAt) || Date.now();
    for (const [k, e] of events) if (e.ms < gen - WINDOW) events.delete(k);
  }

  async function setWindow(ms) {
    WINDOW = ms;
    const u = new URL(location.href);
    u.searchParams.set('window', winParam());
    history.replaceState(null, '', u.pathname + u.search);
    events.clear();
    eventsFrom = null;
    await backfill();
  }

  function setConn(state, text) {
    const c = document.getElementById('conn');
    c.dataset.state = state;
    c.textContent = text;
  }

  function update(lag, q) {
    const now = Date.parse(lag.generatedAt) || Date.now();
    if (firstSeen == null) firstSeen = now;
    const targets = Array.isArray(lag.targets) ? lag.targets : [];
    const seen = new Set();
    for (const t of targets) {
      const key = keyOf(t);
      seen.add(key);
      const d = decisionFor(q, t);
      let h = series.get(key);
      if (!h) series.set(key, (h = { points: [], lastSeen: now }));
      h.lastSeen = now;
      h.points.push({
        t: now,
        head: t.headAgeKnown === false ? null : t.headAgeSeconds,
        lag: t.lag,
        produce: t.ratesKnown === false ? null : t.produceRate,
        consume: t.ratesKnown === false ? null : t.consumeRate,
        allowed: allowedOf(d),
        maxAge: maxAgeOf(q, d),
        targetWait: d && d.targetWait > 0 ? d.targetWait / 1e9 : null,
      });
      while (h.points.length && h.points[0].t < now - WINDOW) h.points.shift();
    }
    for (const [key, h] of series) if (h.lastSeen < now - WINDOW) series.delete(key);

    renderSummary(targets, q);
    renderClusters(Array.isArray(lag.clusters) ? lag.clusters : [], now);
    renderTargets(targets, q, now, seen);
    lastNow = now;
    renderTimeline(now);
    renderProducers(q, now);
    renderHistNote(now);
    document.getElementById('updated').textContent = 'updated ' + new Date(now).toLocaleTimeString();
  }

  // ---------- rendering ----------

  function renderSummary(targets, q) {
    const s = document.getElementById('summary');
    const counts = {};
    for (const t of targets) counts[t.status] = (counts[t.status] || 0) + 1;
    const kids = [el('span', { text: targets.length + (targets.length === 1 ? ' target' : ' targets') })];
    for (const st of Object.keys(SEVERITY)) if (counts[st]) kids.push(badge(counts[st] + ' ' + st, st));
    if (q.ok) {
      const sig = {};
      for (const d of [...q.byTarget.values(), ...q.byTopic.values()]) sig[d.signal] = (sig[d.signal] || 0) + 1;
      kids.push(el('span', { text: '· quotas:' }));
      for (const k of Object.keys(sig).sort()) kids.push(badge(sig[k] + ' ' + k, k));
      if (!Object.keys(sig).length) kids.push(el('span', { text: 'none yet' }));
    } else {
      kids.push(el('span', { text: '· ' + q.why }));
    }
    s.replaceChildren(...kids);
  }

  function renderClusters(clusters, now) {
    const box = document.getElementById('clusters');
    box.replaceChildren(...clusters.map((c) => {
      const age = c.lastSuccess && !c.lastSuccess.startsWith('0001') ? (now - Date.parse(c.lastSuccess)) / 1000 : null;
      return el('div', { class: 'cluster' + (c.error ? ' err' : '') },
        el('b', { text: c.name }), ' ' + c.kind + ' · ' + c.targets + ' targets · ',
        c.observed ? 'observed ' + dur(Math.max(0, age)) + ' ago' : 'not observed yet',
        c.error ? el('span', { class: 'e', text: ' · ' + c.error }) : null);
    }));
  }

  function stat(k) {
    const v = el('span', { class: 'v', text: '–' });
    return { node: el('div', { class: 'stat' }, el('span', { class: 'k', text: k }), v), v };
  }

  function newCard(key, t) {
    const status = el('span', { class: 'badge' });
    const name = el('span', { class: 'tname' }, t.cluster, el('span', { class: 'sep', text: '/' }), t.topic,
      el('span', { class: 'sep', text: '/' }), t.group);
    const kind = el('span', { class: 'tkind', text: t.kind === 'nats' ? 'NATS stream / consumer' : 'Kafka topic / group' });
    const quota = el('div', { class: 'tquota' });
    const stats = {};
    const statRow = el('div', { class: 'stats' });
    for (const [k, label] of [['lag', 'lag'], ['head', 'head age'], ['deadline', 'deadline'], ['produce', 'produce'],
      ['consume', 'consume'], ['allowed', 'allowed'], ['drain', 'time to drain'], ['members', 'consumers']]) {
      stats[k] = stat(label);
      statRow.append(stats[k].node);
    }
    const reason = el('div', { class: 'reason' });
    const charts = {
      head: chartBox('head-age', 'Head age vs deadline'),
      lag: chartBox('lag', 'Lag (messages)'),
      rates: chartBox('rates', 'Rates (msg/s)'),
    };
    const partsSummary = el('summary', { text: 'Partitions' });
    const partsBox = el('div', { class: 'ptable' });
    const parts = el('details', { class: 'parts' }, partsSummary, partsBox);
    const c = { node: null, status, quota, stats, reason, charts, parts, partsSummary, partsBox, sort: { key: 'worst', dir: 1 }, last: null };
    parts.addEventListener('toggle', () => { if (c.last) renderPartitions(c, ...c.last); });
    c.node = el('article', { class: 'target', 'data-key': key },
      el('div', { class: 'thead' }, status, name, kind, quota), statRow, reason,
      el('div', { class: 'charts' }, charts.head.node, charts.lag.node, charts.rates.node), parts);
    return c;
  }

  function chartBox(id, title) {
    const legend = el('div', { class: 'legend' });
    const s = svg('svg', { role: 'img', 'aria-label': title });
    const node = el('div', { class: 'chart', 'data-chart': id, 'data-points': '0' },
      el('div', { class: 'ctitle' }, el('span', { class: 't', text: title })), legend, s);
    return { node, legend, svg: s };
  }

  function renderTargets(targets, q, now, seen) {
    const box = document.getElementById('targets');
    if (!targets.length) {
      cards.clear();
      box.replaceChildren(el('p', { class: 'empty', text: 'no targets observed yet (check the clusters above and the daemon\'s filters)' }));
      return;
    }
    for (const [key, c] of cards) if (!seen.has(key)) { c.node.remove(); cards.delete(key); }
    const sorted = targets.slice().sort((a, b) => (SEVERITY[a.status] ?? 9) - (SEVERITY[b.status] ?? 9) || keyOf(a).localeCompare(keyOf(b)));
    const nodes = [];
    for (const t of sorted) {
      const key = keyOf(t);
      let c = cards.get(key);
      if (!c) cards.set(key, (c = newCard(key, t)));
      fillCard(c, t, decisionFor(q, t), q, series.get(key).points, now);
      nodes.push(c.node);
    }
    if (nodes.some((n, i) => box.children[i] !== n) || box.children.length !== nodes.length) box.replaceChildren(...nodes);
  }

  function fillCard(c, t, d, q, pts, now) {
    c.node.className = 'target s-' + t.status;
    c.node.dataset.status = t.status;
    c.status.className = 'badge s-' + t.status;
    c.status.textContent = t.status + (t.stale && t.status !== 'stale' ? ' (stale)' : '');
    c.status.title = t.rule ? 'rule: ' + t.rule : '';
    const maxAge = maxAgeOf(q, d);
    const targetWait = d && d.targetWait > 0 ? d.targetWait / 1e9 : null;
    const allowed = allowedOf(d);
    const allowedText = d ? grantText(d.unlimited || typeof d.rate !== 'number' ? Infinity : d.rate, d.signal, clientQuotaOf(d.target && d.target.kind, d.policy)) : 'no quota';

    if (d) {
      const bits = [badge(d.signal, d.signal, d.reason), el('span', { text: allowed === Infinity ? 'unlimited' : 'allowed ' + allowedText })];
      if (d.policy) bits.push(el('span', { class: 'badge outline', text: 'policy ' + d.policy }));
      if (d.advisory) bits.push(el('span', { class: 'badge outline', text: 'advise only' }));
      if (d.held) bits.push(el('span', { class: 'badge outline', text: 'held (stale data)' }));
      c.quota.replaceChildren(...bits);
    } else {
      c.quota.replaceChildren(badge('no quota', 'none', q.why));
    }
    const s = c.stats;
    s.lag.v.textContent = num(t.lag);
    s.head.v.textContent = t.headAgeKnown === false ? 'unknown' : dur(t.headAgeSeconds);
    s.deadline.v.textContent = maxAge != null ? dur(maxAge) : targetWait != null ? dur(targetWait) + ' (target wait)' : '–';
    s.produce.v.textContent = t.ratesKnown === false ? '–' : rate(t.produceRate);
    s.consume.v.textContent = t.ratesKnown === false ? '–' : rate(t.consumeRate);
    s.allowed.v.textContent = allowedText;
    s.drain.v.textContent = t.timeToDrainSeconds == null ? (t.lag > 0 ? 'never' : '–') : dur(t.timeToDrainSeconds);
    s.members.v.textContent = t.members < 0 ? '?' : String(t.members);
    const why = [el('b', { text: t.rule ? t.rule + ': ' : '' }), t.reason || ''];
    if (t.error) why.push(' · error: ' + t.error);
    if (d && d.reason) why.push(' · quota: ' + d.reason);
    c.reason.replaceChildren(...why);
    c.reason.title = c.reason.textContent;

    // The time axis spans what the page has (history included): at least
    // 20s (or the whole window when shorter), at most the window.
    const span = Math.min(WINDOW, Math.max(Math.min(20000, WINDOW), now - firstSeen));
    const t0 = now - span;
    const pick = (f) => pts.map((p) => [p.t, f(p)]);
    const marks = markersFor(topicKeyOf(t), t0, now);
    drawChart(c.charts.head, t0, now, dur, [
      { name: 'head age', cls: 'c-head', pts: pick((p) => p.head), area: true },
      // History points carry no deadline: the policy's current one.
      { name: 'max age', cls: 'c-deadline', pts: pick((p) => (p.maxAge != null ? p.maxAge : maxAge)), dash: true, optional: true },
      { name: 'target wait', cls: 'c-target', pts: pick((p) => p.targetWait), dash: true, optional: true },
    ], maxAge, marks);
    drawChart(c.charts.lag, t0, now, num, [{ name: 'lag', cls: 'c-lag', pts: pick((p) => p.lag), area: true }], null, marks);
    drawChart(c.charts.rates, t0, now, (v) => num(v), [
      { name: 'produce', cls: 'c-produce', pts: pick((p) => p.produce) },
      { name: 'consume', cls: 'c-consume', pts: pick((p) => p.consume) },
      { name: 'allowed', cls: 'c-allowed', pts: pick((p) => p.allowed), step: true, soft: true, optional: true, none: d ? null : 'no quota' },
    ], null, marks);
    c.last = [t, d];
    renderPartitions(c, t, d);
  }

  // ---------- decisions ----------

  // eventText says what an event changed: "ok → slow-down" or
  // "1,000/s → 0/s".
  // A rate under stop reads as the SDK gets it (grantText).
  function eventText(e) {
    const quoted = clientQuotaOf(e.topic && e.topic.kind, e.policy);
    const r = (v, u, signal) => grantText(u || v == null ? Infinity : v, signal, quoted);
    if (e.kind === 'signal') return e.prevSignal + ' → ' + e.signal + ' (allowed ' + r(e.rate, e.unlimited, e.signal) + ')';
    return r(e.prevRate, e.prevUnlimited, e.prevSignal) + ' → ' + r(e.rate, e.unlimited, e.signal) + (e.signal ? ' · ' + e.signal : '');
  }

  function inputsText(e) {
    const i = e.inputs || {};
    return 'lag ' + num(i.lag) + ' · head age ' + dur(i.headAgeSeconds) + ' · capacity ' + (i.capacityKnown ? '' : '≥ ') + rate(i.capacity) +
      ' · predicted wait ' + (i.waitSeconds < 0 ? 'never drains' : dur(i.waitSeconds)) + ' · budget ' + dur(i.budgetSeconds);
  }

  // markersFor groups a topic's events in [t0, t1] by time: one marker per
  // instant, coloured by the most telling event (a signal change, else a
  // cut, else a release).
  function markersFor(topicKey, t0, t1) {
    const at = new Map();
    for (const e of events.values()) {
      const tk = e.topic ? [e.topic.kind, e.topic.cluster, e.topic.name].join('/') : '';
      if (tk !== topicKey || e.ms < t0 || e.ms > t1) continue;
      let m = at.get(e.ms);
      if (!m) at.set(e.ms, (m = { t: e.ms, kind: 'release', signal: null, notServed: true, lines: [] }));
      // A follower's own decision (ha, notServed): drawn faint, never as
      // a signal line; the marker is a served one if any event at the
      // instant was served.
      m.notServed = m.notServed && !!e.notServed;
      if (e.kind === 'signal') m.signal = e.signal;
      if (e.kind === 'signal' || (e.kind === 'cut' && m.kind === 'release')) m.kind = e.kind;
      m.lines.push(clock(e.ms) + ' ' + e.kind + ' ' + (e.kind === 'signal' ? '' : (e.producers || []).join(', ') + ' ') + eventText(e) + ' · rule ' + e.rule +
        (e.notServed ? ' · not served: this replica followed' : ''));
    }
    return [...at.values()];
  }

  function renderTimeline(now) {
    const box = document.getElementById('timeline');
    // The filter matches any of the words a row shows: producers, topic,
    // kind, rule, signals.
    const words = (document.getElementById('tl-filter').value || '').trim().toLowerCase().split(/\s+/).filter(Boolean);
    const text = (e) => [e.kind, e.rule, e.signal, e.prevSignal, e.topic && e.topic.cluster + '/' + e.topic.name, ...(e.producers || [])].join(' ').toLowerCase();
    const list = [...events.values()].filter((e) => e.ms >= now - WINDOW && words.every((w) => text(e).includes(w))).sort((a, b) => b.seq - a.seq);
    if (!list.length) {
      box.replaceChildren(el('p', { class: 'empty', text: eventsNote || (words.length ? 'no decision in the window matches the filter'
        : 'no quota decision changed a signal or a grant in the window') }));
      return;
    }
    const shown = list.slice(0, 200);
    const head = el('tr', {}, ...['time', 'kind', 'topic', 'producers', 'change', 'rule', 'inputs']
      .map((h) => el('th', { text: h })));
    const rows = shown.map((e) => el('tr', { 'data-kind': e.kind, 'data-rule': e.rule || '', class: e.notServed ? 'not-served' : '' },
      el('td', { class: 'num', text: clock(e.ms) + '.' + String(((e.ms % 1000) + 1000) % 1000).padStart(3, '0') }),
      el('td', {}, badge(e.kind, 'ev-' + e.kind), ...(e.notServed ? [' ', badge('not served', 'stale', 'this replica followed: its producers were served the leader\'s decision; ask the leader')] : [])),
      el('td', { text: e.topic ? e.topic.cluster + '/' + e.topic.name : '' }),
      el('td', { text: (e.producers || []).join(', ') || '–' }),
      el('td', { text: eventText(e) }),
      el('td', {}, el('span', { class: 'badge outline', text: e.rule || 'none' })),
      el('td', { class: 'reason-cell', text: inputsText(e), title: e.reason || '' })));
    const kids = [el('table', { 'data-rows': String(shown.length) }, el('thead', {}, head), el('tbody', {}, ...rows))];
    if (list.length > shown.length) kids.push(el('p', { class: 'note', text: 'the newest ' + shown.length + ' of ' + list.length + ' decisions in the window; all of them: v1/events' }));
    if (eventsNote) kids.push(el('p', { class: 'note', text: eventsNote }));
    box.replaceChildren(...kids);
  }

  function renderHistNote(now) {
    const n = document.getElementById('histnote');
    let text = hist.note;
    if (!text && hist.started && hist.started > now - WINDOW) text = 'history since ' + clock(hist.started) + ' (the daemon started then)';
    n.textContent = text ? ' · ' + text : '';
  }

  // ---------- partitions ----------

  // commitState names where a partition's position comes from (the
  // daemon's source: commits, estimate, consumer, first-seen).
  function commitState(p, t) {
    const src = p.source || t.source || 'commits';
    if (src === 'consumer' || (p.reported && p.reported.at)) return 'consumer report';
    if (p.committed < 0) return 'no commit';
    if (src === 'estimate') return 'estimated';
    return 'committed';
  }

  // lagKnown: a partition without a commit has no known lag, unless the
  // daemon counts it from when it first saw the group (first-seen).
  const lagKnown = (p, t) => p.committed >= 0 || (p.source || t.source) === 'first-seen' || !!(p.reported && p.reported.at);

  const PSORT = {
    // Worst first: the oldest head, then the largest lag; partitions
    // without a commit (lag unknown) after those with lag.
    worst: (a, b) => (b.head ?? -1) - (a.head ?? -1) || b.lag - a.lag || a.partition - b.partition,
    partition: (a, b) => a.partition - b.partition,
    lag: (a, b) => b.lag - a.lag || a.partition - b.partition,
    head: (a, b) => (b.head ?? -1) - (a.head ?? -1) || a.partition - b.partition,
    commit: (a, b) => a.commit.localeCompare(b.commit) || a.partition - b.partition,
    avoid: (a, b) => b.avoid - a.avoid || a.partition - b.partition,
  };

  // renderPartitions writes the summary line (always) and the table (when
  // open): sortable by any column, the worst first by default.
  function renderPartitions(c, t, d) {
    const list = (Array.isArray(t.partitions) ? t.partitions : []).map((p) => ({
      partition: p.partition, lag: p.lag || 0, known: lagKnown(p, t), head: p.headKnown === false || !lagKnown(p, t) ? null : p.headAgeSeconds,
      commit: commitState(p, t), avoid: !!(d && Array.isArray(d.avoidPartitions) && d.avoidPartitions.includes(p.partition)), stale: !!p.stale,
    }));
    c.parts.hidden = !list.length;
    if (!list.length) return;
    const worst = list.slice().sort(PSORT.worst)[0];
    const noCommit = list.filter((p) => p.commit === 'no commit').length;
    const avoided = list.filter((p) => p.avoid).length;
    let sum = 'Partitions: ' + list.length;
    if (worst && (worst.lag > 0 || worst.head > 0)) sum += ' · worst ' + worst.partition + ': lag ' + num(worst.lag) + ', head age ' + dur(worst.head);
    if (noCommit) sum += ' · ' + noCommit + ' without commit';
    if (avoided) sum += ' · ' + avoided + ' avoided';
    c.partsSummary.textContent = sum;
    if (!c.parts.open) return;
    const cmp = PSORT[c.sort.key] || PSORT.worst;
    list.sort((a, b) => c.sort.dir * cmp(a, b));
    const cols = [['partition', 'partition'], ['lag', 'lag'], ['head', 'head age'], ['commit', 'position'], ['avoid', 'avoid']];
    const head = el('tr', {}, ...cols.map(([k, label]) => {
      const th = el('th', { class: k === 'lag' || k === 'head' ? 'num sortable' : 'sortable', 'data-sort': k,
        text: label + (c.sort.key === k ? (c.sort.dir > 0 ? ' ▼' : ' ▲') : '') });
      th.addEventListener('click', () => {
        c.sort = c.sort.key === k ? { key: k, dir: -c.sort.dir } : { key: k, dir: 1 };
        renderPartitions(c, t, d);
      });
      return th;
    }));
    const rows = list.map((p) => el('tr', { 'data-partition': String(p.partition), class: p.commit === 'no commit' ? 'nocommit' : '' },
      el('td', { class: 'num', text: String(p.partition) }),
      el('td', { class: 'num', text: p.known ? num(p.lag) : 'unknown' }),
      el('td', { class: 'num', text: p.head == null ? 'unknown' : dur(p.head) }),
      el('td', {}, p.commit === 'no commit' ? badge('no commit', 'none') : el('span', { text: p.commit + (p.stale ? ' (stale)' : '') })),
      el('td', {}, p.avoid ? badge('avoid', 'avoid-partitions') : el('span', { text: '–' }))));
    c.partsBox.replaceChildren(el('table', { 'data-rows': String(list.length) }, el('thead', {}, head), el('tbody', {}, ...rows)));
  }

  function niceStep(max, n) {
    const raw = max / n;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * mag) return m * mag;
    return 10 * mag;
  }

  // drawChart draws series of [t ms, value] pairs; null or infinite values
  // break the line. over: a threshold above which the plot is tinted.
  // markers: decision instants drawn as vertical lines with a tooltip.
  function drawChart(box, t0, t1, fmt, series, over, markers) {
    const s = box.svg;
    const W = Math.max(200, Math.round(s.clientWidth || box.node.clientWidth || 400));
    const H = 150;
    const L = 52, R = 8, T = 8, B = 18;
    s.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    s.replaceChildren();
    // Soft series (the allowed rate) stretch the scale to at most twice
    // the others, so that a generous quota does not flatten the rates
    // that matter; above that they run along the top edge.
    let ymax = 0, soft = 0;
    for (const se of series) {
      for (const [, v] of se.pts) {
        if (v == null || !Number.isFinite(v)) continue;
        if (se.soft) soft = Math.max(soft, v);
        else ymax = Math.max(ymax, v);
      }
    }
    ymax = ymax > 0 ? Math.max(ymax, Math.min(soft, 2 * ymax)) : soft;
    if (over != null && Number.isFinite(over)) ymax = Math.max(ymax, over);
    ymax = ymax > 0 ? ymax * 1.12 : 1;
    const step = niceStep(ymax, 4);
    ymax = Math.ceil(ymax / step) * step;
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - Math.min(v, ymax) / ymax) * (H - T - B);

    for (let v = 0; v <= ymax + 1e-9; v += step) {
      s.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      const tx = svg('text', { x: L - 6, y: y(v) + 3, 'text-anchor': 'end' });
      tx.textContent = fmt(v);
      s.append(tx);
    }
    const span = t1 - t0;
    const tick = [10000, 15000, 30000, 60000, 120000, 300000, 600000].find((k) => span / k <= 6) || 900000;
    for (let k = 0; t1 - k * tick >= t0; k++) {
      const tt = t1 - k * tick;
      const tx = svg('text', { x: Math.min(x(tt), W - R - 2), y: H - 4, 'text-anchor': k === 0 ? 'end' : 'middle' });
      tx.textContent = k === 0 ? 'now' : ago(k * tick);
      s.append(tx);
    }
    s.append(svg('line', { class: 'axis', x1: L, x2: W - R, y1: y(0), y2: y(0) }));
    if (over != null && Number.isFinite(over) && over < ymax) {
      s.append(svg('rect', { class: 'over', x: L, y: T, width: W - L - R, height: Math.max(0, y(over) - T) }));
    }

    const legend = [];
    let drawn = 0;
    series.forEach((se, i) => {
      const pts = se.pts.filter(([t]) => t >= t0);
      let d = '', a = '', segStart = null, prev = null, prevV = null, n = 0;
      for (const [t, v] of pts) {
        const ok = v != null && Number.isFinite(v);
        if (!ok) {
          if (se.area && segStart != null) a += 'L' + x(prev) + ',' + y(0) + 'L' + x(segStart) + ',' + y(0) + 'Z';
          segStart = null;
          prev = null;
          continue;
        }
        n++;
        const X = x(t).toFixed(1), Y = y(v).toFixed(1);
        if (segStart == null) {
          d += 'M' + X + ',' + Y;
          if (se.area) a += 'M' + X + ',' + Y;
          segStart = t;
        } else {
          d += (se.step ? 'L' + X + ',' + y(prevV).toFixed(1) : '') + 'L' + X + ',' + Y;
          if (se.area) a += 'L' + X + ',' + Y;
        }
        prev = t;
        prevV = v;
      }
      if (se.area && segStart != null) a += 'L' + x(prev) + ',' + y(0) + 'L' + x(segStart) + ',' + y(0) + 'Z';
      if (a) s.append(svg('path', { class: 'area ' + se.cls, d: a }));
      if (d) s.append(svg('path', { class: 'series ' + se.cls + (se.dash ? ' dash' : '') + (se.step ? ' step' : ''), d }));
      if (i === 0) {
        drawn = n;
        let mx = null, from = null, to = null;
        for (const [t, v] of pts) {
          if (v == null || !Number.isFinite(v)) continue;
          if (mx == null || v > mx) mx = v;
          if (from == null) from = t;
          to = t;
        }
        box.node.dataset.max = mx == null ? '' : String(mx);
        box.node.dataset.from = from == null ? '' : String(from);
        box.node.dataset.to = to == null ? '' : String(to);
      }
      const last = pts.length ? pts[pts.length - 1][1] : null;
      if (se.optional && n === 0 && last == null) {
        if (se.none) legend.push(el('span', {}, el('i', { class: se.cls }), se.name + ': ' + se.none));
        return;
      }
      const val = last === Infinity ? 'unlimited' : last == null ? '–' : fmt(last) + (last > ymax ? ' (off scale)' : '');
      legend.push(el('span', {}, el('i', { class: se.cls + (se.dash ? ' dash' : '') }), se.name + ' ' + val));
    });
    let marked = 0;
    for (const m of markers || []) {
      if (m.t < t0 || m.t > t1) continue;
      // A signal change is a line across the chart in the new signal's
      // colour; a grant cut (▼) or release (▲) only a tick on the top edge.
      const X = x(m.t);
      const g = svg('g', { class: 'marker m-' + m.kind + (m.signal ? ' s-' + m.signal : '') + (m.notServed ? ' not-served' : '') });
      if (m.notServed) g.dataset.notServed = '1';
      if (m.kind === 'signal' && !m.notServed) g.append(svg('line', { x1: X.toFixed(1), x2: X.toFixed(1), y1: T, y2: H - B }));
      const tri = m.kind === 'release' ? [[X - 4, T + 6], [X + 4, T + 6], [X, T]] : [[X - 4, T], [X + 4, T], [X, T + 6]];
      g.append(svg('path', { d: 'M' + tri.map((p) => p[0].toFixed(1) + ',' + p[1]).join('L') + 'Z' }));
      const tt = svg('title', {});
      tt.textContent = m.lines.join('\n');
      g.append(tt);
      s.append(g);
      marked++;
    }
    box.node.dataset.markers = String(marked);
    if (!drawn) {
      const tx = svg('text', { class: 'nodata', x: (L + W) / 2, y: H / 2, 'text-anchor': 'middle' });
      tx.textContent = 'waiting for data…';
      s.append(tx);
    }
    box.node.dataset.points = String(drawn);
    box.legend.replaceChildren(...legend);
  }

  // leaseQuoted says whether producer's lease on topic (a name: leases name
  // no cluster) gets a Kafka client quota (clientQuotaOf): every decision
  // of that name says so (quoted) or none does (known). Where they
  // disagree (the name on a NATS and a Kafka cluster, or under two
  // policies) the lease is the strictest of the clusters' and which one
  // is not known here (as status says it).
  function leaseQuoted(q, producer, topic) {
    let yes = 0, no = 0;
    for (const d of [...q.byTarget.values(), ...q.byTopic.values()]) {
      if (!d.target || d.target.topic !== topic) continue;
      if (clientQuotaOf(d.target.kind, d.policy, producer)) yes++;
      else no++;
    }
    return { quoted: yes > 0 && no === 0, known: yes === 0 || no === 0 };
  }

  function leaseGrant(q, producer, l) {
    const lq = leaseQuoted(q, producer, l.topic);
    return grantText(l.rate, l.signal, lq.quoted, lq.known);
  }

  function renderProducers(q, now) {
    const box = document.getElementById('producers');
    if (!q.ok) {
      box.replaceChildren(el('p', { class: 'empty', text: q.why }));
      return;
    }
    const rows = [];
    for (const ls of q.producers) {
      for (const l of (ls && Array.isArray(ls.leases) ? ls.leases : [])) rows.push({ producer: ls.producer, l });
    }
    if (!rows.length) {
      box.replaceChildren(el('p', { class: 'empty', text: 'quotas are on; no producer has reported yet' }));
      return;
    }
    rows.sort((a, b) => a.producer.localeCompare(b.producer) || a.l.topic.localeCompare(b.l.topic));
    const head = el('tr', {}, ...['producer', 'topic', 'signal', 'allowed rate', 'burst', 'retry after', 'avoid partitions', 'mode', 'expires in', 'why']
      .map((h, i) => el('th', { class: i >= 3 && i <= 5 ? 'num' : '', text: h })));
    const body = rows.map(({ producer, l }) => {
      const exp = l.expiresAt ? (Date.parse(l.expiresAt) - now) / 1000 : null;
      return el('tr', { 'data-producer': producer },
        el('td', { text: producer }),
        el('td', { text: l.topic }),
        el('td', {}, badge(l.signal || 'ok', l.signal || 'ok')),
        el('td', { class: 'num', text: l.rate == null ? 'unlimited' : leaseGrant(q, producer, l) }),
        el('td', { class: 'num', text: l.rate == null ? '–' : String(l.burst || Math.max(1, Math.round(l.rate / 10))) }),
        el('td', { class: 'num', text: l.retryAfterMs ? dur(l.retryAfterMs / 1000) : '–' }),
        el('td', { text: l.avoidPartitions && l.avoidPartitions.length ? l.avoidPartitions.join(', ') : '–' }),
        el('td', { text: l.advisory ? 'advise' : 'enforce' }),
        el('td', { text: exp == null ? '–' : exp <= 0 ? 'expired' : dur(exp) }),
        el('td', { class: 'reason-cell', text: l.reason || '' }));
    });
    box.replaceChildren(el('table', { 'data-rows': String(rows.length) }, el('thead', {}, head), el('tbody', {}, ...body)));
  }

  // The window selector: the presets, and the URL's window when it is
  // none of them.
  const sel = document.getElementById('window');
  const label = (ms) => (ms < 60000 ? Math.round(ms / 1000) + ' s' : ms < 3600000 ? +(ms / 60000).toFixed(1) + ' min' : +(ms / 3600000).toFixed(1) + ' h');
  const presets = [60000, 5 * 60000, 15 * 60000, 3600000, 2 * 3600000];
  if (!presets.includes(WINDOW)) presets.push(WINDOW);
  presets.sort((a, b) => a - b);
  sel.replaceChildren(...presets.map((ms) => {
    const o = el('option', { value: String(ms), text: label(ms) });
    if (ms === WINDOW) o.selected = true;
    return o;
  }));
  sel.addEventListener('change', () => { setWindow(+sel.value); });
  document.getElementById('tl-filter').addEventListener('input', () => renderTimeline(lastNow));
  backfill().finally(tick);
})();
