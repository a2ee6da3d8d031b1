/**
 * The work's transaction guard (shared/fence/work-transaction.ts) without a server: the one check
 * it makes before sending (a plain transaction control text), and what it refuses of the call
 * itself. What the server enforces is test/integration/work-transaction.test.ts's.
 */
import fc from "fast-check";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { TransactionControlError } from "../../shared/errors/transaction.ts";
import {
  guardTransaction,
  TRANSACTION_ENDED,
  transactionControl,
} from "../../shared/fence/work-transaction.ts";

/** Plain transaction control texts: refused before they are sent. */
const PLAIN = [
  "COMMIT",
  "commit",
  "CoMmIt",
  "COMMIT;",
  "  \n\tCOMMIT ;  \n",
  "COMMIT WORK",
  "commit transaction",
  "END",
  "end transaction",
  "ROLLBACK",
  "ROLLBACK WORK",
  "rollback transaction;",
  "ABORT",
  "BEGIN",
  "begin work",
  "START TRANSACTION",
  "start  transaction",
];

/** Everything else goes to the server, which refuses it, runs it, or ends the transaction. */
const SENT = [
  "ROLLBACK TO SAVEPOINT s",
  "ROLLBACK TO s",
  "rollback work to savepoint s",
  "COMMIT AND CHAIN",
  "/* c */ COMMIT",
  "-- c\nCOMMIT",
  "SELECT 1; COMMIT",
  "COMMIT; SELECT 1",
  "COMMIT PREPARED 'x'",
  "BEGIN ISOLATION LEVEL SERIALIZABLE",
  "SELECT 'COMMIT'",
  "SELECT commit FROM t",
  "SELECT temp FROM t",
  "CREATE TEMP TABLE t (x int)",
  "SAVEPOINT s",
  "DO $$ BEGIN COMMIT; END $$",
  "",
];

describe("transactionControl", () => {
  it.each(PLAIN.map((sql) => [sql]))("refuses %j", (sql) => {
    const refusal = transactionControl(sql);
    expect(refusal).toBeInstanceOf(TransactionControlError);
    expect(refusal?.statement).toBe(sql.trim());
  });

  it.each(SENT.map((sql) => [sql]))("leaves %j to the server", (sql) => {
    expect(transactionControl(sql)).toBeUndefined();
  });

  it("says what to do instead", () => {
    expect(transactionControl("COMMIT")?.message).toMatch(/the harness commits when the work returns/);
    expect(transactionControl("ROLLBACK")?.message).toMatch(/throw to roll back.*ROLLBACK TO SAVEPOINT/);
    expect(transactionControl("BEGIN")?.message).toMatch(/already runs inside the fence's transaction/);
  });

  it("property: a text that holds anything but the statement itself is left to the server", () => {
    fc.assert(
      fc.property(fc.constantFrom(...PLAIN), fc.string({ minLength: 1 }), (sql, more) => {
        fc.pre(/[^\s;]/.test(more));
        expect(transactionControl(`${sql.replace(/;\s*$/, "")}; ${more}`)).toBeUndefined();
        expect(transactionControl(`${more} ${sql}`)).toBeUndefined();
      }),
      { numRuns: 500 },
    );
  });
});

/** A stand-in client that records the statements handed to it, as pg's queue would take them. */
class FakeClient {
  readonly calls: unknown[] = [];
  query(statement: unknown): unknown {
    if (!(this instanceof FakeClient)) throw new Error("query called without its client");
    this.calls.push(statement);
    return statement;
  }
  getTransactionStatus(): string {
    return "T";
  }
}

function guarded() {
  const client = new FakeClient();
  return { client, ...guardTransaction(client as unknown as pg.ClientBase) };
}

describe("guardTransaction", () => {
  it("hands every form to the client as a statement pg sends with the extended protocol", () => {
    const { client, tx, used } = guarded();
    expect(used()).toBe(false);
    void tx.query("SELECT 1");
    void tx.query("SELECT $1::int", [1]);
    void tx.query({ text: "SELECT $1::int", values: [2], rowMode: "array" });
    expect(client.calls).toHaveLength(3);
    for (const call of client.calls) {
      expect(call).toBeInstanceOf(pg.Query);
      expect(call).toMatchObject({ queryMode: "extended" });
    }
    expect(
      client.calls.map((c) => [(c as pg.Query & { text: string }).text, (c as { values?: unknown }).values]),
    ).toEqual([
      ["SELECT 1", undefined],
      ["SELECT $1::int", [1]],
      ["SELECT $1::int", [2]],
    ]);
    expect(used()).toBe(true);
  });

  it("refuses a plain transaction control text without sending it, as a rejected promise", async () => {
    const { client, tx, used } = guarded();
    await expect(tx.query("COMMIT")).rejects.toBeInstanceOf(TransactionControlError);
    await expect(tx.query({ text: "rollback" })).rejects.toMatchObject({ statement: "rollback" });
    expect(client.calls).toEqual([]);
    expect(used()).toBe(false);
  });

  it("passes a Submittable on, and throws its refusal (there is no promise to reject)", () => {
    const { client, tx } = guarded();
    const allowed = new pg.Query("SELECT 1");
    expect(tx.query(allowed)).toBe(allowed);
    expect(() => tx.query(new pg.Query("COMMIT"))).toThrow(TransactionControlError);
    expect(client.calls).toEqual([allowed]);
  });

  it("refuses the callback forms and a missing statement", async () => {
    const { client, tx } = guarded();
    const callback = () => {};
    expect(() => tx.query("SELECT 1", callback)).toThrow(TypeError);
    expect(() => tx.query("SELECT 1", [], callback)).toThrow(/no callbacks/);
    expect(() => tx.query({ text: "SELECT 1", callback } as pg.QueryConfig)).toThrow(TypeError);
    await expect(tx.query(null as unknown as string)).rejects.toThrow(TypeError);
    expect(client.calls).toEqual([]);
  });

  it("refuses every call once closed, and every statement not yet sent", async () => {
    const { client, tx, close } = guarded();
    void tx.query("SELECT 1");
    const queued = client.calls[0] as { submit(connection: unknown): unknown };
    close();
    close();
    await expect(tx.query("SELECT 1")).rejects.toMatchObject({
      name: "TransactionControlError",
      statement: "SELECT 1",
      message: expect.stringContaining(TRANSACTION_ENDED),
    });
    expect(() => tx.query(new pg.Query("SELECT 1"))).toThrow(TransactionControlError);
    expect(() => tx.query("SELECT 1", () => {})).toThrow(TransactionControlError);
    // The statement handed over before the close, when pg comes to send it: refused, not written.
    expect(queued.submit({})).toBeInstanceOf(TransactionControlError);
    expect(client.calls).toHaveLength(1);
  });

  it("exposes only query: a fresh frozen object, not the client", () => {
    const { client, tx } = guarded();
    expect(Object.keys(tx)).toEqual(["query"]);
    expect(tx).not.toBe(client);
    expect("release" in tx).toBe(false);
    expect("connection" in tx).toBe(false);
    expect(Object.isFrozen(tx)).toBe(true);
    // A detached query still hands its statement to the client.
    const { query } = tx;
    void query("SELECT 1");
    expect(client.calls).toHaveLength(1);
  });
});
