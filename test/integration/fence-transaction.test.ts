/**
 * The fence transaction (shared/fence/fence-transaction.ts) against real PostgreSQL, as the
 * consumer role: only its own checked COMMIT commits the fence (migration 0023), a transaction
 * begun behind the work's tx is never committed, a transaction the work let fail is reported as
 * rolled back; every path returns the connection exactly once.
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
} from "../../shared/errors/transaction.ts";
import { FenceTransaction } from "../../shared/fence/fence-transaction.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
let pool: pg.Pool;
/** The raw connection behind the last fence transaction opened: what a way around tx would reach. */
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

  it("a plain COMMIT is refused before it reaches the server; the transaction stays the fence's", async () => {
    const { transaction } = await open("ft-guarded");
    await expect(transaction.tx.query("COMMIT")).rejects.toBeInstanceOf(TransactionControlError);
    expect(raw?.getTransactionStatus()).toBe("T");
    await transaction.abandon();
    expect(await fenceCount("ft-guarded")).toBe(0);
  });

  it("a COMMIT behind the work's tx (on the raw connection) fails at the server: fence and work roll back", async () => {
    const { transaction } = await open("ft-bypass");
    // What a way around tx would allow: the server's deferred trigger refuses any COMMIT but the
    // harness's checked one, so nothing after it in the message runs either.
    await expect(
      raw?.query(
        "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('ft-bypass-write', core.session_consumer_id(), 't', now() + interval '1 day'); COMMIT; BEGIN",
      ),
    ).rejects.toMatchObject({ code: "JF002" });
    // pg learns the status from the ReadyForQuery after the error, which can come a packet later.
    await raw?.query("SELECT");
    expect(raw?.getTransactionStatus()).toBe("I");
    await expect(transaction.commit()).rejects.toBeInstanceOf(TransactionControlError);
    expect(await fenceCount("ft-bypass")).toBe(0);
    expect(await fenceCount("ft-bypass-write")).toBe(0);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it("a transaction begun anew behind the work's tx is never committed by the harness: ForeignTransactionError", async () => {
    const { transaction } = await open("ft-foreign");
    // ROLLBACK ends the fence's transaction; the new one writes a fence of its own, with no marker
    // (so no deferred check of its own): only the harness's xid check stands in its way.
    await raw?.query(
      "ROLLBACK; BEGIN; INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('ft-foreign-write', core.session_consumer_id(), 't', now() + interval '1 day')",
    );
    await expect(transaction.commit()).rejects.toBeInstanceOf(ForeignTransactionError);
    expect(await fenceCount("ft-foreign")).toBe(0);
    expect(await fenceCount("ft-foreign-write")).toBe(0);
    // The foreign transaction was rolled back, not committed, and the connection is clean.
    const { rows } = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND datname = current_database()",
    );
    expect(rows[0]?.n).toBe(0);
  });

  it("rolling back a transaction begun anew behind tx says so; every other rollback says nothing", async () => {
    const { transaction } = await open("ft-foreign-abandon");
    await raw?.query("ROLLBACK; BEGIN; SELECT pg_current_xact_id()");
    expect(await transaction.abandon()).toBeInstanceOf(ForeignTransactionError);
    // Ended behind tx, no transaction open: rolled back by the server, nothing stands.
    const { transaction: ended } = await open("ft-ended-abandon");
    await raw?.query("ROLLBACK");
    expect(await ended.abandon()).toBeUndefined();
    // Begun anew and then failed: nothing can be asked of it, and nothing of the fence's stands.
    const { transaction: failed } = await open("ft-foreign-failed");
    await raw?.query("ROLLBACK; BEGIN");
    await raw?.query("SELECT 1/0").catch(() => undefined);
    // pg rejects a statement at the server's ErrorResponse and learns the transaction's status at
    // the ReadyForQuery after it, which can come in a later packet (seen on PostgreSQL 15): one more
    // statement, refused in the failed transaction, makes sure that status has arrived.
    await raw?.query("SELECT").catch(() => undefined);
    expect(failed.failed).toBe(true);
    expect(await failed.abandon()).toBeUndefined();
    // A plain rollback of the fence's own transaction says nothing.
    const { transaction: third } = await open("ft-abandon-own");
    expect(await third.abandon()).toBeUndefined();
    const { transaction: fourth } = await open("ft-abandon-own-failed");
    await fourth.tx.query("SELECT 1/0").catch(() => undefined);
    expect(await fourth.abandon()).toBeUndefined();
    for (const id of ["ft-foreign-abandon", "ft-ended-abandon", "ft-foreign-failed", "ft-abandon-own"]) {
      expect(await fenceCount(id), id).toBe(0);
    }
    expect(pool.idleCount).toBe(pool.totalCount);
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
