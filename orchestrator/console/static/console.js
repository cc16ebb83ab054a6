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

  function sparkline(hist) {
    const W = 120, H = 24, ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", "sparkline");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    svg.setAttribute("data-points", hist.length);
    if (hist.length === 0) return svg;
    const vals = hist.map((s) => s.messages);
    const max = Math.max(1, ...vals);
    const t0 = Date.parse(hist[0].t), t1 = Date.parse(hist[hist.length - 1].t);
    const span = Math.max(1, t1 - t0);
    const y = (v) => (H - 2 - (v / max) * (H - 4)).toFixed(1);
    // One sample so far: a flat stub at the right end.
    const pts = hist.length === 1 ? [(W - 12) + "," + y(vals[0]), (W - 1) + "," + y(vals[0])] :
      hist.map((s) => (1 + ((Date.parse(s.t) - t0) / span) * (W - 3)).toFixed(1) + "," + y(s.messages));
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
    const title = document.createElementNS(ns, "title");
    title.textContent = "lag over the last " + fmtAge((t1 - t0) / 1000) + ": min " + fmtCount(Math.min(...vals)) +
      ", max " + fmtCount(Math.max(...vals)) + " messages (" + hist.length + " samples)";
    svg.append(title);
    return svg;
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

    replace("#topics tbody", ov.topics.map((t) => el("tr", { class: "topic", "data-topic": t.topic },
      td(t.topic, "name"), td(t.semantics), td(t.completion || "–"), num(t.active_groups), num(t.messages, "messages"),
      td(fmtAge(t.oldest_message_age_seconds), "num"), num(t.partitions), td(fmtBytes(t.bytes), "num"),
      num(t.dropped_unread, t.dropped_unread > 0 ? "bad" : ""))),
    "no topics yet: SELECT fanout.create_topic('name');", 9);

    replace("#groups tbody", ov.groups.map((g) => {
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
        td(fmtAgo(g.last_heartbeat, now)),
        num(g.lag_messages, "lag-messages"),
        td(fmtAge(g.lag_seconds), "num lag-seconds", { "data-value": g.lag_seconds }),
        el("td", { class: "spark" }, sparkline(g.lag_history)),
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
    }), "no groups", admin ? 15 : 14);

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
      render(await getJSON("api/overview"));
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
      history.replaceState(null, "", "/");
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
    if (params.has("dead_letters")) {
      dl = { topic: params.get("dead_letters"), group: params.get("group") || "" };
      document.getElementById("dead-letters").hidden = false;
      document.getElementById("dl-title").textContent = dl.topic + " / " + (dl.group || "(queue)");
    }
    load();
    schedule();
  });
})();
