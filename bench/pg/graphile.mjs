// bench/pg/graphile.mjs: durable submit and drain through graphile-worker,
// for bench/pg/run. Prints one JSON line per phase:
//   submit        N jobs by workerUtils.addJobs() of --batch jobs a call,
//                 --producers at once
//   drain         run() with concurrency --workers and the documented
//                 batching on (preset.worker.localQueue.size = F: the pool
//                 locks F jobs a fetch; completeJobBatchDelay = 0: the
//                 completions of a tick share one statement)
//   submit-one    N1 jobs by workerUtils.addJob(), one a call, --producers at once
//   drain-one     run() with concurrency --workers and the defaults (each
//                 worker fetches and completes one job a statement)
// The task does nothing. A drain ends when every job has run and the jobs
// table is empty (graphile-worker deletes a job when it completes).
// Statement counts come from pg_stat_statements (reset before each phase),
// in the --db database only; graphile-worker's SQL functions (add_jobs)
// run nested statements, counted in pg_statements_all.
import { run, makeWorkerUtils, Logger } from 'graphile-worker';
import { parseArgs, payload, version, statsClient, phase, parallel, chunker, sleep } from './common.mjs';

const TASK = 'bench';
const quiet = new Logger(() => () => {});

async function main () {
  const o = parseArgs(process.argv, 'graphile.mjs');
  const data = payload(o.size);
  const utils = await makeWorkerUtils({ connectionString: o.db, maxPoolSize: o.producers + 2, logger: quiet });
  await utils.migrate();
  const stats = await statsClient(o.db);
  const base = { system: 'graphile-worker', version: version('graphile-worker'), workers: o.workers, producers: o.producers, payload: o.size };

  const left = () => stats.scalar('SELECT count(*) FROM graphile_worker._private_jobs /* bench */');

  async function submit (n, batch) {
    const next = chunker(n);
    const end = Date.now() + o.maxSecs * 1000;
    let done = 0;
    await parallel(o.producers, async () => {
      for (let k; (k = next(batch)) > 0;) {
        if (Date.now() > end) throw new Error('submit: --max-secs reached');
        if (batch === 1) {
          await utils.addJob(TASK, data);
        } else {
          await utils.addJobs(Array.from({ length: k }, () => ({ identifier: TASK, payload: data })));
        }
        done += k;
      }
    });
    return done;
  }

  async function drain (expected, batched) {
    let done = 0;
    const preset = batched
      ? { worker: { localQueue: { size: o.fetchBatch }, completeJobBatchDelay: 0 } }
      : { worker: {} };
    const runner = await run({
      connectionString: o.db,
      concurrency: o.workers,
      maxPoolSize: o.workers + 2,
      noHandleSignals: true,
      logger: quiet,
      preset,
      taskList: { [TASK]: async () => { done++; } }
    });
    const end = Date.now() + o.maxSecs * 1000;
    let held = -1;
    for (;;) {
      if (done >= expected && (held = await left()) === 0) break;
      if (Date.now() > end) break;
      await sleep(done >= expected ? 5 : 20);
    }
    await runner.stop();
    if (done !== expected || held !== 0) {
      throw new Error(`drain: ${done} of ${expected} jobs ran, ${held} still in the table`);
    }
    return done;
  }

  await phase(stats, base, 'submit', `addJobs x${o.batch}`, () => submit(o.jobs, o.batch));
  await phase(stats, base, 'drain', `run localQueue=${o.fetchBatch} batchDelay=0`, () => drain(o.jobs, true));
  if (o.one > 0) {
    await phase(stats, base, 'submit-one', 'addJob', () => submit(o.one, 1));
    await phase(stats, base, 'drain-one', 'run, defaults', () => drain(o.one, false));
  }
  await stats.end();
  await utils.release();
}

main().catch(e => {
  process.stderr.write(`graphile.mjs: ${e.stack || e}\n`);
  process.exit(1);
});
