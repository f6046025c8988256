/*
 * dsjobd's dashboard. Once a second it reads /api/status, /api/workers and
 * /api/schedules, /api/batches (and /api/job/... while a job is looked up), keeps five minutes of
 * samples in memory for the chart, and rebuilds each table in one
 * innerHTML assignment, only when its text changed, so that a thousand
 * functions cost one DOM build a second. No library, nothing loaded from
 * elsewhere; the chart is a plain <canvas>. With --http-admin, and a CSRF
 * token in the page, it shows the buttons that POST cancel, retry and drop,
 * and a function's pause, resume and limit.
 */
"use strict";

(function () {
    const KEEP = 300;         /* samples kept: five minutes at one a second */
    const TIMEOUT_MS = 5000;  /* a request not answered by then counts as failed */
    const MAX_WORKER_ROWS = 500;

    const $ = (id) => document.getElementById(id);
    const token = (document.querySelector('meta[name="dsjob-csrf"]') || {}).content || "";
    const admin = token !== "" && token !== "@TOKEN@";

    const samples = [];       /* {t, rate, depth, running} */
    let prevTotal = null, prevTime = 0;
    let funcs = [];
    let sortKey = "name", sortAsc = true;
    let filter = "";
    let lastWorkersHtml = "", lastJobHtml = "";
    let lookup = null;        /* {q, f} while a job is shown */
    let busy = false;

    /* Exposed for tests and the curious: how many samples the chart holds, the axis rule. */
    window.dsjobDashboard = {
        samples: () => samples.length, niceMax: (v) => niceMax(v), refreshes: 0, tableMs: 0, refreshMs: 0,
    };

    if (admin) {
        document.body.classList.add("admin");
        $("admin-note").textContent = "Admin writes are on (--http-admin).";
    }

    function esc(s) {
        return String(s).replace(/[&<>"']/g, (c) => ({
            "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
        })[c]);
    }

    function num(n) {
        if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
        if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
        if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
        return String(Math.round(n * 10) / 10);
    }

    function dur(s) {
        if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + "s";
        if (s < 3600) return Math.floor(s / 60) + "m" + Math.floor(s % 60) + "s";
        if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
        return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
    }

    async function get(url) {
        const ctl = new AbortController();
        const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
        try {
            const r = await fetch(url, { signal: ctl.signal, cache: "no-store" });
            const body = await r.json().catch(() => ({ error: "not JSON" }));
            return { status: r.status, body };
        } finally {
            clearTimeout(timer);
        }
    }

    async function post(url) {
        const r = await fetch(url, { method: "POST", headers: { "X-CSRF-Token": token } });
        const body = await r.json().catch(() => ({ error: "not JSON" }));
        return { status: r.status, body };
    }

    function toast(msg) {
        const t = $("toast");
        t.textContent = msg;
        t.classList.add("show");
        clearTimeout(toast.timer);
        toast.timer = setTimeout(() => t.classList.remove("show"), 4000);
    }

    /* ---- the summary and the samples ---- */

    function summarize(st) {
        let total = 0, depth = 0, running = 0;
        for (const f of st.functions) {
            total += f.completed + f.failed + f.exceptions;
            depth += f.queued.high + f.queued.normal + f.queued.low + f.shared_waiting;
            running += f.running;
        }
        const now = performance.now() / 1000;
        let rate = 0;
        if (prevTotal !== null && now > prevTime) {
            /* A dropped function takes its counters along: never a negative rate. */
            rate = Math.max(0, (total - prevTotal) / (now - prevTime));
        }
        const first = prevTotal === null;
        prevTotal = total;
        prevTime = now;
        if (!first) {
            samples.push({ t: Date.now(), rate, depth, running });
            if (samples.length > KEEP) samples.shift();
        }
        $("version").textContent = "version " + st.version;
        /* The shared table's column shows with the PostgreSQL store only. */
        document.body.classList.toggle("shared", st.store.name === "postgres");
        const h = $("health");
        h.textContent = st.healthy ? "healthy" : "unavailable: " + st.reason;
        h.className = "badge " + (st.healthy ? "ok" : "bad");
        $("s-jobs").textContent = num(st.jobs);
        /* st.jobs holds the dead sets and kept results too: say how many. */
        let live = 0, dead = 0;
        for (const f of st.functions) {
            live += f.queued.high + f.queued.normal + f.queued.low + f.scheduled + f.running;
            dead += f.dead;
        }
        const kept = Math.max(0, st.jobs - live - dead);
        $("s-jobs-note").textContent = num(live) + " live, " + num(dead) + " dead, " + num(kept) + " kept results";
        $("s-queued").textContent = num(depth);
        $("s-running").textContent = num(running);
        $("s-rate").textContent = first ? "-" : num(rate);
        $("s-workers").textContent = num(st.connections.worker);
        $("s-clients").textContent = num(st.connections.client);
        $("s-funcs").textContent = num(st.functions.length);
        $("s-uptime").textContent = dur(st.uptime_seconds);
    }

    /* ---- the chart: a plain canvas, drawn again after every sample ---- */

    /*
     * The axis top: four equal steps of 1, 2 or 5 times a power of ten
     * (never under 1: counts are whole), so every tick label is a round
     * number the same distance from the next.
     */
    function niceMax(v) {
        const want = Math.max(v, 1) / 4;
        const p = Math.pow(10, Math.floor(Math.log10(want)));
        for (const m of [1, 2, 5, 10]) if (m * p >= want) return 4 * Math.max(1, m * p);
        return 40 * p;
    }

    function drawChart() {
        const c = $("chart");
        const dpr = window.devicePixelRatio || 1;
        const w = c.clientWidth || 960, h = c.clientHeight || 220;
        if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
            c.width = Math.round(w * dpr);
            c.height = Math.round(h * dpr);
        }
        const g = c.getContext("2d");
        g.setTransform(dpr, 0, 0, dpr, 0, 0);
        g.clearRect(0, 0, w, h);
        const css = getComputedStyle(document.documentElement);
        const L = 48, R = 48, T = 10, B = 22;
        const pw = w - L - R, ph = h - T - B;
        let maxRate = 0, maxDepth = 0;
        for (const s of samples) {
            maxRate = Math.max(maxRate, s.rate);
            maxDepth = Math.max(maxDepth, s.depth, s.running);
        }
        maxRate = niceMax(maxRate);
        maxDepth = niceMax(maxDepth);
        g.font = "11px system-ui, sans-serif";
        g.lineWidth = 1;
        g.strokeStyle = css.getPropertyValue("--line") || "#ddd";
        g.fillStyle = css.getPropertyValue("--muted") || "#777";
        for (let i = 0; i <= 4; i++) {
            const y = T + ph - (ph * i) / 4;
            g.beginPath();
            g.moveTo(L, y + 0.5);
            g.lineTo(L + pw, y + 0.5);
            g.stroke();
            g.textAlign = "right";
            g.fillText(num((maxRate * i) / 4), L - 6, y + 4);
            g.textAlign = "left";
            g.fillText(num((maxDepth * i) / 4), L + pw + 6, y + 4);
        }
        /* The window grows with the samples, from one minute to five. */
        const now = Date.now();
        const have = samples.length > 0 ? (now - samples[0].t) / 1000 : 0;
        const span = Math.min(KEEP, Math.max(60, Math.ceil(have / 30) * 30));
        const step = [10, 15, 30, 60].find((st) => span / st <= 6) || 60;
        g.textAlign = "center";
        for (let t = 0; t <= span; t += step) {
            const x = L + pw - (pw * t) / span;
            g.fillText(t === 0 ? "now" : t % 60 === 0 ? "-" + t / 60 + "m" : "-" + t + "s", x, h - 6);
        }
        const xOf = (t) => L + pw - (pw * (now - t)) / (span * 1000);
        function line(key, max, color) {
            g.strokeStyle = color;
            g.lineWidth = 2;
            g.beginPath();
            samples.forEach((s, i) => {
                const x = Math.max(L, xOf(s.t)), y = T + ph - (ph * s[key]) / max;
                if (i === 0) g.moveTo(x, y);
                else g.lineTo(x, y);
            });
            g.stroke();
        }
        if (samples.length > 0) {
            line("depth", maxDepth, css.getPropertyValue("--depth") || "#d9822b");
            line("running", maxDepth, css.getPropertyValue("--run") || "#2b9a5c");
            line("rate", maxRate, css.getPropertyValue("--rate") || "#2166c4");
        } else {
            g.textAlign = "center";
            g.fillText("collecting samples...", L + pw / 2, T + ph / 2);
        }
        c.dataset.samples = String(samples.length);
    }

    /* ---- the functions table ---- */

    function rowOf(f) {
        return {
            name: f.name, key: f.key === undefined ? null : f.key, high: f.queued.high, normal: f.queued.normal, low: f.queued.low,
            table: f.shared_waiting, scheduled: f.scheduled, running: f.running, workers: f.workers, dead: f.dead,
            submitted: f.submitted, completed: f.completed, failed: f.failed + f.exceptions,
            oldest: f.oldest_queued_seconds,
            flow: f.flow ? f.flow.settings + (f.flow.held !== "no" ? " (held: " + f.flow.held + ")" : "") : "",
            paused: !!(f.flow && f.flow.paused),
            settings: f.flow ? f.flow.settings : "",
        };
    }

    /* A number's cell: cls when given (a warning shows even on a 0), else faint for a 0. */
    /* A function's identity: its exact key (the name's bytes in hex), else its name as shown. */
    function idOf(f) {
        return f.key !== null ? "k" + f.key : "n" + f.name;
    }

    function cell(v, cls) {
        return '<td class="' + (cls || (v === 0 ? "zero" : "")) + '">' + num(v) + "</td>";
    }

    function cellsOf(f) {
        const q = f.high + f.normal + f.low;
        return '<td class="l name" title="' + esc(f.name) + '">' + esc(f.name) + "</td>" +
            cell(f.high) + cell(f.normal) + cell(f.low) +
            '<td class="shared-only' + (f.table === 0 ? " zero" : "") + '">' + num(f.table) + "</td>" +
            cell(f.scheduled) + cell(f.running) +
            cell(f.workers, q + f.table > 0 && f.workers === 0 ? "warn" : "") +
            cell(f.dead, f.dead > 0 ? "warn" : "") + cell(f.submitted) + cell(f.completed) +
            cell(f.failed, f.failed > 0 ? "warn" : "") +
            '<td class="' + (f.oldest === 0 ? "zero" : "") + '">' + (q > 0 ? dur(f.oldest) : "-") + "</td>" +
            '<td class="l' + (f.paused ? " warn" : "") + '">' + (f.flow ? esc(f.flow) : '<span class="muted">-</span>') + "</td>" +
            '<td class="admin-only">' + (admin && f.dead > 0 && f.key !== null
                ? '<button data-act="retry">retry</button> <button data-act="drop" class="danger">drop</button>'
                : "") + "</td>" +
            '<td class="admin-only">' + (admin && f.key !== null
                ? '<button data-act="limit">limit</button> ' +
                  (f.paused ? '<button data-act="resume">resume</button>' : '<button data-act="pause" class="danger">pause</button>')
                : "") + "</td>";
    }

    /*
     * The rows shown, in order, are rebuilt in one innerHTML only when that
     * order changes (sorting, filtering, a function made or dropped); else
     * only the rows whose cells changed are written, so a thousand quiet
     * functions cost string compares, not layout.
     */
    let shownOrder = null;
    const shown = new Map(); /* name -> {cells, tr} */

    function renderFuncs() {
        const t0 = performance.now();
        const needle = filter.toLowerCase();
        let rows = needle === "" ? funcs : funcs.filter((f) => f.name.toLowerCase().includes(needle));
        const key = sortKey, dir = sortAsc ? 1 : -1;
        rows = rows.slice().sort((a, b) => {
            const x = a[key], y = b[key];
            if (x < y) return -dir;
            if (x > y) return dir;
            return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
        });
        const cells = rows.map(cellsOf);
        const order = rows.map(idOf).join("\u0000");
        const tbody = document.querySelector("#funcs tbody");
        if (order !== shownOrder) {
            tbody.innerHTML = rows.map((f, i) => '<tr data-fn="' + esc(f.name) + '" data-key="' +
                esc(f.key === null ? "" : f.key) + '">' + cells[i] + "</tr>").join("");
            shown.clear();
            const trs = tbody.rows;
            for (let i = 0; i < rows.length; i++) shown.set(idOf(rows[i]), { cells: cells[i], tr: trs[i] });
            shownOrder = order;
        } else {
            for (let i = 0; i < rows.length; i++) {
                const e = shown.get(idOf(rows[i]));
                if (e.cells !== cells[i]) {
                    e.tr.innerHTML = cells[i];
                    e.cells = cells[i];
                }
            }
        }
        $("funcs-count").textContent = "(" + funcs.length + ")";
        $("funcs-note").textContent = needle === "" ? "" : rows.length + " match";
        for (const th of document.querySelectorAll("#funcs th[data-key]")) {
            th.classList.toggle("sorted", th.dataset.key === sortKey);
            th.classList.toggle("asc", th.dataset.key === sortKey && sortAsc);
        }
        window.dsjobDashboard.tableMs = performance.now() - t0;
    }

    /* ---- workers ---- */

    function renderWorkers(list) {
        const parts = [];
        for (const w of list.slice(0, MAX_WORKER_ROWS)) {
            const fns = w.functions.join(", ");
            parts.push("<tr><td class=\"l\">" + (w.id === null ? '<span class="muted">-</span>' : esc(w.id)) +
                '</td><td class="l">' + esc(w.ip) + " fd " + w.fd +
                '</td><td class="l fns" title="' + esc(fns) + '">' + esc(fns) +
                '</td><td class="l">' + (w.running.length ? esc(w.running.join(" ")) : '<span class="muted">-</span>') +
                "</td><td>" + (w.asleep ? "yes" : "no") + "</td></tr>");
        }
        const html = parts.join("");
        if (html !== lastWorkersHtml) {
            document.querySelector("#workers tbody").innerHTML = html;
            lastWorkersHtml = html;
        }
        $("workers-count").textContent = "(" + list.length +
            (list.length > MAX_WORKER_ROWS ? ", first " + MAX_WORKER_ROWS + " shown" : "") + ")";
    }

    /* ---- schedules ---- */

    let lastSchedulesHtml = "";

    function renderSchedules(list) {
        const none = '<span class="muted">-</span>';
        const parts = list.map((s) => "<tr><td class=\"l\">" + esc(s.name) +
            '</td><td class="l">' + esc(s.cron) + '</td><td class="l">' + esc(s.tz) +
            '</td><td class="l">' + esc(s.function) + '</td><td class="l">' + (s.paused ? "paused" : "active") +
            '</td><td class="l">' + (s.next_run === null ? none : esc(s.next_run)) +
            '</td><td class="l">' + (s.last_run === null ? none : esc(s.last_run)) +
            '</td><td class="l">' + esc(s.last_outcome) + "</td><td>" + num(s.fires) + "</td></tr>");
        const html = parts.join("");
        if (html !== lastSchedulesHtml) {
            document.querySelector("#schedules tbody").innerHTML = html;
            lastSchedulesHtml = html;
        }
        $("schedules-count").textContent = "(" + list.length + ")";
        $("schedules-box").hidden = list.length === 0;
    }

    /* ---- batches ---- */

    let lastBatchesHtml = "";

    /* A callback's cell: its function, and "fired" once its job was submitted. */
    function callbackCell(fn, fired) {
        if (fn === null) return '<span class="muted">-</span>';
        return esc(fn) + (fired ? ' <span class="muted">fired</span>' : "");
    }

    function renderBatches(list) {
        const parts = list.map((b) => '<tr><td class="l">' + esc(b.id) + "</td><td>" + num(b.total) +
            "</td><td>" + num(b.pending) + "</td><td>" + num(b.done) + "</td><td>" + num(b.failed) +
            "</td><td>" + num(b.dead) + '</td><td class="l">' + (b.closed ? "closed" : "open") +
            '</td><td class="l">' + callbackCell(b.on_complete, b.fired_complete) +
            '</td><td class="l">' + callbackCell(b.on_success, b.fired_success) + "</td></tr>");
        const html = parts.join("");
        if (html !== lastBatchesHtml) {
            document.querySelector("#batches tbody").innerHTML = html;
            lastBatchesHtml = html;
        }
        $("batches-count").textContent = "(" + list.length + ")";
        $("batches-box").hidden = list.length === 0;
    }

    /* ---- job lookup ---- */

    async function findJob(q, f) {
        if (f === "") {
            const r = await get("/api/job/" + encodeURIComponent(q));
            if (r.status !== 404) return r;
            return get("/api/job?unique=" + encodeURIComponent(q));
        }
        return get("/api/job?function=" + encodeURIComponent(f) + "&unique=" + encodeURIComponent(q));
    }

    function renderJob(r) {
        let html;
        if (r.status !== 200) {
            html = '<span class="err" id="job-error">' + esc(r.body.error || "HTTP " + r.status) + "</span>";
        } else {
            const j = r.body;
            const [n, d] = j.status;
            const pct = d > 0 ? Math.min(100, (100 * n) / d) : 0;
            const rows = [
                ["handle", '<span id="job-handle">' + esc(j.handle) + "</span>"],
                ["state", '<span class="state" id="job-state">' + esc(j.state) + "</span>" +
                    (j.outcome ? " (" + esc(j.outcome) + ")" : "")],
                ["progress", d > 0
                    ? '<span class="progress"><span id="job-bar"></span></span> <span id="job-progress">' +
                      n + " / " + d + "</span> (" + pct.toFixed(0) + "%)"
                    : '<span id="job-progress" class="muted">none reported</span>'],
                ["function", esc(j.function)],
                ["unique", j.unique === "" ? '<span class="muted">-</span>' : esc(j.unique)],
                ["priority", esc(j.priority) + (j.background ? ", background" : ", foreground")],
                ["attempts", j.attempts],
                ["worker", j.worker ? esc((j.worker.id || "-") + " " + j.worker.ip + " fd " + j.worker.fd) : "-"],
                ["payload", j.payload_size + " bytes"],
                ["waiting clients", j.waiters],
            ];
            if (j.error !== undefined) rows.push(["last error", esc(j.error)]);
            html = "<dl>" + rows.map(([k, v]) => "<dt>" + k + "</dt><dd>" + v + "</dd>").join("") + "</dl>";
            if (admin && j.state !== "dead" && j.state !== "done")
                html += '<p><button id="job-cancel" class="danger" data-handle="' + esc(j.handle) + '">cancel this job</button></p>';
            if (admin && j.state === "dead")
                html += '<p><button id="job-retry" data-handle="' + esc(j.handle) + '">retry</button> ' +
                    '<button id="job-drop" class="danger" data-handle="' + esc(j.handle) + '">drop</button></p>';
        }
        if (html !== lastJobHtml) {
            $("job").innerHTML = html;
            $("job").className = "";
            lastJobHtml = html;
        }
        /* Widths are set through the CSSOM: the CSP forbids style attributes. */
        const bar = $("job-bar");
        if (bar && r.status === 200 && r.body.status[1] > 0)
            bar.style.width = Math.min(100, (100 * r.body.status[0]) / r.body.status[1]) + "%";
    }

    /*
     * Once found, a job is followed by its handle (one request a second, not
     * a 404 and a retry by unique key); once gone, no longer polled.
     */
    async function refreshJob() {
        if (lookup === null) return;
        const mine = lookup;
        const r = await findJob(mine.q, mine.f);
        if (lookup !== mine) return;
        renderJob(r);
        if (r.status === 200) lookup = { q: r.body.handle, f: "" };
        else if (r.status === 404) lookup = null;
    }

    /* ---- the refresh ---- */

    async function refresh() {
        if (busy || $("pause").checked) return;
        busy = true;
        const t0 = performance.now();
        try {
            const [st, wk, sc, ba] = await Promise.all([get("/api/status"), get("/api/workers"),
                get("/api/schedules"), get("/api/batches"), refreshJob()]);
            if (st.status === 200) {
                summarize(st.body);
                funcs = st.body.functions.map(rowOf);
                renderFuncs();
            }
            if (wk.status === 200) renderWorkers(wk.body.workers);
            if (sc.status === 200) renderSchedules(sc.body.schedules);
            if (ba.status === 200) renderBatches(ba.body.batches);
            drawChart();
            $("updated").textContent = "updated " + new Date().toLocaleTimeString();
            window.dsjobDashboard.refreshes++;
            window.dsjobDashboard.refreshMs = performance.now() - t0;
        } catch (e) {
            const h = $("health");
            h.textContent = "no answer from the server";
            h.className = "badge bad";
        } finally {
            busy = false;
        }
    }

    async function act(url, what) {
        if (!window.confirm(what + "?")) return;
        const r = await post(url);
        toast(r.status === 200 ? what + ": " + JSON.stringify(r.body) : what + " refused: " + (r.body.error || r.status));
        lastJobHtml = "";
        refresh();
    }

    /*
     * The limit button: asks for "concurrency N", "rate N/s" (/m, /h) and
     * "burst N", each "off" to clear it, or "off" alone to clear all three,
     * and POSTs them as /api/func/KEY/limit's query. Other settings stay.
     */
    async function limit(key, fn) {
        const f = funcs.find((x) => x.key === key);
        const now = ((f && f.settings) || "").match(/(^| )(concurrency|rate|burst) \S+/g) || [];
        const text = window.prompt("Limit " + fn + ': "concurrency N", "rate N/s" (or /m, /h), ' +
            '"burst N"; "rate off" clears one, "off" all', now.map((w) => w.trim()).join(" "));
        if (text === null) return;
        const words = text.trim().split(/\s+/).filter((w) => w !== "");
        const q = new URLSearchParams();
        if (words.length === 1 && words[0] === "off") {
            for (const k of ["concurrency", "rate", "burst"]) q.set(k, "off");
        } else {
            for (let i = 0; i < words.length; i += 2) {
                if (!["concurrency", "rate", "burst"].includes(words[i]) || words[i + 1] === undefined) {
                    toast("limit: not understood: " + text);
                    return;
                }
                q.set(words[i], words[i + 1]);
            }
        }
        if ([...q.keys()].length === 0) return;
        /* The slash of a rate stays readable: the server decodes either. */
        const r = await post("/api/func/" + key.replace(/../g, "%$&") + "/limit?" + q.toString().replace(/%2F/g, "/"));
        toast(r.status === 200 ? "limit " + fn + ": " + (r.body.settings || "none") : "limit refused: " + (r.body.error || r.status));
        refresh();
    }

    /* ---- events ---- */

    document.querySelector("#funcs thead").addEventListener("click", (e) => {
        const th = e.target.closest("th[data-key]");
        if (!th) return;
        if (sortKey === th.dataset.key) sortAsc = !sortAsc;
        else {
            sortKey = th.dataset.key;
            sortAsc = sortKey === "name";
        }
        renderFuncs();
    });
    $("filter").addEventListener("input", (e) => {
        filter = e.target.value;
        renderFuncs();
    });
    document.querySelector("#funcs tbody").addEventListener("click", (e) => {
        const b = e.target.closest("button[data-act]");
        if (!b) return;
        /* By the exact key: each byte of the name percent-encoded, so the server gets those bytes. */
        const tr = b.closest("tr");
        const fn = tr.dataset.fn, key = tr.dataset.key;
        const a = b.dataset.act;
        if (!key) return;
        if (a === "limit") {
            limit(key, fn);
            return;
        }
        if (a === "pause" || a === "resume") {
            act("/api/func/" + key.replace(/../g, "%$&") + "/" + a, a + " " + fn);
            return;
        }
        act("/api/dead/" + key.replace(/../g, "%$&") + "/" + a, a + " the dead jobs of " + fn);
    });
    $("job").addEventListener("click", (e) => {
        const b = e.target.closest("button[data-handle]");
        if (!b) return;
        const h = encodeURIComponent(b.dataset.handle);
        if (b.id === "job-cancel") act("/api/job/" + h + "/cancel", "cancel " + b.dataset.handle);
        else if (b.id === "job-retry") act("/api/dead/" + h + "/retry", "retry " + b.dataset.handle);
        else if (b.id === "job-drop") act("/api/dead/" + h + "/drop", "drop " + b.dataset.handle);
    });
    $("lookup").addEventListener("submit", (e) => {
        e.preventDefault();
        const q = $("q").value.trim(), f = $("qf").value.trim();
        if (q === "") return;
        lookup = { q, f };
        lastJobHtml = "";
        $("job").textContent = "looking up...";
        refreshJob();
    });
    $("q-clear").addEventListener("click", () => {
        lookup = null;
        lastJobHtml = "";
        $("q").value = $("qf").value = "";
        $("job").className = "muted";
        $("job").textContent = "Type a job handle (H:host:N) or a unique key.";
    });
    window.addEventListener("resize", drawChart);

    refresh();
    setInterval(refresh, 1000);
})();
