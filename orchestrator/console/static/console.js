// pgq console: draws /api/overview into the page's tables. Plain DOM, no
// framework; every value goes in as text (never HTML), so topic names and
// payloads cannot inject markup.
"use strict";
(function () {
  const meta = (n) => (document.querySelector('meta[name="' + n + '"]') || {}).content || "";
  const admin = meta("pgq-admin") === "true";
  const refreshMS = Math.max(1000, parseInt(meta("pgq-refresh-ms"), 10) || 5000);
  let csrf = meta("pgq-csrf");
  let dl = null; // the group whose dead letters are open: {topic, group}
  let timer = null;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }
  const td = (text, cls, attrs) => el("td", Object.assign({ class: cls || null, text: text }, attrs || {}));
  const num = (n, cls) => td(fmtCount(n), "num " + (cls || ""), { "data-value": n === null ? "" : n });

  function fmtCount(n) {
    if (n === null || n === undefined) return "–";
    return Number(n).toLocaleString("en-US");
  }
  function fmtAge(s) {
    if (s === null || s === undefined) return "–";
    if (s <= 0) return "0s";
    if (s < 1) return Math.round(s * 1000) + "ms";
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60), x = Math.floor(s % 60);
    if (d >= 2) return d + "d";
    if (d > 0 || h > 0) return (d * 24 + h) + "h" + (m ? m + "m" : "");
    if (m > 0) return m + "m" + (x ? x + "s" : "");
    return x + "s";
  }
  function fmtAgo(ts, now) {
    if (!ts) return "–";
    return fmtAge(Math.max(0, (now - Date.parse(ts)) / 1000)) + " ago";
  }
  function fmtBytes(b) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : b) + " " + u[i];
  }
  const groupLabel = (g) => (g.queue ? "(queue)" : g.group);

  function fmtRate(r) {
    if (r === null || r === undefined) return "–";
    return (r >= 100 ? fmtCount(Math.round(r)) : r >= 10 ? r.toFixed(0) : r.toFixed(1)) + "/s";
  }

  // A sparkline of points {t, v} with its scale: the largest value, drawn
  // at the top, is written beside it ("max 1,234", "max 5.0/s").
  function sparkline(points, what, fmt) {
    const W = 120, H = 24, ns = "http://www.w3.org/2000/svg";
    const wrap = el("span", { class: "spark-wrap" });
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", "sparkline");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    svg.setAttribute("data-points", points.length);
    wrap.append(svg);
    if (points.length === 0) { wrap.append(el("span", { class: "scale muted", text: "no samples yet" })); return wrap; }
    const vals = points.map((p) => p.v);
    const top = Math.max(...vals);
    const max = Math.max(top, 1e-9);
    const t0 = Date.parse(points[0].t), t1 = Date.parse(points[points.length - 1].t);
    const span = Math.max(1, t1 - t0);
    const y = (v) => (H - 2 - (v / max) * (H - 4)).toFixed(1);
    // One sample so far: a flat stub at the right end.
    const pts = points.length === 1 ? [(W - 12) + "," + y(vals[0]), (W - 1) + "," + y(vals[0])] :
      points.map((p) => (1 + ((Date.parse(p.t) - t0) / span) * (W - 3)).toFixed(1) + "," + y(p.v));
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
    const title = document.createElementNS(ns, "title");
    title.textContent = what + " over the last " + fmtAge((t1 - t0) / 1000) + ": min " + fmt(Math.min(...vals)) +
      ", max " + fmt(top) + " (" + points.length + " samples)";
    svg.append(title);
    wrap.append(el("span", { class: "scale", "data-max": top, text: "max " + fmt(top) }));
    return wrap;
  }
  const lagPoints = (hist) => hist.map((s) => ({ t: s.t, v: s.messages }));
  const ratePoints = (hist, key) => hist.filter((s) => s[key] !== null && s[key] !== undefined).map((s) => ({ t: s.t, v: s[key] }));

  // Key partitions of a group: a summary, and each partition's owner and
  // lag under a <details>.
  function keyPartitionsCell(g) {
    const c = el("td", { class: "key-partitions" });
    const kp = g.key_partitions || [];
    if (kp.length === 0) { c.textContent = "–"; return c; }
    const owners = new Set(kp.filter((k) => k.owner).map((k) => k.owner));
    const unowned = kp.filter((k) => !k.owner).length;
    const worst = kp.reduce((a, k) => (k.lag_messages > a.lag_messages ? k : a), kp[0]);
    const d = el("details", {}, el("summary", { text: kp.length + " (" + owners.size + " owner" + (owners.size === 1 ? "" : "s") +
      (unowned ? ", " + unowned + " unowned" : "") + ", max lag " + fmtCount(worst.lag_messages) + ")" }));
    const t = el("table", { class: "kp" }, el("thead", {}, el("tr", {}, el("th", { class: "num", text: "#" }), el("th", { text: "Owner" }),
      el("th", { class: "num", text: "Lag" }), el("th", { class: "num", text: "Lag age" }), el("th", { class: "num", text: "In flight" }))));
    const tb = el("tbody");
    for (const k of kp) {
      tb.append(el("tr", { class: "key-partition", "data-partition": k.partition, "data-owner": k.owner || "" },
        num(k.partition), td(k.owner || "(none)", k.owner ? "" : "muted"), num(k.lag_messages, "lag-messages"),
        td(fmtAge(k.lag_seconds), "num"), num(k.in_flight)));
    }
    t.append(tb);
    d.append(t);
    c.append(d);
    return c;
  }

  // Search, status filter and paging: the server pages the topics (by
  // name; the groups are the page's topics'), kept in the URL
  // (?q=&status=&page=) so a view can be shared.
  const view = { q: "", status: "", page: 1 };
  function matches(text) { return !view.q || (text || "").toLowerCase().includes(view.q.toLowerCase()); }
  function pager(p) {
    const from = p.topics ? (p.page - 1) * p.page_size + 1 : 0, to = Math.min(p.topics, p.page * p.page_size);
    document.getElementById("topics-pager").replaceChildren(
      el("button", { type: "button", class: "prev", disabled: p.page <= 1, onclick: () => { view.page = p.page - 1; syncURL(); load(); } }, "‹ prev"),
      el("span", { class: "muted page-info", "data-total": p.topics, "data-page": p.page, "data-pages": p.pages,
        text: " topics " + fmtCount(from) + "–" + fmtCount(to) + " of " + fmtCount(p.topics) + " (page " + p.page + " of " + p.pages + ") " }),
      el("button", { type: "button", class: "next", disabled: p.page >= p.pages, onclick: () => { view.page = p.page + 1; syncURL(); load(); } }, "next ›"));
  }
  function syncURL() {
    const params = new URLSearchParams(location.search);
    for (const k of ["q", "status", "page"]) {
      if (view[k] && !(k === "page" && view[k] === 1)) params.set(k, view[k]); else params.delete(k);
    }
    const qs = params.toString();
    history.replaceState(null, "", (qs ? "?" + qs : location.pathname) + location.hash);
  }
  function overviewURL() {
    const p = new URLSearchParams();
    if (view.q) p.set("q", view.q);
    if (view.status) p.set("status", view.status);
    if (view.page > 1) p.set("page", view.page);
    const qs = p.toString();
    return "api/overview" + (qs ? "?" + qs : "");
  }

  function backfillCell(b) {
    const c = el("td", { class: "backfill" });
    if (!b) { c.textContent = "–"; return c; }
    c.setAttribute("data-status", b.status);
    if (b.percent !== null) c.append(el("progress", { max: 100, value: b.percent.toFixed(1) }), " ");
    let t = b.status.replace("_", " ");
    if (b.percent !== null) t += " " + Math.floor(b.percent) + "%";
    c.append(el("span", { text: t }));
    let d = "";
    if (b.processed !== null && b.total !== null) d = fmtCount(b.processed) + " of " + fmtCount(b.total);
    if (b.active && b.eta_seconds !== null) d += ", ETA " + fmtAge(b.eta_seconds);
    if (d) c.append(el("br"), el("span", { class: "muted", text: d }));
    return c;
  }

  function replace(tbodySel, rows, empty, cols) {
    const tb = document.querySelector(tbodySel);
    tb.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: cols, class: "muted", text: empty }))]));
  }

  function render(ov) {
    const now = Date.parse(ov.generated_at);
    document.getElementById("updated").textContent = "updated " + new Date(now).toLocaleTimeString();
    const leader = document.getElementById("leader");
    leader.textContent = ov.leader ? "leader: " + ov.leader.id + (ov.sidecar.leader ? " (this sidecar)" : "") : "leader: none";
    leader.className = "pill " + (ov.leader ? "ok" : "bad");
    const db = document.getElementById("database");
    db.textContent = "database: up";
    db.className = "pill ok";

    pager(ov.page);
    replace("#topics tbody", ov.topics.map((t) => el("tr", { class: "topic", "data-topic": t.topic },
      td(t.topic, "name"), td(t.semantics), td(t.completion || "–"), num(t.active_groups, "active-groups"),
      td(fmtRate(t.publish_rate), "num publish-rate", { "data-value": t.publish_rate === null ? "" : t.publish_rate }),
      el("td", { class: "spark" }, sparkline(ratePoints(t.publish_history, "publish_rate"), "publish rate", fmtRate)),
      num(t.messages, "messages"),
      td(fmtAge(t.oldest_message_age_seconds), "num"), num(t.key_partitions, "key-partitions"), num(t.segments, "segments"),
      td(fmtBytes(t.bytes), "num"),
      num(t.dropped_unread, t.dropped_unread > 0 ? "bad" : ""))),
    view.q || view.status ? "no topic matches" : "no topics yet: SELECT fanout.create_topic('name');", 11);

    const groups = ov.groups.filter((g) => (matches(g.topic) || matches(g.group)) && (!view.status || g.status === view.status));
    replace("#groups tbody", groups.map((g) => {
      const members = g.member_list.map((m) => m.consumer + " (" + fmtAgo(m.last_seen, now) + ")").join("\n");
      const dlCell = el("td", { class: "num dead-letters" + (g.dead_letters > 0 ? " bad" : ""), "data-value": g.dead_letters },
        fmtCount(g.dead_letters));
      if (g.dead_letters > 0) {
        dlCell.append(" ", el("a", { href: dlLink(g.topic, g.group), class: "view-dl", onclick: (e) => { e.preventDefault(); openDL(g.topic, g.group); } }, "view"));
      }
      const row = el("tr", { class: "group status-" + g.status, "data-topic": g.topic, "data-group": g.group, "data-status": g.status },
        td(g.topic, "name"), td(groupLabel(g), "name"),
        el("td", {}, el("span", { class: "badge status-" + g.status, text: g.status })),
        td(fmtCount(g.members), "num", { title: members || null }),
        td(g.last_heartbeat ? fmtAgo(g.last_heartbeat, now) : "no member yet", "last-heartbeat"),
        num(g.lag_messages, "lag-messages"),
        td(fmtAge(g.lag_seconds), "num lag-seconds", { "data-value": g.lag_seconds }),
        el("td", { class: "spark" }, sparkline(lagPoints(g.lag_history), "lag", fmtCount)),
        td(fmtRate(g.deliver_rate), "num deliver-rate", { "data-value": g.deliver_rate === null ? "" : g.deliver_rate }),
        td(fmtRate(g.settle_rate), "num settle-rate", { "data-value": g.settle_rate === null ? "" : g.settle_rate }),
        el("td", { class: "spark" }, sparkline(ratePoints(g.lag_history, "settle_rate"), "acked and dead-lettered per second", fmtRate)),
        td(fmtRate(g.nack_rate), "num nack-rate" + (g.nack_rate > 0 ? " bad" : ""), { "data-value": g.nack_rate === null ? "" : g.nack_rate,
          "data-total": g.nacked_total, title: "since the group was created: " + fmtCount(g.acked_total) + " acked, " +
            fmtCount(g.nacked_total) + " nacked, " + fmtCount(g.dead_lettered_total) + " dead-lettered" }),
        keyPartitionsCell(g),
        num(g.in_flight, "in-flight"), num(g.retry_pending, "retry-pending"), dlCell,
        td(g.newest_dead_letter_error || "", "error-text", { title: g.newest_dead_letter_error || null }),
        num(g.lost_messages, "lost" + (g.lost_messages > 0 ? " bad" : "")),
        backfillCell(g.backfill));
      if (admin) {
        const acts = el("td", { class: "actions" });
        if (g.status === "dead") {
          acts.append(el("button", { type: "button", class: "act-resurrect", onclick: () =>
            act("resurrect_group", { topic: g.topic, group: g.group }, "Resurrect " + g.topic + "/" + groupLabel(g) + "?") }, "Resurrect"));
        }
        if (g.backfill && (g.backfill.status === "in_progress" || g.backfill.status === "not_started")) {
          acts.append(el("button", { type: "button", class: "act-cancel-backfill", onclick: () =>
            act("cancel_backfill", { topic: g.topic, group: g.group }, "Cancel the backfill of " + g.topic + "/" + groupLabel(g) + "?") }, "Cancel backfill"));
        }
        row.append(acts);
      }
      return row;
    }), view.q || view.status ? "no group matches" : "no groups", admin ? 20 : 19);

    const note = document.getElementById("jobs-note");
    note.textContent = ov.sidecar.leader ? "(this sidecar is the leader)" :
      "(this sidecar is a standby: jobs run on the leader" + (ov.leader ? ", " + ov.leader.id : "") + ")";
    replace("#jobs tbody", ov.jobs.map((j) => el("tr", { class: "job" + (j.overdue ? " overdue" : "") + (j.last_error ? " failing" : ""), "data-job": j.name },
      td(j.name, "name"), td(j.schedule), num(j.runs), num(j.errors, j.errors > 0 ? "bad" : ""),
      td(fmtAgo(j.last_run, now)), td(j.last_duration_seconds === null ? "–" : fmtAge(j.last_duration_seconds), "num"),
      td(fmtAgo(j.last_success, now) + (j.overdue ? " (overdue)" : "")), td(j.last_error || "", "error-text"))),
    "no jobs", 8);

    replace("#events tbody", ov.events.map((e) => el("tr", { class: "event", "data-kind": e.kind },
      td(new Date(Date.parse(e.at)).toLocaleString()), td(e.topic, "name"), td(e.group === null ? "" : e.group, "name"),
      td(e.kind), num(e.count), td(JSON.stringify(e.detail), "detail"))),
    ov.events_error ? "fanout.event_log is not readable: " + ov.events_error : "no events", 6);
  }

  function showError(msg) {
    const e = document.getElementById("error");
    e.textContent = msg || "";
    e.hidden = !msg;
  }

  async function getJSON(url, headers) {
    const r = await fetch(url, { cache: "no-store", credentials: "same-origin", headers: headers || {} });
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new Error((body && body.error) || r.status + " " + r.statusText);
    return body;
  }

  async function load() {
    try {
      render(await getJSON(overviewURL()));
      showError("");
      document.body.setAttribute("data-loaded", "true");
      if (dl) await loadDL();
    } catch (err) {
      showError("could not load /api/overview: " + err.message);
      const db = document.getElementById("database");
      db.textContent = "database: ?";
      db.className = "pill bad";
    }
  }

  // A link to a group's dead letters: /?dead_letters=TOPIC&group=GROUP.
  function dlLink(topic, group) {
    return "?" + new URLSearchParams({ dead_letters: topic, group: group }).toString() + "#dead-letters";
  }

  function openDL(topic, group) {
    dl = { topic: topic, group: group };
    history.replaceState(null, "", dlLink(topic, group));
    document.getElementById("dead-letters").hidden = false;
    document.getElementById("dl-title").textContent = topic + " / " + (group || "(queue)");
    loadDL().then(() => document.getElementById("dead-letters").scrollIntoView(),
      (err) => showError("could not load the dead letters: " + err.message));
  }

  async function loadDL() {
    const q = "topic=" + encodeURIComponent(dl.topic) + "&group=" + encodeURIComponent(dl.group) + "&limit=50";
    // Beyond loopback the server shows payloads only to the admin token.
    const tok = admin ? document.getElementById("admin-token").value : "";
    const rows = await getJSON("api/dead_letters?" + q, tok ? { "Authorization": "Bearer " + tok } : {});
    // Keep the operator's ticks across refreshes.
    const picked = new Set([...document.querySelectorAll(".dl-pick:checked")].map((c) => c.value));
    replace("#dl-table tbody", rows.map((d) => {
      const tr = el("tr", { class: "dead-letter", "data-id": d.message_id });
      if (admin) tr.append(el("td", {}, el("input", { type: "checkbox", class: "dl-pick", value: d.message_id, checked: picked.has(String(d.message_id)) })));
      tr.append(num(d.message_id), num(d.attempts), td(new Date(Date.parse(d.dead_at)).toLocaleString()),
        td(d.last_error || "", "error-text"),
        td(d.payload_hidden ? "(hidden: " + fmtCount(d.payload_chars) + " chars; the console listens beyond loopback and shows payloads only with the admin token)"
          : d.payload + (d.payload_truncated ? " … (" + fmtCount(d.payload_chars) + " chars)" : ""), "payload"));
      return tr;
    }), "no dead letters", admin ? 6 : 5);
  }

  // One message by id: status per group; payload and headers with the token.
  async function loadMessage(topic, id) {
    const sec = document.getElementById("message");
    sec.hidden = false;
    document.getElementById("msg-topic").value = topic;
    document.getElementById("msg-id").value = id;
    const tok = document.getElementById("msg-token").value || (admin ? document.getElementById("admin-token").value : "");
    const out = document.getElementById("msg-result");
    try {
      const m = await getJSON("api/message?" + new URLSearchParams({ topic: topic, id: id }).toString(),
        tok ? { "Authorization": "Bearer " + tok } : {});
      const head = el("p", { class: "msg-head", "data-message-id": m.message_id },
        el("b", { text: m.topic + " #" + m.message_id }),
        " published " + (m.published_at ? new Date(Date.parse(m.published_at)).toLocaleString() : "–") +
        (m.message_group ? ", message_group " + m.message_group : "") + (m.message_status ? ", " + m.message_status : ""));
      const t = el("table", { id: "msg-groups" }, el("thead", {}, el("tr", {}, el("th", { text: "Group" }), el("th", { text: "Status" }),
        el("th", { text: "Done" }), el("th", { class: "num", text: "Attempts" }), el("th", { text: "Last error" }))));
      const tb = el("tbody");
      for (const g of m.groups) {
        tb.append(el("tr", { class: "message-group", "data-group": g.group, "data-status": g.status },
          td(g.queue ? "(queue)" : g.group, "name"), td(g.status, "msg-status"), td(g.passed === null ? "–" : g.passed ? "yes" : "no"),
          num(g.attempts), td(g.last_error || "", "error-text")));
      }
      t.append(tb);
      const body = m.payload_hidden ?
        el("p", { id: "msg-hidden", class: "muted", text: "payload and headers hidden: enter the console's token to see them" }) :
        el("div", {}, el("h3", { text: "Payload" }), el("pre", { id: "msg-payload", text: m.payload === null ? "(gone)" : m.payload }),
          el("h3", { text: "Headers" }), el("pre", { id: "msg-headers", text: m.headers === null ? "(gone)" : m.headers }));
      out.replaceChildren(head, t, body);
    } catch (err) {
      out.replaceChildren(el("p", { class: "bad", id: "msg-error", text: "could not load the message: " + err.message }));
    }
  }

  async function act(action, body, question) {
    const msg = document.getElementById("admin-msg");
    const token = document.getElementById("admin-token").value;
    const actor = document.getElementById("admin-actor").value.trim();
    if (!token || !actor) { msg.textContent = "enter the admin token and your name first"; msg.className = "bad"; return; }
    sessionStorage.setItem("pgq-admin-actor", actor);
    sessionStorage.setItem("pgq-admin-token", token);
    if (!window.confirm(question)) return;
    const r = await fetch("api/admin/" + action, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token, [meta("pgq-csrf-header")]: csrf },
      body: JSON.stringify(Object.assign({ actor: actor }, body)),
    });
    const res = await r.json().catch(() => ({}));
    if (r.ok) {
      msg.textContent = action + " done (count " + res.count + ", event " + res.event_id + ")";
      msg.className = "ok";
    } else {
      msg.textContent = action + " refused: " + (res.error || r.status) + (res.code ? " [" + res.code + "]" : "");
      msg.className = "bad";
      if (res.code === "csrf") { const t = await getJSON("api/csrf"); csrf = t.csrf_token; }
    }
    await load();
  }

  function schedule() {
    clearInterval(timer);
    if (document.getElementById("autorefresh").checked) timer = setInterval(load, refreshMS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("autorefresh").addEventListener("change", schedule);
    document.getElementById("dl-close").addEventListener("click", () => {
      dl = null;
      document.getElementById("dead-letters").hidden = true;
      history.replaceState(null, "", location.pathname);
    });
    if (admin) {
      document.getElementById("admin-token").value = sessionStorage.getItem("pgq-admin-token") || "";
      document.getElementById("admin-actor").value = sessionStorage.getItem("pgq-admin-actor") || "";
      document.getElementById("dl-replay").addEventListener("click", () => {
        const ids = [...document.querySelectorAll(".dl-pick:checked")].map((c) => Number(c.value));
        if (!ids.length) { document.getElementById("admin-msg").textContent = "select dead letters to replay"; return; }
        act("replay_dead_letters", { topic: dl.topic, group: dl.group, message_ids: ids },
          "Replay " + ids.length + " dead letter(s) of " + dl.topic + "/" + (dl.group || "(queue)") + "?");
      });
    }
    const params = new URLSearchParams(location.search);
    view.q = params.get("q") || "";
    view.status = params.get("status") || "";
    view.page = parseInt(params.get("page"), 10) || 1;
    const q = document.getElementById("filter"), st = document.getElementById("status-filter");
    q.value = view.q;
    st.value = view.status;
    let typing = null;
    q.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => { view.q = q.value.trim(); view.page = 1; syncURL(); load(); }, 250);
    });
    st.addEventListener("change", () => { view.status = st.value; view.page = 1; syncURL(); load(); });
    document.getElementById("msg-token").value = sessionStorage.getItem("pgq-admin-token") || "";
    document.getElementById("msg-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const topic = document.getElementById("msg-topic").value, id = document.getElementById("msg-id").value;
      const tok = document.getElementById("msg-token").value;
      if (tok) sessionStorage.setItem("pgq-admin-token", tok);
      const p = new URLSearchParams(location.search);
      p.set("message", topic); p.set("id", id);
      history.replaceState(null, "", "?" + p.toString() + "#message");
      loadMessage(topic, id);
    });
    if (params.has("message")) loadMessage(params.get("message"), params.get("id") || "");
    if (params.has("dead_letters")) {
      dl = { topic: params.get("dead_letters"), group: params.get("group") || "" };
      document.getElementById("dead-letters").hidden = false;
      document.getElementById("dl-title").textContent = dl.topic + " / " + (dl.group || "(queue)");
    }
    load();
    schedule();
  });
})();
