// tests/e2e/dashboard.mjs URL HANDLE SCREENSHOT: drives Debian's chromium
// (headless, through playwright-core, no browser download) against the
// dashboard that tests/e2e/run.sh started, with its jobs flowing. Checks:
// the functions table lists what run.sh submitted, with the backlog's exact
// counts by priority, and counts that grow; the chart has drawn samples
// (its canvas holds lines in the throughput colour); looking up HANDLE
// shows that job's state and progress, and so does its unique key; the
// admin buttons are there (--http-admin from loopback); no request left
// 127.0.0.1 and the page logged no error (a CSP violation would be one).
// The workers cell of a function with work and no worker is red, a 0 elsewhere
// faint; "jobs held" says how many are live, dead and kept; the chart's axis
// has four equal round steps; two functions that once read alike (dd<0xff>
// and dd\\xff, made dead by a worker here) show apart, and the drop button
// of the raw-byte one drops its dead job and not the other's. A function's
// --limit shows in its row, its pause and resume buttons pause and resume
// it on the server, its limit button sets and clears a concurrency and a
// rate limit, and the --schedule run.sh gave is listed and fires.
// Saves a full-page screenshot. Then 1,000 more functions (admin "create
// function" on GEARMAN-PORT): the table shows them all, the filter still
// works, and the time one refresh and one table build take is printed.
// Prints one line per check; exit 1 if any failed.
import net from "node:net";
import { chromium } from "playwright-core";

const [url, handle, shot, gport] = process.argv.slice(2);
if (!url || !handle || !shot || !gport) {
    console.error("usage: dashboard.mjs URL HANDLE SCREENSHOT GEARMAN-PORT");
    process.exit(2);
}

/* Sends admin lines to 127.0.0.1:port; resolves once each has had its OK. */
function adminLines(port, lines) {
    return new Promise((resolve, reject) => {
        const s = net.connect(port, "127.0.0.1", () => s.write(lines.map((l) => l + "\n").join("")));
        let buf = "", oks = 0;
        s.setTimeout(20000, () => { s.destroy(); reject(new Error("admin: timeout")); });
        s.on("data", (d) => {
            buf += d;
            const parts = buf.split("\n");
            buf = parts.pop();
            oks += parts.filter((p) => p.startsWith("OK")).length;
            if (oks >= lines.length) { s.end(); resolve(oks); }
        });
        s.on("error", reject);
    });
}

/* One Gearman packet: \0REQ, type, length, the arguments joined by NULs. */
function packet(type, args) {
    const body = Buffer.concat(args.flatMap((a, i) => (i ? [Buffer.from([0]), a] : [a])));
    const head = Buffer.alloc(12);
    Buffer.from("\0REQ", "latin1").copy(head);
    head.writeUInt32BE(type, 4);
    head.writeUInt32BE(body.length, 8);
    return Buffer.concat([head, body]);
}

/*
 * Makes one dead job of each function (bytes): a background submit, then a
 * worker that grabs it and sends WORK_FAIL (the server runs --max-dead).
 */
function deadJobs(port, names) {
    return new Promise((resolve, reject) => {
        const s = net.connect(port, "127.0.0.1");
        let buf = Buffer.alloc(0), created = 0, failed = 0;
        s.setTimeout(20000, () => { s.destroy(); reject(new Error("deadJobs: timeout")); });
        s.on("connect", () => {
            for (const n of names) s.write(packet(18, [n, Buffer.from(""), Buffer.from("x")]));
        });
        s.on("data", (d) => {
            buf = Buffer.concat([buf, d]);
            while (buf.length >= 12 && buf.length >= 12 + buf.readUInt32BE(8)) {
                const type = buf.readUInt32BE(4), len = buf.readUInt32BE(8);
                const body = buf.subarray(12, 12 + len);
                buf = buf.subarray(12 + len);
                if (type === 8 && ++created === names.length) {
                    for (const n of names) s.write(packet(1, [n])); /* CAN_DO */
                    s.write(packet(9, [])); /* GRAB_JOB */
                } else if (type === 11) { /* JOB_ASSIGN: handle, function, data */
                    s.write(packet(14, [body.subarray(0, body.indexOf(0))])); /* WORK_FAIL */
                    if (++failed === names.length) { s.end(); resolve(failed); }
                    else s.write(packet(9, []));
                } else if (type === 10) {
                    s.write(packet(9, [])); /* NO_JOB: not there yet, ask again */
                } else if (type === 19) {
                    reject(new Error("deadJobs: ERROR " + body.toString("latin1")));
                }
            }
        });
        s.on("error", reject);
    });
}

let failed = false;
const errors = [];
function check(cond, what) {
    console.log((cond ? "ok - " : "not ok - ") + what);
    if (!cond) failed = true;
    return cond;
}

