// bench/pg/common.mjs: what pgboss.mjs and graphile.mjs share: options,
// the payload, the statement counter (pg_stat_statements, on a connection
// of its own) and the JSON result lines.
import pg from 'pg';
import { readFileSync } from 'node:fs';

export function usage (name, extra) {
  return `usage: node ${name} --db URL [--jobs N] [--quick] [--workers W] [--producers P]
         [--batch B] [--fetch-batch F] [--one N1] [--size BYTES] [--max-secs S]
  --db URL          postgres://user@127.0.0.1:PORT/DB (the database must have
                    the pg_stat_statements extension; the server must load it)
  --jobs N          jobs per batched submit/drain (default 20000; --quick 2000)
  --workers W       concurrent workers in a drain (default 8)
  --producers P     concurrent submitters (default 3)
  --batch B         jobs per batched submit call (default 500)
  --fetch-batch F   jobs a worker fetches at once in the batched drain (default 100)
  --one N1          jobs submitted and drained one by one (default N/10; 0: skip)
  --size BYTES      payload bytes (default 100)
  --max-secs S      a phase gives up after S seconds (default 300)
${extra}`;
}

export function parseArgs (argv, name, extra = '') {
  const o = {
    db: process.env.PG_URL, jobs: 20000, workers: 8, producers: 3, batch: 500,
    fetchBatch: 100, one: -1, size: 100, maxSecs: 300, quick: false, flags: {}
  };
  let jobsSet = false;
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    const n = () => {
      const s = v(); const x = Number(s);
      if (!Number.isFinite(x) || x < 0) throw new Error(`bad value for ${a}: ${s}`);
      return x;
    };
    switch (a) {
      case '--db': o.db = v(); break;
      case '--jobs': o.jobs = n(); jobsSet = true; break;
      case '--quick': o.quick = true; break;
      case '--workers': o.workers = n(); break;
      case '--producers': o.producers = n(); break;
      case '--batch': o.batch = n(); break;
      case '--fetch-batch': o.fetchBatch = n(); break;
      case '--one': o.one = n(); break;
      case '--size': o.size = n(); break;
      case '--max-secs': o.maxSecs = n(); break;
      case '-h': case '--help': process.stdout.write(usage(name, extra)); process.exit(0); break;
      default:
        if (a.startsWith('--')) { o.flags[a.slice(2)] = true; break; }
        throw new Error(`unknown argument ${a}`);
    }
  }
  if (o.quick && !jobsSet) o.jobs = 2000;
  if (o.one < 0) o.one = Math.floor(o.jobs / 10);
  if (!o.db) throw new Error('--db URL (or PG_URL) is required');
  return o;
}

// The fixed payload: `size` bytes of letters, in the library's JSON payload.
export function payload (size) {
  let s = '';
  for (let i = 0; i < size; i++) s += String.fromCharCode(97 + (i % 26));
  return { p: s };
}

export function version (pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}

export const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// A connection of our own for pg_stat_statements and the end-of-drain
// checks; its queries say /* bench */ and are not counted.
export async function statsClient (db) {
  const c = new pg.Client({ connectionString: db });
  await c.connect();
  return {
    c,
    async reset () {
      await c.query('SELECT pg_stat_statements_reset() /* bench */');
    },
    // [statements the clients sent, every statement counted] in this
    // database since the reset. The first leaves out nested statements
    // (PL/pgSQL) and foreign-key checks (RI trigger queries, "... FOR KEY
    // SHARE OF x"), which pg_stat_statements counts as top-level.
    async count () {
      const r = await c.query(`SELECT coalesce(sum(calls) FILTER (WHERE toplevel
            AND s.query NOT LIKE '%FOR KEY SHARE OF x'), 0)::bigint AS top,
          coalesce(sum(calls), 0)::bigint AS "all"
        FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = current_database()
          AND s.query NOT LIKE '%pg_stat_statements%'
          AND s.query NOT LIKE '%/* bench */%' /* bench */`);
      return [Number(r.rows[0].top), Number(r.rows[0].all)];
    },
    async scalar (sql, params = []) {
      const r = await c.query(sql, params);
      return Number(Object.values(r.rows[0])[0]);
    },
    async end () { await c.end(); }
  };
}

// Runs one phase: reset the statement counts, time fn() (which returns the
// number of jobs it moved), count, print the JSON line.
export async function phase (stats, base, name, mode, fn) {
  await stats.reset();
  const t0 = process.hrtime.bigint();
  const jobs = await fn();
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const [top, all] = await stats.count();
  const line = {
    ...base,
    phase: name,
    mode,
    jobs,
    seconds: Number(secs.toFixed(3)),
    jobs_per_s: Math.round(jobs / secs),
    pg_statements: top, // sent by the clients
    pg_statements_all: all,
    statements_per_job: jobs ? Number((top / jobs).toFixed(4)) : null,
    statements_all_per_job: jobs ? Number((all / jobs).toFixed(4)) : null
  };
  process.stdout.write(JSON.stringify(line) + '\n');
  return line;
}

// Runs `workers` copies of the async loop body(i) and waits for all.
export async function parallel (workers, body) {
  await Promise.all(Array.from({ length: workers }, (_, i) => body(i)));
}

// Hands out chunks of `total` jobs: next(max) gives a chunk size, 0 at the end.
export function chunker (total) {
  let left = total;
  return max => {
    const k = Math.min(max, left);
    left -= k;
    return k;
  };
}
