/**
 * What a workload cost the server: transactions and WAL bytes, as a snapshot before and a delta
 * after, read through one observer connection of its own.
 *
 * - Transactions: `xact_commit + xact_rollback` of `pg_stat_database` for the current database,
 *   read after `pg_stat_clear_snapshot()`. Every backend connected to the database counts (the
 *   libraries' background connections, autovacuum workers); other databases do not.
 * - WAL bytes: the difference of `pg_current_wal_insert_lsn()` (where WAL is being inserted, so a
 *   commit the WAL writer has not flushed yet still counts). WAL is cluster-wide: anything else
 *   writing to the server in the window (another database, autovacuum, a checkpoint record) counts.
 *
 * Statistics reach `pg_stat_database` asynchronously. On PostgreSQL 15+ a backend flushes its
 * pending counts at the end of a transaction at most once a second, an idle one after up to 10 s,
 * and an exiting one at once. So {@link PgObserver.settled} waits until no other client backend is
 * connected to the database (stop the workload's pools first: their backends flush as they exit),
 * and the observer forces its own flush (`pg_stat_force_next_flush()`) before every reading; its
 * own transactions are counted as it makes them and taken out of the figure. Before 15 (no forced
 * flush, a stats collector with a delay of its own) the reading waits and is marked approximate.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";

/** The counters at one moment. */
export interface PgCounterSnapshot {
  /** performance.now() when read. */
  readonly at: number;
  /** Commits + rollbacks in the database, less the observer's own transactions. */
  readonly xacts: number;
  readonly commits: number;
  readonly rollbacks: number;
  /** Rows inserted, updated and deleted in the database, as pg_stat_database counts them. */
  readonly rowsWritten: number;
  /** `pg_current_wal_insert_lsn()`, as text and as a byte position. */
  readonly walLsn: string;
  readonly walPosition: bigint;
  /** False when the server could not be made to flush its statistics (before PostgreSQL 15). */
  readonly exact: boolean;
}

/** What happened between two snapshots. */
export interface PgCounterDelta {
  readonly ms: number;
  readonly xacts: number;
  readonly commits: number;
  readonly rollbacks: number;
  readonly rowsWritten: number;
  readonly walBytes: number;
  readonly exact: boolean;
}

/** A dedicated connection that reads the counters; every statement it runs is accounted for. */
export interface PgObserver {
  /** server_version_num, e.g. 150004. */
  readonly serverVersion: number;
  /** Whether pg_stat_force_next_flush() exists (PostgreSQL 15+). */
  readonly canForceFlush: boolean;
  /** Runs a statement on the observer connection (counted, so it never shows up in a delta). */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
  /**
   * Waits until no other client backend is connected to this database (their statistics are
   * flushed as they exit); returns how many were still there when it gave up (0 when none).
   */
  quiesce(timeoutMs?: number): Promise<number>;
  /** The counters now (the observer's own statistics flushed first). */
  snapshot(): Promise<PgCounterSnapshot>;
  /**
   * {@link quiesce}, then snapshots until two in a row agree on the transaction count (exiting
   * backends flush a moment after they leave pg_stat_activity).
   */
  settled(timeoutMs?: number): Promise<PgCounterSnapshot>;
  close(): Promise<void>;
}

/** `X/Y` (two hexadecimal halves) as a byte position. */
export function parseLsn(text: string): bigint {
  const [high, low] = text.split("/");
  if (high === undefined || low === undefined) throw new Error(`not an LSN: ${text}`);
  return (BigInt(`0x${high}`) << 32n) + BigInt(`0x${low}`);
}

/** `after − before`. */
export function counterDelta(before: PgCounterSnapshot, after: PgCounterSnapshot): PgCounterDelta {
  return {
    ms: after.at - before.at,
    xacts: after.xacts - before.xacts,
    commits: after.commits - before.commits,
    rollbacks: after.rollbacks - before.rollbacks,
    rowsWritten: after.rowsWritten - before.rowsWritten,
    walBytes: Number(after.walPosition - before.walPosition),
    exact: before.exact && after.exact,
  };
}

const READ_SQL = `SELECT pg_stat_clear_snapshot();
SELECT d.xact_commit::text AS commits, d.xact_rollback::text AS rollbacks,
       (d.tup_inserted + d.tup_updated + d.tup_deleted)::text AS rows_written,
       pg_current_wal_insert_lsn()::text AS lsn
  FROM pg_stat_database AS d
 WHERE d.datname = current_database()`;

const OTHERS_SQL = `SELECT count(*)::int AS n FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`;

/** Opens the observer on `connectionString` (the database to count). */
export async function openObserver(connectionString: string): Promise<PgObserver> {
  const client = new pg.Client({ connectionString, application_name: "bench-observer" });
  await client.connect();
  client.on("error", () => {});
  /** Transactions this connection has run (each statement below is one). */
  let own = 0;
  const query = async <R extends pg.QueryResultRow>(sql: string, values?: unknown[]) => {
    own += 1;
    return client.query<R>(sql, values);
  };
  const version = Number(
    (await query<{ v: string }>("SELECT current_setting('server_version_num') AS v")).rows[0]?.v,
  );
  const canForceFlush = version >= 150_000;

  const quiesce = async (timeoutMs = 15_000) => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const n = (await query<{ n: number }>(OTHERS_SQL)).rows[0]?.n ?? 0;
      if (n === 0 || performance.now() > deadline) return n;
      await sleep(10);
    }
  };

  const snapshot = async (): Promise<PgCounterSnapshot> => {
    if (canForceFlush) {
      // Flushed when this statement's transaction ends: everything the observer ran so far,
      // this statement included, is in the shared counters before the read below.
      await query("SELECT pg_stat_force_next_flush()");
    } else {
      await sleep(1100);
    }
    const flushed = own;
    // Two statements, one implicit transaction (simple query protocol).
    const results = (await query(READ_SQL)) as unknown as pg.QueryResult[];
    const row = results[1]?.rows[0] as
      | { commits: string; rollbacks: string; rows_written: string; lsn: string }
      | undefined;
    if (!row) throw new Error("pg_stat_database has no row for the current database");
    const commits = Number(row.commits);
    const rollbacks = Number(row.rollbacks);
    return {
      at: performance.now(),
      xacts: commits + rollbacks - flushed,
      commits,
      rollbacks,
      rowsWritten: Number(row.rows_written),
      walLsn: row.lsn,
      walPosition: parseLsn(row.lsn),
      exact: canForceFlush,
    };
  };

  const settled = async (timeoutMs = 15_000) => {
    const left = await quiesce(timeoutMs);
    if (left > 0) console.warn(`  pg-counters: ${left} other backend(s) still connected; counting anyway`);
    let previous = await snapshot();
    for (let i = 0; i < 10; i++) {
      await sleep(20);
      const next = await snapshot();
      if (next.xacts === previous.xacts) return next;
      previous = next;
    }
    return previous;
  };

  return {
    serverVersion: version,
    canForceFlush,
    query,
    quiesce,
    snapshot,
    settled,
    close: () => client.end(),
  };
}
