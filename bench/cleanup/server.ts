/**
 * What bench/cleanup.ts reads of the server around a cleanup: the WAL position (pg_current_wal_lsn,
 * so WAL written in a phase is a difference), checkpoints and autovacuums of the fence table (did
 * one land in phase B?); and the cleanup pool as runFenceCleanup sees it, with the time of each
 * `core.delete_expired_fences` call recorded.
 */
import { performance } from "node:perf_hooks";
import type pg from "pg";
import type { Queryable } from "../../shared/db/queryable.ts";
import { at } from "../lib/support.ts";

export interface ServerCounters {
  walBytes(): Promise<number>;
  checkpoints(): Promise<number>;
  autovacuums(): Promise<number>;
}

export async function serverCounters(admin: pg.Client): Promise<ServerCounters> {
  const one = async <R extends pg.QueryResultRow>(sql: string): Promise<R> =>
    at((await admin.query<R>(sql)).rows, 0);
  const version = Number((await one<{ v: string }>("SELECT current_setting('server_version_num') AS v")).v);
  // PostgreSQL 17 moved the checkpoint counters to pg_stat_checkpointer.
  const checkpointSql =
    version >= 170_000
      ? "SELECT (num_timed + num_requested)::int AS n FROM pg_stat_checkpointer"
      : "SELECT (checkpoints_timed + checkpoints_req)::int AS n FROM pg_stat_bgwriter";
  return {
    walBytes: async () =>
      Number((await one<{ b: string }>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS b")).b),
    checkpoints: async () => (await one<{ n: number }>(checkpointSql)).n,
    autovacuums: async () => {
      await admin.query("SELECT pg_stat_clear_snapshot()");
      return (
        await one<{ n: number }>(
          "SELECT autovacuum_count::int AS n FROM pg_stat_user_tables WHERE relid = 'core.processed_jobs'::regclass",
        )
      ).n;
    },
  };
}

/**
 * The cleanup pool with each `core.delete_expired_fences` call's time pushed to `batchMs`.
 * runFenceCleanup calls only `query(text, values)`, so pg's other overloads are not needed.
 */
export function timedQueryable(pool: pg.Pool, batchMs: number[]): Queryable {
  const query = async (text: string, values?: unknown[]) => {
    const start = performance.now();
    const result = await pool.query(text, values);
    if (text.includes("delete_expired_fences")) batchMs.push(performance.now() - start);
    return result;
  };
  return { query } as unknown as Queryable;
}
