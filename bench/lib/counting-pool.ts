/**
 * A pool of award-points' role whose connections count what they send: every query call (one call
 * = one round trip: pg sends a query and waits for its answer) and every statement (a call is one
 * statement, except the harness's simple-protocol messages: `BEGIN; mark; INSERT fence` is three and
 * `SELECT core.fence_commit_check(…); COMMIT` two). The counts are running totals: a
 * benchmark that shares one pool between variants takes the difference around each run.
 */
import type pg from "pg";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";

/** Running totals of one counting pool. */
export interface QueryCounts {
  roundTrips: number;
  statements: number;
}

export function countingPool(url: string, max: number): { pool: pg.Pool; counts: QueryCounts } {
  const pool = createPool({ connectionString: url, role: consumerRoleName("award-points"), max });
  const counts: QueryCounts = { roundTrips: 0, statements: 0 };
  const wrapped = new WeakSet<object>();
  pool.on("acquire", (client) => {
    if (wrapped.has(client)) return;
    wrapped.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      counts.roundTrips += 1;
      const text = typeof args[0] === "string" ? args[0] : "";
      // The harness joins the statements of one message with ";\n" (BEGIN; mark; fence insert — and
      // the COMMIT check; COMMIT); no other query here holds one.
      counts.statements += 1 + (text.match(/;\n/g)?.length ?? 0);
      return query(...args);
    };
  });
  return { pool, counts };
}