const origin = new URL(url).origin;
const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox"],
    timeout: 30000,
});
try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const outside = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("request", (r) => { if (!r.url().startsWith(origin)) outside.push(r.url()); });
    page.setDefaultTimeout(20000);

    const resp = await page.goto(url);
    check(resp.status() === 200, "GET / answers 200");
    check((resp.headers()["content-security-policy"] || "").startsWith("default-src 'self'"),
        "with a Content-Security-Policy of default-src 'self'");

    // Five samples: five refreshes a second apart, jobs flowing meanwhile.
    await page.waitForFunction(() => window.dsjobDashboard && window.dsjobDashboard.samples() >= 5,
        null, { timeout: 30000 });
    check(true, "the page took five samples");

    // The functions table.
    const rows = await page.$$eval("#funcs tbody tr", (trs) => trs.map((tr) => {
        const td = [...tr.querySelectorAll("td")].map((c) => c.textContent.trim());
        // td[4]: jobs in the shared PostgreSQL table, a column shown with that store only.
        return { name: tr.dataset.fn, high: td[1], normal: td[2], low: td[3], running: td[6],
                 workers: td[7], dead: td[8], submitted: td[9], completed: td[10] };
    }));
    const by = Object.fromEntries(rows.map((r) => [r.name, r]));
    for (const f of ["resize", "thumbnail", "report", "flaky", "reverse", "backlog"])
        check(by[f] !== undefined, `the functions table lists ${f}`);
    check(!(await page.locator('#funcs th[data-key="table"]').isVisible()),
        "without the PostgreSQL store, no 'in table' column");
    const b = by.backlog || {};
    check(b.high === "3" && b.normal === "5" && b.low === "2" && b.workers === "0",
        `backlog: 3 high, 5 normal, 2 low queued, no worker (got ${b.high}/${b.normal}/${b.low}, ${b.workers})`);
    check(by.flaky && by.flaky.dead === "4", `flaky: its 4 failed jobs are dead (got ${by.flaky && by.flaky.dead})`);
    check(by.resize && Number(by.resize.completed) > 0 && Number(by.resize.workers) >= 2,
        `resize: jobs completed (${by.resize && by.resize.completed}) by its workers (${by.resize && by.resize.workers})`);
    check(by.report && by.report.running === "1", "report: its one job is running");
    check(await page.locator('#funcs tr[data-fn="flaky"] button[data-act="retry"]').count() === 1,
        "with --http-admin, a dead function has a retry button");
    check(await page.locator('#funcs tr[data-fn="backlog"] td:nth-child(8).warn').count() === 1,
        "backlog: work and nobody to do it, its workers cell (0) is red");
    check(await page.locator('#funcs tr[data-fn="resize"] td:nth-child(9).zero').count() === 1,
        "resize: its dead cell (0) is faint, not red");
    const jobsNote = await page.textContent("#s-jobs-note");
    check(/^\d+ live, \d+ dead, \d+ kept results$/.test(jobsNote),
        `"jobs held" says what it holds: ${jobsNote}`);
    const ticks = await page.evaluate(() => [0, 3, 7, 12, 100, 2500].map((v) => window.dsjobDashboard.niceMax(v)));
    check(ticks.every((m) => Number.isInteger(m / 4) && /^[125]0*$/.test(String(m / 4))),
        `the chart's axis tops are four steps of 1, 2 or 5 x 10^n: ${ticks}`);

    // Two functions that once looked alike: the raw byte 0xff and the text \xff.
    const raw = Buffer.from([0x64, 0x64, 0xff]), text = Buffer.from("dd\\xff", "latin1");
    await deadJobs(Number(gport), [raw, text]);
    await page.waitForFunction(() => document.querySelectorAll('#funcs tr[data-key="6464ff"] button[data-act="drop"]').length === 1 &&
        document.querySelectorAll('#funcs tr[data-key="64645c786666"] button[data-act="drop"]').length === 1,
        null, { timeout: 15000 });
    const alike = await page.$$eval('#funcs tr[data-key="6464ff"], #funcs tr[data-key="64645c786666"]',
        (trs) => trs.map((tr) => tr.querySelector("td").textContent));
    check(alike.length === 2 && alike[0] !== alike[1], `dd<0xff> and dd\\xff read differently: ${alike.join(" / ")}`);
    page.once("dialog", (d) => d.accept());
    await page.click('#funcs tr[data-key="6464ff"] button[data-act="drop"]');
    const after = await page.waitForFunction(async () => {
        const st = await (await fetch("/api/status")).json();
        const f = (k) => st.functions.find((x) => x.key === k);
        return f("6464ff").dead === 0 ? [f("6464ff").dead, f("64645c786666").dead] : null;
    }, null, { timeout: 15000 });
    const [rawDead, textDead] = await after.jsonValue();
    check(rawDead === 0 && textDead === 1,
        `its drop button dropped the raw-byte function's dead job, not the other's (${rawDead}, ${textDead})`);

    // Flow control: thumbnail's --limit shows in its row, and backlog's pause
    // button pauses it (the server says so), then resume resumes it.
    const thumbRow = await page.textContent('#funcs tr[data-fn="thumbnail"]');
    check(/concurrency 1/.test(thumbRow), "thumbnail's row shows its --limit (concurrency 1)");
    const flowPaused = (want) => page.waitForFunction(async (w) => {
        const st = await (await fetch("/api/status")).json();
        const f = st.functions.find((x) => x.name === "backlog");
        return f !== undefined && !!(f.flow && f.flow.paused) === w;
    }, want, { timeout: 15000 });
    page.once("dialog", (d) => d.accept());
    await page.click('#funcs tr[data-fn="backlog"] button[data-act="pause"]');
    await flowPaused(true);
    check(true, "backlog's pause button paused it (/api/status says paused)");
    await page.waitForFunction(() =>
        document.querySelectorAll('#funcs tr[data-fn="backlog"] button[data-act="resume"]').length === 1,
        null, { timeout: 15000 });
    check(true, "and its row offers resume");
    page.once("dialog", (d) => d.accept());
    await page.click('#funcs tr[data-fn="backlog"] button[data-act="resume"]');
    await flowPaused(false);
    check(true, "its resume button resumed it");

    // Its limit button sets a concurrency and a rate limit (the prompt's
    // answer), the row shows them, and "off" clears them again.
    const flowSettings = (want) => page.waitForFunction(async (w) => {
        const st = await (await fetch("/api/status")).json();
        const f = st.functions.find((x) => x.name === "backlog");
        return f !== undefined && (f.flow ? f.flow.settings : "") === w;
    }, want, { timeout: 15000 });
    // One handler for the three prompts, answering the step's text (a
    // prompt shown twice gets the same answer, which changes nothing).
    let answer = "", offered = "";
    const onPrompt = (d) => {
        if (d.type() !== "prompt") return d.accept().catch(() => {});
        offered = d.defaultValue();
        return d.accept(answer).catch(() => {});
    };
    page.on("dialog", onPrompt);
    answer = "concurrency 3 rate 10/s";
    await page.click('#funcs tr[data-fn="backlog"] button[data-act="limit"]');
    await flowSettings("concurrency 3 rate 10/s");
    check(true, "backlog's limit button set concurrency 3 rate 10/s (/api/status says so)");
    await page.waitForFunction(() =>
        /concurrency 3 rate 10\/s/.test(document.querySelector('#funcs tr[data-fn="backlog"]').textContent),
        null, { timeout: 15000 });
    check(true, "and its row shows them");
    answer = "rate off";
    await page.click('#funcs tr[data-fn="backlog"] button[data-act="limit"]');
    await flowSettings("concurrency 3");
    check(offered === "concurrency 3 rate 10/s",
        `"rate off" cleared the rate and kept the concurrency (the prompt offered '${offered}')`);
    answer = "off";
    await page.click('#funcs tr[data-fn="backlog"] button[data-act="limit"]');
    await flowSettings("");
    check(true, '"off" cleared its limits');
    page.off("dialog", onPrompt);

    // Schedules: --schedule's e2e-tick is listed with its next run, and fires.
    await page.waitForFunction(() => {
        const box = document.querySelector("#schedules-box"), tr = document.querySelector("#schedules tbody tr");
        return box && !box.hidden && tr && Number(tr.lastElementChild.textContent) > 0;
    }, null, { timeout: 15000 });
    const srow = await page.$$eval("#schedules tbody tr:first-child td", (tds) => tds.map((t) => t.textContent));
    check(srow[0] === "e2e-tick" && srow[3] === "reverse" && srow[4] === "active" && /\d/.test(srow[5]),
        `the schedules table lists e2e-tick, its function, its next run and fires (${srow.join(" | ")})`);

    // The filter box.
    await page.fill("#filter", "thumb");
    const filtered = await page.$$eval("#funcs tbody tr", (trs) => trs.map((tr) => tr.dataset.fn));
    check(filtered.length === 1 && filtered[0] === "thumbnail", `the filter keeps only thumbnail (${filtered})`);
    await page.fill("#filter", "");

    // The counts grow while jobs flow.
    const before = Number(by.resize ? by.resize.submitted : 0);
    await page.waitForFunction((n) => {
        const tr = document.querySelector('#funcs tr[data-fn="resize"]');
        return tr && Number(tr.querySelectorAll("td")[9].textContent) > n;
    }, before, { timeout: 15000 });
    check(true, `resize's submitted count grows past ${before}`);

    // The chart: samples drawn, pixels in the throughput colour.
    const chart = await page.$eval("#chart", (c) => {
        const g = c.getContext("2d");
        const d = g.getImageData(0, 0, c.width, c.height).data;
        let ink = 0, blue = 0;
        for (let i = 0; i < d.length; i += 4) {
            if (d[i + 3] > 0) ink++;
            if (d[i + 3] > 200 && d[i] < 80 && d[i + 1] > 80 && d[i + 1] < 130 && d[i + 2] > 170) blue++;
        }
        return { samples: Number(c.dataset.samples), ink, blue };
    });
    check(chart.samples >= 5, `the chart holds ${chart.samples} samples`);
    check(chart.blue > 50, `the throughput line is drawn (${chart.blue} pixels of it, ${chart.ink} inked)`);
    // The rate is over the last refresh: one that came right after another
    // (a button's) may have seen no job end. Wait for one that did.
    await page.waitForFunction(() => Number(document.querySelector("#s-rate").textContent) > 0,
        null, { timeout: 15000 }).catch(() => {});
    const rate = Number(await page.textContent("#s-rate"));
    check(rate > 0, `the summary shows jobs ended per second: ${rate}`);

    // The workers table.
    const workers = await page.$$eval("#workers tbody tr", (trs) => trs.map((tr) => tr.textContent));
    check(["resize-1", "thumb-1", "report-1", "flaky-1"].every((id) => workers.some((w) => w.includes(id))),
        `the workers table shows the workers' ids (${workers.length} rows)`);

    // The job lookup: by unique key first, then by handle (left shown for the screenshot).
    await page.fill("#q", "report-e2e");
    await page.click("#lookup button[type=submit]");
    await page.waitForSelector("#job-handle");
    check(await page.textContent("#job-handle") === handle, `the unique key report-e2e finds ${handle}`);
    await page.fill("#q", handle);
    await page.click("#lookup button[type=submit]");
    await page.waitForFunction((h) => {
        const e = document.getElementById("job-handle");
        return e && e.textContent === h;
    }, handle);
    const state = await page.textContent("#job-state");
    check(state === "running", `the handle ${handle} shows its state: ${state}`);
    await page.waitForFunction(() => /^\d+ \/ 90$/.test((document.getElementById("job-progress") || {}).textContent || ""),
        null, { timeout: 15000 });
    const progress = await page.textContent("#job-progress");
    check(true, `and its progress: ${progress}`);
    check(await page.locator("#job-cancel").count() === 1, "with a cancel button (--http-admin)");

    // Twenty samples, so the screenshot's chart has a shape.
    await page.waitForFunction(() => window.dsjobDashboard.samples() >= 20, null, { timeout: 30000 });
    await page.screenshot({ path: shot, fullPage: true });
    check(true, `screenshot saved to ${shot}`);

    // 1,000 functions more: every row shown, the filter still quick.
    const names = Array.from({ length: 1000 }, (_, i) => `create function bulk_${String(i).padStart(4, "0")}`);
    await adminLines(Number(gport), names);
    await page.waitForFunction(() => document.querySelectorAll("#funcs tbody tr").length >= 1006,
        null, { timeout: 15000 });
    const n0 = await page.evaluate(() => window.dsjobDashboard.refreshes);
    await page.waitForFunction((n) => window.dsjobDashboard.refreshes >= n + 3, n0, { timeout: 15000 });
    const cost = await page.evaluate(() => ({ table: window.dsjobDashboard.tableMs, refresh: window.dsjobDashboard.refreshMs }));
    check(true, `with 1,006 functions the table shows them all; one table build ${cost.table.toFixed(1)} ms, one refresh (fetch, parse, render, chart) ${cost.refresh.toFixed(1)} ms`);
    check(cost.refresh < 900, "a refresh fits in its second");
    await page.fill("#filter", "bulk_09");
    const few = await page.$$eval("#funcs tbody tr", (trs) => trs.length);
    check(few === 100, `the filter bulk_09 leaves 100 rows (${few})`);

    check(outside.length === 0, `no request left ${origin}` + (outside.length ? `: ${outside}` : ""));
    // The lookup by unique key tries it as a handle first: one 404 is expected.
    const real = errors.filter((e) => !/status of 404/.test(e));
    check(real.length === 0, "the page logged no error" + (real.length ? `: ${real.join(" | ")}` : ""));
} catch (e) {
    check(false, `the browser run: ${e.message}`);
    if (errors.length) console.log("# the page's errors: " + errors.join(" | "));
} finally {
    await browser.close();
}
process.exit(failed ? 1 : 0);
