// tests/e2e/pg_batches.mjs URL ID TOTAL: drives Debian's chromium
// (headless, through playwright-core) against the dashboard of a dsjobd on
// the postgres store (tests/integ/t_pg_workflow2.sh started it) and waits
// until its Batches table lists batch ID, from the database, with TOTAL
// members and "closed". Prints one line per check; exit 1 if one failed.
import { chromium } from "playwright-core";

const [url, id, total] = process.argv.slice(2);
if (!url || !id || !total) {
    console.error("usage: pg_batches.mjs URL ID TOTAL");
    process.exit(2);
}
const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox"],
    timeout: 60000,
});
let failed = 0;
try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(url);
    /* The page refreshes once a second: bounded by a long wait, not a sleep. */
    const row = await page.waitForFunction((want) => {
        for (const tr of document.querySelectorAll("#batches tbody tr")) {
            const cells = [...tr.querySelectorAll("td")].map((td) => td.textContent.trim());
            if (cells[0] === want) return cells;
        }
        return null;
    }, id, { timeout: 120000, polling: 200 }).then((h) => h.jsonValue());
    const shown = !(await page.$eval("#batches-box", (e) => e.hidden));
    const ok = row[1] === total && row[6] === "closed" && shown;
    console.log((ok ? "ok" : "not ok") + " - the dashboard lists batch " + id + ": " + row.join(" | "));
    if (!ok) failed++;
    if (errors.length > 0) {
        console.log("not ok - the page logged errors: " + errors.join("; "));
        failed++;
    } else {
        console.log("ok - the page logged no error");
    }
} catch (e) {
    console.log("not ok - " + e);
    failed++;
} finally {
    await browser.close();
}
process.exit(failed ? 1 : 0);
