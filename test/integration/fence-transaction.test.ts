/**
 * The fence transaction (shared/fence/fence-transaction.ts) against real PostgreSQL, as the
 * consumer role: its COMMIT checks that the open transaction is the one that inserted the fence, so
 * a transaction the work ended by a path the statement guard did not see is never committed
 * unchecked; a transaction the work let fail is reported as rolled back; every path returns the
 * connection exactly once.
 */
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPool } from "../../shared/db/pool.ts";
import { ensureConsumerRole } from "../../shared/db/queries/provision-login.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import {
  ForeignTransactionError,
  TransactionControlError,
  TransactionRolledBackError,
} from "../../shared/errors.ts";
import { FenceTransaction } from "../../shared/fence/fence-transaction.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
let pool: pg.Pool;
/** The raw connection behind the last fence transaction opened: what a guard bypass would reach. */
let raw: pg.PoolClient | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  const role = await db.withClient((c) => ensureConsumerRole(c, "fence-tx"));
  pool = createPool({ connectionString: db.url, role, max: 2 });
  pool.on("acquire", (client) => {
    raw = client;
  });
});
afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

const open = (jobId: string, tenantId = "t") =>
  FenceTransaction.open(pool, {
    consumer: "fence-tx",
    ttlSeconds: 3600,
    jobs: [{ jobId, tenantId, fingerprint: jobFingerprint(tenantId, { jobId }) }],
  });
const fenceCount = async (jobId: string) =>
  db.withClient(async (c) => {
    const { rows } = await c.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM core.processed_jobs WHERE job_id = $1",
      [jobId],
    );
    return rows[0]?.n;
  });

describe("FenceTransaction", () => {
  it("commits the fence and returns the connection", async () => {
    const { transaction, fresh } = await open("ft-ok");
    expect(fresh).toEqual(new Set(["ft-ok"]));
    expect(await transaction.commit()).toBeGreaterThanOrEqual(0);
    expect(await fenceCount("ft-ok")).toBe(1);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it("reports an existing fence with its fingerprint", async () => {
    const { transaction, fresh, existing } = await open("ft-ok");
    expect(fresh.size).toBe(0);
    expect(existing.get("ft-ok")?.equals(jobFingerprint("t", { jobId: "ft-ok" }))).toBe(true);
    await transaction.abandon();
  });

  it("the guard refuses COMMIT before it reaches the server; the transaction stays the fence's", async () => {
    const { transaction } = await open("ft-guarded");
    await expect(transaction.tx.query("COMMIT")).rejects.toBeInstanceOf(TransactionControlError);
    await transaction.abandon();
    expect(await fenceCount("ft-guarded")).toBe(0);
  });

  it("work that committed behind the guard's back (and opened another transaction) is caught at COMMIT", async () => {
    const { transaction } = await open("ft-bypass");
    // What a gap in the guard would allow: the fence commits early, a new transaction begins.
    await raw?.query("COMMIT; BEGIN; SELECT pg_current_xact_id()");
    await expect(transaction.commit()).rejects.toBeInstanceOf(ForeignTransactionError);
    // The early COMMIT stands (that is why the job is dead-lettered as hard, for a person).
    expect(await fenceCount("ft-bypass")).toBe(1);
    // The foreign transaction was rolled back, not committed, and the connection is clean.
    const { rows } = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND datname = current_database()",
    );
    expect(rows[0]?.n).toBe(0);
  });

  it("rolling back after work that committed behind the guard's back says so, instead of a plain retry", async () => {
    const { transaction } = await open("ft-bypass-abandon");
    await raw?.query("COMMIT; BEGIN; SELECT pg_current_xact_id()");
    expect(await transaction.abandon()).toBeInstanceOf(ForeignTransactionError);
    const { transaction: second } = await open("ft-bypass-abandon-2");
    await raw?.query("COMMIT");
    expect(await second.abandon()).toBeInstanceOf(ForeignTransactionError);
    // Committed behind the guard's back, then left failed: the rollback cannot ask first, so it
    // looks for the fences afterwards.
    const { transaction: failed } = await open("ft-bypass-failed");
    await raw?.query("COMMIT; BEGIN; SELECT 1").catch(() => undefined);
    await raw?.query("SELECT 1/0").catch(() => undefined);
    // pg rejects a statement at the server's ErrorResponse and learns the transaction's status at
    // the ReadyForQuery after it, which can come in a later packet (seen on PostgreSQL 15): one more
    // statement, refused in the failed transaction, makes sure that status has arrived.
    await raw?.query("SELECT").catch(() => undefined);
    expect(failed.failed).toBe(true);
    expect(await failed.abandon()).toBeInstanceOf(ForeignTransactionError);
    // A plain rollback of the fence's own transaction says nothing.
    const { transaction: third } = await open("ft-abandon-own");
    expect(await third.abandon()).toBeUndefined();
    const { transaction: fourth } = await open("ft-abandon-own-failed");
    await fourth.tx.query("SELECT 1/0").catch(() => undefined);
    expect(await fourth.abandon()).toBeUndefined();
    expect(await fenceCount("ft-abandon-own")).toBe(0);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it("work that committed and left no transaction open is caught too", async () => {
    const { transaction } = await open("ft-bypass-2");
    await raw?.query("COMMIT");
    await expect(transaction.commit()).rejects.toBeInstanceOf(ForeignTransactionError);
  });

  it("a transaction the work let fail is reported as rolled back, with nothing applied", async () => {
    const { transaction } = await open("ft-failed");
    await transaction.tx.query("SELECT 1/0").catch(() => undefined);
    await expect(transaction.commit()).rejects.toBeInstanceOf(TransactionRolledBackError);
    expect(await fenceCount("ft-failed")).toBe(0);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it("ends once: after commit or abandon, the work's connection refuses queries and abandon is a no-op", async () => {
    const { transaction } = await open("ft-once");
    await transaction.commit();
    await expect(transaction.tx.query("SELECT 1")).rejects.toBeInstanceOf(TransactionControlError);
    await transaction.abandon();
    await expect(transaction.commit()).rejects.toThrow(RangeError);
  });
});
