/**
 * The work's transaction guard (shared/fence/work-transaction.ts) on a real server: a refused
 * statement leaves the fence's transaction open and usable, what the guard allows does what it
 * should, and the guard's reading of the text agrees with PostgreSQL's on where COMMIT is.
 */
import fc from "fast-check";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TransactionControlError } from "../../shared/errors.ts";
import {
  guardTransaction,
  refusedStatement,
  TRANSACTION_ENDED,
} from "../../shared/fence/work-transaction.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** Runs `fn` on a fresh client with a scratch table of its own, inside BEGIN (as the harness opens it). */
function inTransaction(fn: (client: pg.Client) => Promise<void>): Promise<void> {
  return db.withClient(async (client) => {
    await client.query("CREATE TEMP TABLE scratch (n int)");
    await client.query("BEGIN");
    await fn(client);
  });
}

async function scratch(q: pg.ClientBase | { query: pg.ClientBase["query"] }): Promise<number[]> {
  const { rows } = await q.query<{ n: number }>("SELECT n FROM scratch ORDER BY n");
  return rows.map((r) => r.n);
}

describe("guardTransaction on PostgreSQL", () => {
  it("refuses COMMIT, SET and a session set_config; the transaction stays open, usable, and the harness's", async () => {
    await inTransaction(async (client) => {
      const { rows } = await client.query<{ search_path: string }>("SHOW search_path");
      const { tx } = guardTransaction(client);
      await tx.query("INSERT INTO scratch VALUES (1)");
      for (const sql of [
        "COMMIT",
        "SET search_path = nowhere",
        "SELECT set_config('x.y', '1', false)",
        "INSERT INTO scratch VALUES (2); COMMIT",
        "END",
        "ROLLBACK",
        "SELECT pg_advisory_lock(42)",
      ]) {
        await expect(tx.query(sql), sql).rejects.toBeInstanceOf(TransactionControlError);
        expect(client.getTransactionStatus(), sql).toBe("T");
      }
      expect((await tx.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
      // Nothing of a refused text ran: not its INSERT, not its SET.
      expect(await scratch(tx)).toEqual([1]);
      const settings = await tx.query(
        "SELECT current_setting('x.y', true) AS xy, current_setting('search_path') AS sp",
      );
      expect(settings.rows).toEqual([{ xy: null, sp: rows[0]?.search_path }]);
      const locks = await tx.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'");
      expect(locks.rows).toEqual([{ n: 0 }]);

      await client.query("ROLLBACK");
      expect(await scratch(client)).toEqual([]);
    });
  });

  it("lets the work use savepoints: a failed statement rolled back to one, and the rest committed", async () => {
    await inTransaction(async (client) => {
      const { tx } = guardTransaction(client);
      await tx.query("INSERT INTO scratch VALUES (1)");
      await tx.query("SAVEPOINT before_risk");
      await tx.query("INSERT INTO scratch VALUES (2)");
      const failed = tx.query("SELECT 1 / 0");
      await expect(failed).rejects.toBeInstanceOf(pg.DatabaseError);
      await expect(failed).rejects.toMatchObject({ code: "22012" });
      // 25P02 in_failed_sql_transaction: aborted until the rollback to the savepoint.
      await expect(tx.query("SELECT 1")).rejects.toMatchObject({ code: "25P02" });
      await tx.query("ROLLBACK TO SAVEPOINT before_risk");
      await tx.query("INSERT INTO scratch VALUES (3)");
      await tx.query("RELEASE SAVEPOINT before_risk");
      await client.query("COMMIT");
      expect(client.getTransactionStatus()).toBe("I");
      expect(await scratch(client)).toEqual([1, 3]);
    });
  });

  it("refuses every call after close(), while the harness's client goes on", async () => {
    await inTransaction(async (client) => {
      const { tx, close } = guardTransaction(client);
      await tx.query("INSERT INTO scratch VALUES (1)");
      close();
      const late = tx.query("INSERT INTO scratch VALUES (2)");
      await expect(late).rejects.toBeInstanceOf(TransactionControlError);
      await expect(late).rejects.toThrow(TRANSACTION_ENDED);
      await client.query("COMMIT");
      expect(await scratch(client)).toEqual([1]);
    });
  });

  it("SET LOCAL and set_config(…, true) hold inside the transaction and are gone after its COMMIT", async () => {
    await inTransaction(async (client) => {
      const before = (await client.query<{ statement_timeout: string }>("SHOW statement_timeout")).rows[0];
      const { tx } = guardTransaction(client);
      await tx.query("SET LOCAL statement_timeout = '4321ms'");
      await tx.query("SELECT set_config('jobfence.probe', 'inside', true)");
      const inside = await tx.query(
        "SELECT current_setting('statement_timeout') AS st, current_setting('jobfence.probe') AS probe",
      );
      expect(inside.rows).toEqual([{ st: "4321ms", probe: "inside" }]);
      await client.query("COMMIT");
      expect((await client.query("SHOW statement_timeout")).rows[0]).toEqual(before);
      const after = await client.query(
        "SELECT coalesce(current_setting('jobfence.probe', true), '') AS probe",
      );
      expect(after.rows).toEqual([{ probe: "" }]);
    });
  });

  it("allows DO and CALL because PostgreSQL refuses COMMIT in them inside a transaction block", async () => {
    await db.withClient(async (client) => {
      await client.query("CREATE PROCEDURE pg_temp.commits() LANGUAGE plpgsql AS $$ BEGIN COMMIT; END $$");
      const { tx } = guardTransaction(client);
      for (const sql of ["DO $$ BEGIN COMMIT; END $$", "CALL pg_temp.commits()"]) {
        expect(refusedStatement(sql)).toBeUndefined();
        await client.query("BEGIN");
        // 2D000 invalid_transaction_termination; then 25P02: the fence's transaction is still
        // there, aborted, for the harness to roll back.
        await expect(tx.query(sql), sql).rejects.toMatchObject({ code: "2D000" });
        await expect(client.query("SELECT 1"), sql).rejects.toMatchObject({ code: "25P02" });
        await client.query("ROLLBACK");
      }
    });
  });
});

describe("refusedStatement agrees with PostgreSQL", () => {
  /** Statements that end the transaction. */
  const ENDERS = ["COMMIT", "commit work", "/* c */ END", "--c\nROLLBACK", "ABORT", "CoMmIt/**/"];
  /** Statements that run without error and hide a COMMIT where PostgreSQL reads no SQL. */
  const HIDERS = [
    "",
    "SELECT 1",
    "SELECT 'a;COMMIT'",
    "SELECT 'it''s; COMMIT'",
    "SELECT E'\\'; COMMIT; --'",
    "SELECT $$;COMMIT;$$",
    "SELECT $a$ $$; COMMIT; $$ $a$",
    "SELECT 1 /* a /* b */ ; COMMIT */",
    "SELECT 1 -- ; COMMIT\n",
    "SELECT 'a'\n'b; COMMIT'",
    "SELECT E'a' -- c\n '\\'; COMMIT; --'",
    'SELECT 1 AS "x;COMMIT"',
    "SELECT U&'\\0041; COMMIT'",
    "SET LOCAL x.y = 'a;COMMIT'",
    "SELECT set_config('x.y', ';COMMIT', true)",
    "DO $$ BEGIN PERFORM ';COMMIT'; END $$",
  ];
  const text = fc.string({ unit: "binary", maxLength: 40 }).map((s) => s.replaceAll("\u0000", ""));
  const hider = fc.oneof(
    fc.constantFrom(...HIDERS),
    text.map((s) => `SELECT ${pg.escapeLiteral(s)}`),
    text.map((s) => `SELECT E'${s.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`),
    text.map((s) => {
      let tag = "q";
      while (`${s}$`.includes(`$${tag}$`)) tag += "q";
      return `SELECT $${tag}$${s}$${tag}$`;
    }),
    text.map((s) => `SELECT 1 /* ${s.replace(/\/(?=\*)|\*(?=\/)/g, "$& ")} */`),
    text.map((s) => `SELECT 1 -- ${s.replace(/[\n\r]/g, " ")}\n`),
    text.map((s) => `SELECT 1 AS ${pg.escapeIdentifier(s || "x")}`),
  );

  it("property: the guard refuses a text exactly when PostgreSQL would end the transaction running it", async () => {
    await db.withClient(async (client) => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.oneof({ weight: 6, arbitrary: hider }, { weight: 1, arbitrary: fc.constantFrom(...ENDERS) }),
            {
              minLength: 1,
              maxLength: 5,
            },
          ),
          async (statements) => {
            const sql = statements.join(";");
            await client.query("BEGIN");
            try {
              await client.query(sql);
            } finally {
              const status = client.getTransactionStatus();
              if (status !== "I") await client.query("ROLLBACK");
              expect(status, sql).not.toBe("E");
              expect(refusedStatement(sql) !== undefined, sql).toBe(status === "I");
            }
          },
        ),
        { numRuns: 300 },
      );
    });
  });
});
