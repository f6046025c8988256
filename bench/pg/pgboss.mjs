// bench/pg/pgboss.mjs: durable submit and drain through pg-boss, for
// bench/pg/run. Prints one JSON line per phase:
//   submit        N jobs by boss.insert() of --batch jobs a call, --producers at once
//   drain         --workers loops of boss.fetch(queue, {batchSize: F}) and
//                 boss.complete(queue, ids) until the queue is empty
//   submit-one    N1 jobs by boss.send(), one a call, --producers at once
//   drain-one     --workers loops of fetch with batchSize 1 and complete
// The workers do nothing with a job. fetch/complete rather than boss.work():
// work() sleeps pollingIntervalSeconds (at least 0.5 s) after every fetch,
// which would measure the sleep. Statement counts come from
// pg_stat_statements (reset before each phase), in the --db database only.
import PgBoss from 'pg-boss';
import { parseArgs, payload, version, statsClient, phase, parallel, chunker } from './common.mjs';

const QUEUE = 'bench';

async function main () {
  const o = parseArgs(process.argv, 'pgboss.mjs');
  const data = payload(o.size);
  const boss = new PgBoss({ connectionString: o.db, max: o.workers + o.producers + 2 });
  boss.on('error', e => process.stderr.write(`pgboss.mjs: pg-boss error: ${e.message}\n`));
  await boss.start();
  await boss.createQueue(QUEUE);
  const stats = await statsClient(o.db);
  const base = { system: 'pg-boss', version: version('pg-boss'), workers: o.workers, producers: o.producers, payload: o.size };
  const deadline = () => Date.now() + o.maxSecs * 1000;

  const left = () => stats.scalar(
    `SELECT count(*) FROM pgboss.job WHERE name = $1 AND state < 'completed' /* bench */`, [QUEUE]);

  async function submit (n, batch) {
    const next = chunker(n);
    const end = deadline();
    let done = 0;
    await parallel(o.producers, async () => {
      for (let k; (k = next(batch)) > 0;) {
        if (Date.now() > end) throw new Error('submit: --max-secs reached');
        if (batch === 1) {
          await boss.send(QUEUE, data);
        } else {
          await boss.insert(Array.from({ length: k }, () => ({ name: QUEUE, data })));
        }
        done += k;
      }
    });
    return done;
  }

  async function drain (expected, batchSize) {
    const end = deadline();
    let done = 0;
    await parallel(o.workers, async () => {
      for (;;) {
        if (Date.now() > end) throw new Error('drain: --max-secs reached');
        const jobs = await boss.fetch(QUEUE, { batchSize });
        if (jobs.length === 0) break; // every job was submitted before: none left
        done += jobs.length;
        await boss.complete(QUEUE, jobs.map(j => j.id));
      }
    });
    const held = await left();
    if (done !== expected || held !== 0) {
      throw new Error(`drain: ${done} of ${expected} jobs ran, ${held} not completed`);
    }
    return done;
  }

  await phase(stats, base, 'submit', `insert x${o.batch}`, () => submit(o.jobs, o.batch));
  await phase(stats, base, 'drain', `fetch x${o.fetchBatch} + complete`, () => drain(o.jobs, o.fetchBatch));
  if (o.one > 0) {
    await phase(stats, base, 'submit-one', 'send', () => submit(o.one, 1));
    await phase(stats, base, 'drain-one', 'fetch x1 + complete', () => drain(o.one, 1));
  }
  await stats.end();
  await boss.stop({ graceful: false, wait: true, timeout: 5000 });
}

main().catch(e => {
  process.stderr.write(`pgboss.mjs: ${e.stack || e}\n`);
  process.exit(1);
});
