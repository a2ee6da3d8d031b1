/**
 * Counting what a pool's connections send: every query call (one call = one round trip: pg sends a
 * query and waits for its answer), every statement (a call is one statement, except the harness's
 * simple-protocol messages, whose statements it joins with ";\n": BEGIN, the fence mark and insert
 * are three), and every COMMIT. The counts are running totals: a benchmark that shares one pool
 * between variants takes the difference around each run.
 */
import type pg from "pg";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";

/** Running totals of one counted pool. */
export interface QueryCounts {
  roundTrips: number;
  statements: number;
  commits: number;
}

/** A COMMIT statement, alone or in a message of several. */
const COMMIT = /(?:^|;\n)COMMIT\b/;

/** Counts what `pool`'s connections send from now on. */
export function countQueries(pool: pg.Pool): QueryCounts {
  const counts: QueryCounts = { roundTrips: 0, statements: 0, commits: 0 };
  const wrapped = new WeakSet<object>();
  pool.on("acquire", (client) => {
    if (wrapped.has(client)) return;
    wrapped.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      counts.roundTrips += 1;
      const first = args[0];
      const text = typeof first === "string" ? first : ((first as { text?: string } | null)?.text ?? "");
      counts.statements += 1 + (text.match(/;\n/g)?.length ?? 0);
      if (COMMIT.test(text)) counts.commits += 1;
      return query(...args);
    };
  });
  return counts;
}

/** A pool of award-points' role whose connections are counted. */
export function countingPool(url: string, max: number): { pool: pg.Pool; counts: QueryCounts } {
  const pool = createPool({ connectionString: url, role: consumerRoleName("award-points"), max });
  return { pool, counts: countQueries(pool) };
}
