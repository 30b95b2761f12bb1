/* tenure: a job's life drawn — its lease timeline and its run tree (docs/how-to/timeline.md).
   A plain script, no library and no network: it defines two globals,
     renderTimeline(container, timeline, options)   the JSON of GET /v1/jobs/{id}/timeline
     renderTree(container, tree, options)           the JSON of GET /v1/jobs/{id}/tree
   options.linkFor(jobId) gives a job page's href, or null for plain text. Both may be called
   again with fresh data (the dashboard does so every second): the timeline keeps its zoom.
   Every string of the data goes into the page through textContent or setAttribute, never as
   markup. */
(function (global) {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";
  const AXIS_H = 36;
  const JOB_ROW_H = 28;
  const LANE_H = 64;
  const WAIT_ROW_H = 34;
  const RIGHT_PAD = 18;
  const MIN_SPAN_MS = 1;
  const STATUS_FILL = { done: "#16a34a", failed: "#dc2626", in_doubt: "#f59e0b",
                        running: "#2563eb", refused: "#7f1d1d" };
  const STATUS_WORD = { done: "done", failed: "failed", in_doubt: "in doubt", running: "running",
                        refused: "refused by its receiver" };
  const CROSSES = new Set(["result_rejected", "heartbeat_lost", "resume_refused"]);
  const AMBER = new Set(["step_in_doubt", "tool_outcome_unknown", "ownership_unknown"]);
  const END_COLOUR = { succeeded: "#166534", failed: "#991b1b", expired: "#b91c1c",
                       failover: "#c2410c", cancelled: "#374151", running: "#1d4ed8",
                       waiting: "#6b21a8", retried: "#92400e", released: "#374151",
                       unknown: "#6b7280" };
  // Tick steps in milliseconds: ms, s, min, h, d.
  const STEPS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500,
                 1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3,
                 3600e3, 7200e3, 10800e3, 21600e3, 43200e3, 864e5, 1728e5, 6048e5, 12096e5,
                 2592e6];
  const SECOND = 1e3, MINUTE = 60e3, HOUR = 3600e3, DAY = 864e5;

  // -- small helpers ----------------------------------------------------------------------
  function svg(tag, attrs, parent) {
    const node = document.createElementNS(SVG, tag);
    for (const name in attrs) {
      if (attrs[name] !== null && attrs[name] !== undefined) node.setAttribute(name, attrs[name]);
    }
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, attrs, parent, text) {
    const node = document.createElement(tag);
    for (const name in attrs || {}) {
      if (attrs[name] !== null && attrs[name] !== undefined) node.setAttribute(name, attrs[name]);
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (parent) parent.appendChild(node);
    return node;
  }

  function svgText(parent, x, y, text, attrs) {
    const node = svg("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    node.textContent = String(text);
    return node;
  }

  /** Milliseconds since the epoch of an ISO 8601 string, microseconds kept as a fraction. */
  function parseTime(value) {
    if (typeof value !== "string" || !value) return null;
    const match = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?$/.exec(value);
    if (!match) {
      const parsed = Date.parse(value);
      return Number.isNaN(parsed) ? null : parsed;
    }
    const base = Date.parse(match[1] + (match[3] || "Z"));
    if (Number.isNaN(base)) return null;
    return base + (match[2] ? parseFloat("0" + match[2]) * 1000 : 0);
  }

  function trimmed(number, decimals) {
    return number.toFixed(decimals);
  }

  /** A duration for people: 840 µs, 12.3 ms, 2.314 s, 3 min 05 s, 2 h 05 min, 3 d 4 h. */
  function duration(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
    const sign = ms < 0 ? "−" : "";
    const v = Math.abs(ms);
    if (v < 1) return sign + Math.round(v * 1000) + " µs";
    if (v < 100) return sign + trimmed(v, 1) + " ms";
    if (v < SECOND) return sign + Math.round(v) + " ms";
    if (v < MINUTE) return sign + trimmed(v / SECOND, v < 10 * SECOND ? 3 : 1) + " s";
    if (v < HOUR) {
      const m = Math.floor(v / MINUTE);
      return sign + m + " min " + String(Math.floor((v - m * MINUTE) / SECOND)).padStart(2, "0") + " s";
    }
    if (v < DAY) {
      const h = Math.floor(v / HOUR);
      return sign + h + " h " + String(Math.floor((v - h * HOUR) / MINUTE)).padStart(2, "0") + " min";
    }
    const d = Math.floor(v / DAY);
    return sign + d + " d " + Math.floor((v - d * DAY) / HOUR) + " h";
  }

  /** A tick's label: its offset from the job's submit, as precise as the step between ticks. */
  function offsetLabel(ms, step) {
    const sign = ms < -1e-9 ? "−" : "+";
    let v = Math.abs(ms);
    if (v < 1e-9) return "0";
    if (step < SECOND && v < SECOND) {
      return sign + trimmed(v, step < 1 ? 1 : 0) + " ms";
    }
    const parts = [];
    const d = Math.floor(v / DAY); v -= d * DAY;
    const h = Math.floor(v / HOUR); v -= h * HOUR;
    const m = Math.floor(v / MINUTE); v -= m * MINUTE;
    const s = v / SECOND;
    if (step >= DAY) return sign + d + " d";
    if (d) parts.push(d + " d");
    if (step >= HOUR) { if (h || !d) parts.push(h + " h"); return sign + parts.join(" "); }
    if (h || d) parts.push(h + " h");
    if (step >= MINUTE) { if (m || !parts.length) parts.push(m + " min"); return sign + parts.join(" "); }
    if (m || parts.length) parts.push(m + " min");
    const decimals = step >= SECOND ? 0 : step >= 100 ? 1 : step >= 10 ? 2 : 3;
    parts.push(trimmed(decimals ? s : Math.round(s), decimals) + " s");
    return sign + parts.join(" ");
  }

  function tickStep(span, pixels) {
    const most = Math.max(2, Math.floor(pixels / 95));
    for (const step of STEPS) if (span / step <= most) return step;
    return STEPS[STEPS.length - 1];
  }

  function shortValue(value) {
    if (value === null || value === undefined) return "–";
    const text = typeof value === "string" ? value : JSON.stringify(value);
    return text.length > 200 ? text.slice(0, 200) + "…" : text;
  }

  function clip(text, most) {
    const value = String(text === null || text === undefined ? "–" : text);
    return value.length > most ? value.slice(0, most - 1) + "…" : value;
  }

  // -- the tooltip: one element for the page, filled with textContent ------------------------
  const tips = new WeakMap();

  function tipElement() {
    let tip = document.getElementById("timeline-tip");
    if (!tip) {
      tip = html("div", { id: "timeline-tip", role: "tooltip", "class": "tl-tip" }, document.body);
      tip.hidden = true;
    }
    return tip;
  }

  function showTip(target, x, y) {
    const fields = tips.get(target);
    if (!fields) return;
    const tip = tipElement();
    tip.replaceChildren();
    html("div", { "class": "tl-tip-title" }, tip, fields.title);
    const list = html("dl", {}, tip);
    for (const [name, value] of fields.rows) {
      html("dt", {}, list, name);
      html("dd", {}, list, shortValue(value));
    }
    tip.hidden = false;
    const width = tip.offsetWidth, height = tip.offsetHeight;
    let left = x + 14, top = y + 14;
    if (left + width > window.innerWidth - 8) left = Math.max(8, x - width - 14);
    if (top + height > window.innerHeight - 8) top = Math.max(8, y - height - 14);
    tip.style.left = left + "px";
    tip.style.top = top + "px";
  }

  function hideTip() {
    const tip = document.getElementById("timeline-tip");
    if (tip) tip.hidden = true;
  }

  function tipped(node, key, title, rows, label) {
    tips.set(node, { title: title, rows: rows });
    node.setAttribute("data-key", key);
    node.setAttribute("tabindex", "0");
    node.setAttribute("aria-label", label || title);
    return node;
  }

  function listenForTips(root) {
    const owner = (event) => {
      let node = event.target;
      while (node && node !== root) {
        if (tips.has(node)) return node;
        node = node.parentNode;
      }
      return null;
    };
    root.addEventListener("pointerover", (event) => {
      const target = owner(event);
      if (target) showTip(target, event.clientX, event.clientY);
    });
    root.addEventListener("pointermove", (event) => {
      const target = owner(event);
      if (target) showTip(target, event.clientX, event.clientY);
      else hideTip();
    });
    root.addEventListener("pointerleave", hideTip);
    root.addEventListener("focusin", (event) => {
      const target = owner(event);
      if (!target) return;
      const box = target.getBoundingClientRect();
      showTip(target, box.left + box.width / 2, box.bottom);
    });
    root.addEventListener("focusout", hideTip);
  }

  // -- the timeline ---------------------------------------------------------------------------
  function laneEnd(lane, now) {
    const ended = parseTime(lane.ended_at);
    if (ended !== null) return ended;
    if (lane.ended_by === "running") return now;
    const until = parseTime(lane.lease_until);
    return until !== null ? Math.min(until, now) : now;
  }

  /** When the holder of a lane was last heard from: its last renewal the database kept (or
      its last recorded stage, when the JSON says), else its claim. */
  function lastHeard(lane) {
    let heard = { t: parseTime(lane.claimed_at), at: lane.claimed_at };
    for (const at of [lane.last_heard_at].concat(lane.renewals || [])) {
      const t = parseTime(at);
      if (t !== null && t > heard.t) heard = { t: t, at: at };
    }
    return heard;
  }

  /** The span worth drawing: from the submit to the last thing that happened (or now). */
  function domainOf(timeline) {
    const now = parseTime(timeline.now) || Date.now();
    const start = parseTime(timeline.start) ?? parseTime(timeline.job.created_at) ?? now;
    let end = parseTime(timeline.end) ?? now;
    const later = (t) => { if (t !== null && t > end) end = t; };
    for (const lane of timeline.lanes || []) {
      later(laneEnd(lane, now));  // a held lease is drawn to now; its end ahead is its field
      for (const mark of lane.marks || []) later(parseTime(mark.at));
    }
    for (const wait of timeline.waits || []) later(wait.to ? parseTime(wait.to) : now);
    for (const rule of timeline.rules || []) later(parseTime(rule.at));
    for (const mark of timeline.marks || []) later(parseTime(mark.at));
    if (!(end - start >= MIN_SPAN_MS)) end = start + MIN_SPAN_MS;
    return { start: start, from: start, to: end + (end - start) * 0.02, now: now };
  }

  function isLive(timeline) {
    return !timeline.job.ended_at
      || (timeline.lanes || []).some((lane) => lane.ended_by === "running")
      || (timeline.waits || []).some((wait) => !wait.to);
  }

  function renderTimeline(container, timeline, options) {
    if (!container) return;
    let state = container.__tenureTimeline;
    if (!state || !container.contains(state.root)) {
      state = { view: null, root: null, chart: null, width: 0, signature: null };
      container.__tenureTimeline = state;
      buildShell(container, state);
    }
    state.options = options || {};
    if (!timeline || !timeline.job) {
      state.timeline = null;
      state.chart.replaceChildren(html("p", { "class": "muted" }, null, "no timeline"));
      return;
    }
    const signature = JSON.stringify(Object.assign({}, timeline, { now: null }))
      + (isLive(timeline) ? "|" + timeline.now : "");
    state.timeline = timeline;
    if (signature === state.signature && state.width === state.chart.clientWidth) return;
    state.signature = signature;
    draw(state);
  }

  function buildShell(container, state) {
    const root = html("div", { "class": "tl" });
    const bar = html("div", { "class": "tl-toolbar" }, root);
    const zoom = (how, label, text) => {
      const button = html("button", { type: "button", "data-zoom": how, "aria-label": label,
                                       title: label }, bar, text);
      button.addEventListener("click", () => zoomBy(state, how));
      return button;
    };
    zoom("in", "zoom in", "+");
    zoom("out", "zoom out", "−");
    zoom("reset", "show the whole job", "reset");
    state.windowText = html("span", { "class": "tl-window mono", "aria-live": "polite" }, bar);
    html("span", { "class": "muted tl-hint" }, bar,
         "drag across the chart to look closer; hover or focus anything for its fields");
    state.chart = html("div", { "class": "tl-chart" }, root);
    state.root = root;
    root.appendChild(legend());
    listenForTips(state.chart);
    listenForDrags(state);
    if (typeof ResizeObserver === "function") {
      new ResizeObserver(() => {
        if (state.timeline && state.chart.clientWidth !== state.width) draw(state);
      }).observe(state.chart);
    }
    container.replaceChildren(root);
  }

  function currentWindow(state) {
    const whole = domainOf(state.timeline);
    if (!state.view) return { from: whole.from, to: whole.to, whole: whole };
    return { from: state.view.from, to: state.view.to, whole: whole };
  }

  function setView(state, from, to) {
    const whole = domainOf(state.timeline);
    let span = Math.max(to - from, MIN_SPAN_MS);
    const wholeSpan = whole.to - whole.from;
    if (span >= wholeSpan) { state.view = null; draw(state); return; }
    let left = (from + to) / 2 - span / 2;
    left = Math.min(Math.max(left, whole.from), whole.to - span);
    state.view = { from: left, to: left + span };
    draw(state);
  }

  function zoomBy(state, how) {
    if (!state.timeline) return;
    if (how === "reset") { state.view = null; draw(state); return; }
    const now = currentWindow(state);
    const middle = (now.from + now.to) / 2;
    const half = (now.to - now.from) / 2 * (how === "in" ? 0.5 : 2);
    setView(state, middle - half, middle + half);
  }

  function listenForDrags(state) {
    const chart = state.chart;
    let drag = null;
    chart.addEventListener("pointerdown", (event) => {
      if (event.button !== 0 || !state.layout) return;
      const box = chart.getBoundingClientRect();
      const x = event.clientX - box.left;
      if (x < state.layout.x0 || x > state.layout.x1) return;
      drag = { x: x, pointer: event.pointerId, rect: null };
      chart.setPointerCapture(event.pointerId);
    });
    chart.addEventListener("pointermove", (event) => {
      if (!drag || event.pointerId !== drag.pointer) return;
      const box = chart.getBoundingClientRect();
      const x = Math.min(Math.max(event.clientX - box.left, state.layout.x0), state.layout.x1);
      if (!drag.rect && Math.abs(x - drag.x) > 3) {
        drag.rect = svg("rect", { "class": "tl-selection", y: 0, height: state.layout.height },
                        state.layout.svg);
      }
      if (drag.rect) {
        drag.rect.setAttribute("x", Math.min(x, drag.x));
        drag.rect.setAttribute("width", Math.abs(x - drag.x));
        hideTip();
      }
      drag.to = x;
    });
    const finish = (event) => {
      if (!drag || event.pointerId !== drag.pointer) return;
      const done = drag;
      drag = null;
      if (done.rect) done.rect.remove();
      if (!done.rect || done.to === undefined || Math.abs(done.to - done.x) <= 3) return;
      const time = state.layout.time;
      setView(state, time(Math.min(done.x, done.to)), time(Math.max(done.x, done.to)));
    };
    chart.addEventListener("pointerup", finish);
    chart.addEventListener("pointercancel", (event) => {
      if (drag && drag.rect) drag.rect.remove();
      drag = null;
    });
  }

  function draw(state) {
    const timeline = state.timeline;
    const chart = state.chart;
    const width = Math.max(chart.clientWidth || 0, 480);
    state.width = chart.clientWidth;
    const gutter = width < 700 ? 150 : 210;
    const win = currentWindow(state);
    const whole = win.whole;
    const x0 = gutter, x1 = width - RIGHT_PAD;
    const k = (x1 - x0) / (win.to - win.from);
    const X = (t) => Math.max(-1e5, Math.min(1e5, x0 + (t - win.from) * k));
    const lanes = timeline.lanes || [];
    const waits = timeline.waits || [];
    const height = AXIS_H + JOB_ROW_H + lanes.length * LANE_H + (waits.length ? WAIT_ROW_H : 0) + 8;

    // Keep the focus (and so the tooltip) on the same element across a redraw.
    const active = document.activeElement;
    const focusKey = active && chart.contains(active) ? active.getAttribute("data-key") : null;

    const root = svg("svg", { "class": "tl-svg", width: width, height: height,
                              viewBox: "0 0 " + width + " " + height, role: "group",
                              "aria-label": "lease timeline of job " + timeline.job.id });
    const clipId = "tl-clip-" + (++drawCount);
    const hatchId = "tl-hatch-" + drawCount;
    const defs = svg("defs", {}, root);
    svg("rect", { x: x0, y: 0, width: x1 - x0, height: height },
        svg("clipPath", { id: clipId }, defs));
    const hatch = svg("pattern", { id: hatchId, width: 6, height: 6,
                                   patternUnits: "userSpaceOnUse",
                                   patternTransform: "rotate(45)" }, defs);
    svg("rect", { width: 6, height: 6, fill: "#e2e8f0" }, hatch);
    svg("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#64748b", "stroke-width": 2.5 }, hatch);
    const over = svg("pattern", { id: hatchId + "-over", width: 6, height: 6,
                                  patternUnits: "userSpaceOnUse",
                                  patternTransform: "rotate(45)" }, defs);
    svg("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#475569", "stroke-width": 1.6,
                  "stroke-opacity": 0.7 }, over);

    drawAxis(root, win, whole.start, x0, x1, X, height);
    const plot = svg("g", { "clip-path": "url(#" + clipId + ")" });
    const context = { X: X, now: whole.now, start: whole.start, plot: plot, root: root,
                      hatch: hatchId, x0: x0, x1: x1, gutter: gutter };

    let y = AXIS_H;
    drawJobRow(context, timeline, y);
    y += JOB_ROW_H;
    const lanesTop = y;
    lanes.forEach((lane, index) => { drawLane(context, lane, index, y); y += LANE_H; });
    if (waits.length) {
      drawWaits(context, waits, lanesTop, y);
      y += WAIT_ROW_H;
    }
    root.appendChild(plot);
    drawRules(context, timeline.rules || [], lanesTop, height);

    state.layout = { x0: x0, x1: x1, height: height, svg: root,
                     time: (x) => win.from + (x - x0) / k };
    chart.replaceChildren(root);
    if (focusKey) {
      const again = chart.querySelector('[data-key="' + CSS.escape(focusKey) + '"]');
      if (again) again.focus({ preventScroll: true });
    }
    const zoomed = state.view !== null;
    const labelStep = STEPS.find((s) => s >= (win.to - win.from) / 1000) || 1;
    state.windowText.textContent = (zoomed ? "showing " : "the whole job: ")
      + offsetLabel(win.from - whole.start, labelStep) + " → "
      + offsetLabel(win.to - whole.start, labelStep)
      + " (" + duration(win.to - win.from) + ")" + (zoomed ? " of " + duration(whole.to - whole.start) : "");
    state.root.setAttribute("data-zoomed", zoomed ? "true" : "false");
  }
  let drawCount = 0;

  function drawAxis(root, win, start, x0, x1, X, height) {
    const axis = svg("g", { "class": "tl-axis", "data-axis": "time" }, root);
    svg("rect", { "class": "tl-axis-band", x: x0, y: 0, width: x1 - x0, height: AXIS_H - 4 }, axis);
    svgText(axis, 8, AXIS_H - 13, "from submit (db clock)", { "class": "tl-gutter-note" });
    // The widest label must fit between two ticks; a coarser step otherwise.
    let step = tickStep(win.to - win.from, x1 - x0);
    const pixelsPer = (x1 - x0) / (win.to - win.from);
    const widest = (s) => Math.max(offsetLabel(win.from - start, s).length,
                                   offsetLabel(win.to - start, s).length) * 6.6 + 14;
    while (step * pixelsPer < widest(step) && STEPS.indexOf(step) < STEPS.length - 1) {
      step = STEPS[STEPS.indexOf(step) + 1];
    }
    const first = Math.ceil((win.from - start) / step) * step;
    for (let offset = first, n = 0; start + offset <= win.to && n < 200; offset += step, n++) {
      const x = X(start + offset);
      svg("line", { "class": "tl-grid", x1: x, x2: x, y1: AXIS_H - 8, y2: height }, axis);
      const text = offsetLabel(offset, step);
      const half = text.length * 3.3;
      const anchor = x + half > x1 + RIGHT_PAD ? "end" : x - half < x0 - 20 ? "start" : "middle";
      svgText(axis, anchor === "end" ? Math.min(x, x1 + RIGHT_PAD - 2) : x, AXIS_H - 13, text,
              { "class": "tl-tick", "text-anchor": anchor });
    }
    svg("line", { "class": "tl-axis-line", x1: x0, x2: x1, y1: AXIS_H - 4, y2: AXIS_H - 4 }, axis);
  }

  function timeRows(context, at) {
    const t = parseTime(at);
    return [at, t === null ? "–" : offsetLabel(t - context.start, 0.001) + " from submit"];
  }

  function markRows(context, mark) {
    const rows = [["at", mark.at], ["", timeRows(context, mark.at)[1]],
                  ["token", mark.token], ["owner", mark.owner]];
    for (const [name, value] of Object.entries(mark.detail || {})) rows.push([name, value]);
    return rows;
  }

  function drawJobRow(context, timeline, top) {
    const job = timeline.job;
    const row = svg("g", { "class": "tl-job-row", "data-row": "job" }, context.root);
    svg("line", { "class": "tl-row-sep", x1: 0, x2: context.x1 + RIGHT_PAD, y1: top + JOB_ROW_H,
                  y2: top + JOB_ROW_H }, row);
    const label = svg("g", {}, row);
    svgText(label, 8, top + 18, "job · " + job.kind, { "class": "tl-lane-title" });
    tipped(label, "job", "job " + job.id, [
      ["id", job.id], ["kind", job.kind], ["tenant", job.tenant], ["state", job.state],
      ["attempt", job.attempt + " of " + job.max_attempts], ["token", job.token],
      ["owner", job.owner], ["parent", job.parent_id], ["acts for", job.principal],
      ["created", job.created_at], ["ended", job.ended_at]]);
    const cy = top + JOB_ROW_H / 2;
    const created = parseTime(job.created_at) ?? context.start;
    const ended = parseTime(job.ended_at) ?? context.now;
    const plot = svg("g", {}, context.plot);
    svg("line", { "class": "tl-job-life", x1: context.X(created), x2: context.X(ended),
                  y1: cy, y2: cy }, plot);
    (timeline.marks || []).forEach((mark, index) => {
      const x = context.X(parseTime(mark.at));
      const g = svg("g", { "class": "tl-mark", "data-mark": mark.type }, plot);
      if (mark.type === "job_submitted") {
        svg("path", { d: `M${x},${cy - 7} L${x + 9},${cy} L${x},${cy + 7} Z`, fill: "#334155" }, g);
      } else if (mark.type === "job_cancelled") {
        crossAt(g, x, cy, "#374151");
      } else {
        svg("circle", { cx: x, cy: cy, r: 5, fill: mark.type === "signal_received" ? "#7c3aed" : "#64748b",
                        stroke: "#fff", "stroke-width": 1.5 }, g);
      }
      tipped(g, "job-mark-" + index, mark.type, markRows(context, mark));
    });
  }

  function crossAt(parent, x, cy, colour) {
    const d = `M${x - 5},${cy - 5} L${x + 5},${cy + 5} M${x - 5},${cy + 5} L${x + 5},${cy - 5}`;
    svg("path", { d: d, stroke: "#fff", "stroke-width": 5, "stroke-linecap": "round",
                  fill: "none" }, parent);
    svg("path", { d: d, stroke: colour, "stroke-width": 2.5, "stroke-linecap": "round",
                  fill: "none", "class": "tl-cross" }, parent);
    svg("rect", { x: x - 7, y: cy - 7, width: 14, height: 14, fill: "transparent" }, parent);
  }

  function diamond(parent, x, cy, size, attrs) {
    return svg("path", Object.assign({
      d: `M${x},${cy - size} L${x + size},${cy} L${x},${cy + size} L${x - size},${cy} Z` },
      attrs), parent);
  }

  function laneRows(context, lane, index) {
    const claimed = parseTime(lane.claimed_at);
    const ended = laneEnd(lane, context.now);
    const rows = [
      ["lane", index + 1], ["token", lane.token], ["owner", lane.owner],
      ["attempt", lane.attempt], ["claimed", lane.claimed_at], ["lease until", lane.lease_until],
      ["ended", lane.ended_at], ["ended by", lane.ended_by],
      ["held for", duration(ended - claimed)],
      ["renewals kept", (lane.renewals || []).length],
    ];
    if ((lane.renewals || []).length) rows.push(["last renewal", lane.renewals[lane.renewals.length - 1]]);
    if (lane.last_heard_at) rows.push(["last heard", lane.last_heard_at]);
    if (lane.timeline !== null && lane.timeline !== undefined) rows.push(["db timeline", lane.timeline]);
    if (lane.claim_seen === false) rows.push(["claim", "no event of it survives"]);
    rows.push(["stages", (lane.stages || []).length], ["effects", (lane.effects || []).length],
              ["marks", (lane.marks || []).length]);
    return rows;
  }

  function drawLane(context, lane, index, top) {
    const X = context.X;
    const g = svg("g", { "class": "lane", "data-lane-token": lane.token, "data-token": lane.token,
                         "data-ended-by": lane.ended_by, "data-lane": index + 1 }, context.root);
    svg("line", { "class": "tl-row-sep", x1: 0, x2: context.x1 + RIGHT_PAD, y1: top + LANE_H,
                  y2: top + LANE_H }, g);
    // The label in the gutter: lane, attempt, how it ended; token; owner.
    const label = svg("g", { "class": "tl-lane-label" }, g);
    const title = svgText(label, 8, top + 17, "lane " + (index + 1)
      + (lane.attempt ? " · attempt " + lane.attempt : "") + " · ", { "class": "tl-lane-title" });
    const how = svg("tspan", { fill: END_COLOUR[lane.ended_by] || "#374151", "class": "tl-ended-by" },
                    title);
    how.textContent = lane.ended_by;
    const chars = Math.floor((context.gutter - 16) / 6.3);
    svgText(label, 8, top + 33, "token " + clip(lane.token, chars - 6), { "class": "tl-lane-sub" });
    svgText(label, 8, top + 48, "owner " + clip(lane.owner, chars - 6), { "class": "tl-lane-sub" });
    const rows = laneRows(context, lane, index);
    tipped(label, "lane-" + lane.token, "lane " + (index + 1) + ": token " + lane.token, rows);

    const body = svg("g", { "class": "lane-plot", "data-lane-token": lane.token }, g);
    body.setAttribute("clip-path", context.plot.getAttribute("clip-path"));
    const claimed = parseTime(lane.claimed_at);
    const ended = laneEnd(lane, context.now);
    const barTop = top + 20, barH = 22, cy = barTop + barH / 2;
    const left = X(claimed), right = Math.max(X(ended), left + 2);
    const bar = svg("g", { "class": "tl-lease" }, body);
    svg("rect", { "class": "tl-bar", x: left, y: barTop, width: right - left, height: barH,
                  rx: 3, fill: "#dbeafe", stroke: "#60a5fa",
                  "stroke-dasharray": lane.ended_by === "failover" || lane.ended_by === "unknown"
                    ? "4 3" : null }, bar);
    tipped(bar, "lane-bar-" + lane.token, "lease of token " + lane.token, rows);
    const silentFrom = Math.max(X(lastHeard(lane).t), left);
    const silent = lane.ended_by === "expired" && right - silentFrom > 0.5;
    if (silent) {
      const heard = lastHeard(lane);
      const hatched = svg("g", { "class": "tl-silent", "data-hatched": "true" }, body);
      svg("rect", { x: silentFrom, y: barTop, width: right - silentFrom, height: barH,
                    fill: "url(#" + context.hatch + ")", stroke: "#64748b" }, hatched);
      tipped(hatched, "lane-silent-" + lane.token, "heartbeats stopped", [
        ["last heard", heard.at], ["expired", lane.ended_at],
        ["silent for", duration(ended - heard.t)], ["token", lane.token], ["owner", lane.owner]]);
    }
    if (lane.ended_by === "running") {
      const until = parseTime(lane.lease_until);
      if (until !== null && until > ended) {
        svg("rect", { "class": "tl-lease-ahead", x: right, y: barTop, width: Math.max(X(until) - right, 0),
                      height: barH, rx: 3 }, body);
      }
    }
    (lane.renewals || []).forEach((at, n) => {
      const x = X(parseTime(at));
      const tick = svg("g", { "class": "tl-renewal", "data-renewal": at }, body);
      svg("line", { x1: x, x2: x, y1: barTop - 3, y2: barTop + barH + 3, stroke: "#1e3a8a",
                    "stroke-width": 2 }, tick);
      svg("rect", { x: x - 4, y: barTop - 3, width: 8, height: barH + 6, fill: "transparent" }, tick);
      tipped(tick, "renewal-" + lane.token + "-" + n, "renewal kept", [["at", at],
             ["", timeRows(context, at)[1]], ["token", lane.token], ["lease until", lane.lease_until]]);
    });

    const labels = [];
    const hatchOver = silent ? svg("rect", { "class": "tl-silent-over", x: silentFrom, y: barTop,
                                             width: right - silentFrom, height: barH,
                                             fill: "url(#" + context.hatch + "-over)" }) : null;
    // Stages: segments inside the bar.
    (lane.stages || []).forEach((stage) => {
      const start = parseTime(stage.started_at);
      let end = parseTime(stage.ended_at);
      if (end === null) end = stage.status === "running" ? context.now : ended;
      const sx = X(start), ex = Math.max(X(end), sx + 3);
      const seg = svg("g", { "class": "tl-stage", "data-stage-status": stage.status,
                             "data-stage-name": stage.name, "data-stage-kind": stage.kind,
                             "data-stage-position": stage.position,
                             "data-in-doubt-from": stage.in_doubt_from }, body);
      svg("rect", { x: sx, y: barTop + 4, width: ex - sx, height: barH - 8, rx: 2,
                    fill: STATUS_FILL[stage.status] || "#64748b",
                    "fill-opacity": stage.status === "in_doubt" ? 0.75 : 0.9 }, seg);
      const rows = [["stage", stage.name], ["kind", stage.kind], ["position", stage.position],
                    ["status", STATUS_WORD[stage.status] || stage.status],
                    ["started", stage.started_at], ["ended", stage.ended_at],
                    ["took", stage.ended_at ? duration(parseTime(stage.ended_at) - start) : "–"]];
      if (stage.in_doubt_from !== null && stage.in_doubt_from !== undefined) {
        rows.push(["found in doubt", "started by token " + stage.in_doubt_from]);
      }
      tipped(seg, "stage-" + lane.token + "-" + stage.position, stage.kind + " " + stage.name, rows,
             stage.kind + " " + stage.name + ": " + (STATUS_WORD[stage.status] || stage.status));
      if (stage.kind !== "effect" && ex - sx > stage.name.length * 6.5 + 6) {
        svgText(seg, sx + 4, barTop + barH / 2 + 4, stage.name, { "class": "tl-stage-name" });
      }
    });
    if (hatchOver) body.appendChild(hatchOver);  // the silence shows over stages left in doubt
    // Effects: diamonds where they were sent, with their fence and key.
    const effectsAt = {};
    (lane.effects || []).forEach((effect) => {
      const x = X(parseTime(effect.started_at));
      effectsAt[effect.position] = x;
      const g = svg("g", { "class": "tl-effect", "data-effect-name": effect.name,
                           "data-effect-status": effect.status,
                           "data-effect-position": effect.position,
                           "data-fence": effect.fence,
                           "data-in-doubt": effect.in_doubt ? "true" : "false" }, body);
      diamond(g, x, cy, 8, { fill: STATUS_FILL[effect.status] || "#64748b", stroke: "#111827",
                             "stroke-width": 1.5 });
      if (effect.in_doubt) {
        svg("circle", { cx: x, cy: cy, r: 2.5, fill: "#fff" }, g);
      }
      const rows = [["effect", effect.name], ["position", effect.position], ["fence", effect.fence],
                    ["key", effect.key], ["status", STATUS_WORD[effect.status] || effect.status],
                    ["found in doubt", effect.in_doubt ? "yes: reconciled by this holder" : "no"],
                    ["started", effect.started_at], ["ended", effect.ended_at]];
      tipped(g, "effect-" + lane.token + "-" + effect.position, "effect " + effect.name, rows);
      labels.push({ x: x, text: effect.name + (effect.in_doubt ? " (was in doubt)" : ""),
                    cls: "tl-effect-name", rank: 3 });
    });
    // Marks: what went wrong, where it happened.
    (lane.marks || []).forEach((mark, n) => {
      const x = X(parseTime(mark.at));
      const g = svg("g", { "class": "tl-mark", "data-mark": mark.type }, body);
      const detail = mark.detail || {};
      if (mark.type === "effect_refused") {
        const from = effectsAt[detail.position];
        if (from !== undefined && Math.abs(from - x) > 10) {
          svg("line", { x1: from + 9, x2: x - 9, y1: cy, y2: cy, stroke: "#dc2626",
                        "stroke-dasharray": "3 3", "stroke-width": 1.2 }, g);
        }
        diamond(g, x, cy, 8, { fill: "#fff", stroke: "#dc2626", "stroke-width": 1.5 });
        svg("rect", { "class": "tl-refused-bar", x: x - 11, y: cy - 2.5, width: 22, height: 5,
                      fill: "#dc2626", rx: 1 }, g);
        labels.push({ x: x, text: (detail.name || "effect") + " refused", cls: "tl-bad", rank: 0 });
      } else if (CROSSES.has(mark.type)) {
        crossAt(g, x, cy, "#dc2626");
        labels.push({ x: x, text: mark.type.replace(/_/g, " "), cls: "tl-bad",
                      rank: mark.type === "result_rejected" ? 1 : 2 });
      } else {
        const colour = AMBER.has(mark.type) ? "#d97706"
          : mark.type === "child_spawned" ? "#2563eb" : "#64748b";
        svg("circle", { cx: x, cy: top + 10, r: 4, fill: colour, stroke: "#fff",
                        "stroke-width": 1.2 }, g);
      }
      tipped(g, "mark-" + lane.token + "-" + n, mark.type, markRows(context, mark));
    });
    // Labels below the bar, the most telling first, skipping those that would overlap.
    labels.sort((a, b) => a.rank - b.rank || a.x - b.x);
    const taken = [];
    for (const item of labels) {
      if (item.x < context.x0 || item.x > context.x1) continue;
      const wide = item.text.length * (item.cls === "tl-bad" ? 6.6 : 6);
      const x = Math.min(Math.max(item.x - wide / 2, context.x0), context.x1 - wide);
      if (taken.some(([a, b]) => x < b + 8 && x + wide + 8 > a)) continue;
      svgText(body, x, barTop + barH + 14, item.text, { "class": "tl-label " + item.cls });
      taken.push([x, x + wide]);
    }
  }

  function waitWords(wait) {
    if (wait.for === "signal") return "signal " + (wait.name || "");
    if (wait.for === "jobs") return "child jobs";
    if (wait.for === "timer") return "timer";
    return wait.for ? String(wait.for) : "waiting";
  }

  function drawWaits(context, waits, lanesTop, top) {
    const X = context.X;
    const row = svg("g", { "class": "tl-waits", "data-row": "waits" }, context.root);
    svgText(row, 8, top + 21, "waits (no lease)", { "class": "tl-lane-title" });
    waits.forEach((wait, index) => {
      const from = parseTime(wait.from);
      const to = wait.to ? parseTime(wait.to) : context.now;
      const left = X(from), right = Math.max(X(to), left + 2);
      // A faint band across the lanes: nobody held the lease then.
      svg("rect", { "class": "tl-wait-band", x: left, y: lanesTop, width: right - left,
                    height: top - lanesTop }, context.plot);
      const g = svg("g", { "class": "tl-wait", "data-wait-for": wait.for || "unknown",
                           "data-wait-name": wait.name }, context.plot);
      svg("rect", { x: left, y: top + 9, width: right - left, height: 14, rx: 7,
                    fill: "#ede9fe", stroke: "#8b5cf6" }, g);
      const words = waitWords(wait) + (wait.to ? "" : " (still waiting)");
      const seen = Math.max(left, context.x0), seenRight = Math.min(right, context.x1);
      if (seenRight < context.x0 || seen > context.x1) {
        // out of the window: no label
      } else if (seenRight - seen > words.length * 6.2 + 10) {
        svgText(g, seen + 7, top + 20, words, { "class": "tl-wait-name" });
      } else {
        svgText(g, Math.min(right + 4, context.x1 - words.length * 6.2), top + 20, words,
                { "class": "tl-wait-name" });
      }
      tipped(g, "wait-" + index, "waited for " + waitWords(wait), [
        ["for", wait.for], ["name", wait.name], ["position", wait.position],
        ["from", wait.from], ["to", wait.to], ["waited", duration(to - from)]]);
    });
  }

  function drawRules(context, rules, top, height) {
    rules.forEach((rule, index) => {
      const x = context.X(parseTime(rule.at));
      if (x < context.x0 - 1 || x > context.x1 + 1) return;
      const g = svg("g", { "class": "tl-rule", "data-rule": rule.kind || "failover",
                           "data-from-timeline": rule.from_timeline,
                           "data-to-timeline": rule.to_timeline }, context.root);
      svg("line", { x1: x, x2: x, y1: AXIS_H - 4, y2: height, stroke: "#c2410c",
                    "stroke-width": 2, "stroke-dasharray": "6 4" }, g);
      svg("rect", { x: x - 5, y: AXIS_H - 4, width: 10, height: height - AXIS_H + 4,
                    fill: "transparent" }, g);
      const what = rule.kind === "restore" ? "another server" : "failover";
      const words = what + ": timeline " + rule.from_timeline + " → " + rule.to_timeline;
      const wide = words.length * 6.4;
      const tx = x + 5 + wide > context.x1 ? x - 5 - wide : x + 5;
      svgText(g, tx, top + 11, words, { "class": "tl-rule-label" });
      tipped(g, "rule-" + index, rule.kind === "restore"
        ? "another database server (a restore or an upgrade into a new cluster)"
        : "database failover", [
        ["at", rule.at], ["", timeRows(context, rule.at)[1]],
        ["from WAL timeline", rule.from_timeline], ["to WAL timeline", rule.to_timeline]], words);
    });
  }

  function legend() {
    const box = html("div", { "class": "tl-legend", "aria-hidden": "true" });
    const item = (text, paint) => {
      const span = html("span", { "class": "tl-legend-item" }, box);
      const swatch = svg("svg", { width: 22, height: 14, viewBox: "0 0 22 14" }, span);
      paint(swatch);
      html("span", {}, span, text);
    };
    item("lease", (s) => svg("rect", { x: 1, y: 2, width: 20, height: 10, rx: 2, fill: "#dbeafe",
                                       stroke: "#60a5fa" }, s));
    item("heartbeats stopped", (s) => {
      for (let i = -8; i < 22; i += 4) {
        svg("line", { x1: i, y1: 13, x2: i + 10, y2: 1, stroke: "#64748b", "stroke-width": 1.5 }, s);
      }
    });
    item("renewal", (s) => svg("line", { x1: 11, x2: 11, y1: 0, y2: 14, stroke: "#1e3a8a",
                                         "stroke-width": 2 }, s));
    for (const status of ["done", "failed", "in_doubt", "running", "refused"]) {
      item("stage " + STATUS_WORD[status], (s) => svg("rect", { x: 1, y: 3, width: 20, height: 8,
                                                                rx: 2, fill: STATUS_FILL[status] }, s));
    }
    item("effect (fence, key)", (s) => diamond(s, 11, 7, 6, { fill: "#16a34a", stroke: "#111827" }));
    item("write rejected", (s) => crossAt(s, 11, 7, "#dc2626"));
    item("effect refused", (s) => {
      diamond(s, 11, 7, 6, { fill: "#fff", stroke: "#dc2626" });
      svg("rect", { x: 2, y: 5, width: 18, height: 4, fill: "#dc2626" }, s);
    });
    item("wait (no lease)", (s) => svg("rect", { x: 1, y: 3, width: 20, height: 8, rx: 4,
                                                 fill: "#ede9fe", stroke: "#8b5cf6" }, s));
    item("failover", (s) => svg("line", { x1: 11, x2: 11, y1: 0, y2: 14, stroke: "#c2410c",
                                          "stroke-width": 2, "stroke-dasharray": "3 2" }, s));
    return box;
  }

  // -- the run tree ---------------------------------------------------------------------------
  function waitText(wait) {
    if (!wait) return null;
    if (wait.for === "signal") return "waits for signal " + (wait.name || "");
    if (wait.for === "jobs") {
      const count = (wait.jobs || []).length;
      return "waits for " + count + " child job" + (count === 1 ? "" : "s");
    }
    if (wait.for === "timer") return "waits for a timer";
    return "waits";
  }

  function treeNode(node, focus, linkFor, depth) {
    const li = html("li", { "data-tree-job": node.id, "data-state": node.state,
                            "data-depth": depth, "class": "rt-item" });
    const row = html("div", { "class": "rt-node" }, li);
    if (node.id === focus) {
      li.setAttribute("data-focus", "true");
      row.setAttribute("aria-current", "true");
    }
    html("span", { "class": "state state-" + node.state }, row, node.state);
    const href = linkFor(node.id);
    const name = node.kind + " " + String(node.id).slice(-8);
    if (href) html("a", { href: href, "class": "rt-link", title: node.id }, row, name);
    else html("span", { "class": "rt-name", title: node.id }, row, name);
    const facts = ["attempt " + node.attempt + "/" + node.max_attempts, "token " + node.token];
    if (node.cost) {
      facts.push(node.cost.tokens + " tokens · $" + Number(node.cost.usd).toFixed(4));
    }
    if (node.principal) facts.push("acts for " + node.principal);
    if (node.state === "waiting" && waitText(node.wait)) facts.push(waitText(node.wait));
    html("span", { "class": "rt-facts mono" }, row, facts.join(" · "));
    if (node.id === focus) html("span", { "class": "rt-here" }, row, "this job");
    const children = node.children || [];
    if (children.length) {
      const list = html("ul", { "class": "rt-children" }, li);
      for (const child of children) list.appendChild(treeNode(child, focus, linkFor, depth + 1));
    }
    return li;
  }

  function renderTree(container, tree, options) {
    if (!container) return;
    const signature = JSON.stringify(tree === undefined ? null : tree);
    if (container.__tenureTree === signature && container.firstChild) return;
    container.__tenureTree = signature;
    const linkFor = (options && typeof options.linkFor === "function")
      ? options.linkFor : () => null;
    const box = html("div", { "class": "rt" });
    if (!tree || !tree.root) {
      html("p", { "class": "muted" }, box, "no run tree");
    } else {
      const count = (node) => 1 + (node.children || []).reduce((n, c) => n + count(c), 0);
      const total = count(tree.root);
      html("div", { "class": "muted rt-summary" }, box, total === 1
        ? "no parent, no children: this job alone"
        : total + " jobs, from the root down");
      const list = html("ul", { "class": "rt-tree" }, box);
      list.appendChild(treeNode(tree.root, tree.focus, linkFor, 0));
      if (tree.truncated) {
        html("div", { "class": "muted rt-truncated", "data-truncated": "true" }, box,
             "more jobs below: the tree is cut at 6 levels and 500 jobs");
      }
      if (tree.budget) {
        const left = Object.keys(tree.budget.remaining).sort()
          .map((unit) => unit + " " + Number(tree.budget.remaining[unit]).toFixed(4));
        html("div", { "class": "muted rt-budget", "data-exhausted": String(tree.budget.exhausted) },
             box, (tree.budget.exhausted ? "budget spent · " : "budget left: ") + left.join(" · "));
      }
    }
    const active = document.activeElement;
    const again = active && container.contains(active) && active.getAttribute("href");
    container.replaceChildren(box);
    if (again) {
      const link = container.querySelector('a[href="' + CSS.escape(again) + '"]');
      if (link) link.focus({ preventScroll: true });
    }
  }

  global.renderTimeline = renderTimeline;
  global.renderTree = renderTree;
  // The axis's arithmetic, for tests/integration/test_timeline_page.py.
  global.tenureTimeline = { parseTime: parseTime, offsetLabel: offsetLabel, duration: duration,
                            tickStep: tickStep };
})(typeof window !== "undefined" ? window : this);
