/**
 * A pooled connection taken within a record's time. pg-pool's wait for a free connection has no
 * way to be cancelled: it ends when a connection frees or after connectionTimeoutMillis (10 s by
 * default), whatever the invocation's deadline. Under concurrent invocations sharing one pool (Lambda
 * Managed Instances, the local stack) a record still queued when its invocation has returned would
 * then take a connection ahead of live records, open its fence only to roll it back, and keep a
 * connection from the records that can still use one.
 *
 * Here the wait ends at the deadline: the record gets InvocationDeadlineError at once, and the
 * connection granted later to its abandoned place in the queue goes straight back to the pool, to
 * the next record waiting.
 */
import type pg from "pg";
import { InvocationDeadlineError } from "../errors/job.ts";
import type { Queryable } from "./queryable.ts";

/** A connection from `pool`, or InvocationDeadlineError once `signal` aborts first. */
export function connectBefore(pool: pg.Pool, signal: AbortSignal | undefined): Promise<pg.PoolClient> {
  if (signal === undefined) return pool.connect();
  if (signal.aborted) return Promise.reject(waitedTooLong());
  return new Promise<pg.PoolClient>((resolve, reject) => {
    let settled = false;
    const onAbort = () => {
      settled = true;
      reject(waitedTooLong());
    };
    signal.addEventListener("abort", onAbort, { once: true });
    pool.connect().then(
      (client) => {
        signal.removeEventListener("abort", onAbort);
        // Granted after the deadline: nobody waits for it any more.
        if (settled) client.release();
        else resolve(client);
        settled = true;
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        if (!settled) reject(error);
        settled = true;
      },
    );
  });
}

function waitedTooLong(): InvocationDeadlineError {
  return new InvocationDeadlineError(
    "the invocation's time ran out while the record waited for a database connection",
  );
}

/**
 * `pool` as a {@link Queryable} whose every query takes its connection within `signal`'s time, as
 * `pool.query` would otherwise without bound: for a record's writes outside its fence transaction
 * (its ledger entry, its dead letter), so that none of them lands after its invocation returned
 * for want of a connection sooner. A query that fails releases its connection with the error, as
 * pg-pool's own `query` does.
 */
export function poolBefore(pool: pg.Pool, signal: AbortSignal | undefined): Queryable {
  if (signal === undefined) return pool;
  const query = async (...args: unknown[]) => {
    const client = await connectBefore(pool, signal);
    try {
      const result = await (client.query as (...a: unknown[]) => Promise<unknown>)(...args);
      client.release();
      return result;
    } catch (error) {
      client.release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
  };
  return { query } as unknown as Queryable;
}
