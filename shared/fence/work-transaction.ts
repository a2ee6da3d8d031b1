/**
 * What the consumer's work gets of the fence's transaction: `tx.query`, and nothing else of the
 * pooled client. The rules the work must keep are enforced by the server and by the client's own
 * state, not by reading its SQL (docs/design.md §3.3):
 *
 * - A COMMIT the work sends fails at the server, however it is spelled: the fence's deferred
 *   trigger accepts only the harness's checked COMMIT (migration 0023), so the fence rolls back
 *   with the half-done work. tx.query answers that failure with a TransactionControlError.
 * - Each statement goes with the extended protocol, so the server refuses a text of several
 *   statements: nothing can ride behind a COMMIT or a ROLLBACK in one message.
 * - Once the transaction has ended (the work's own ROLLBACK, or a COMMIT the server refused), no
 *   statement of the work is sent again: each is checked at the moment pg writes it to the socket,
 *   against the transaction status of the server's last ReadyForQuery. A statement queued behind
 *   one that ends the transaction is refused too, so nothing the work sends runs in autocommit.
 *   (A session-level `default_transaction_read_only = on` sent with BEGIN would not do it: a
 *   statement before BEGIN in one message joins the transaction BEGIN opens, and a ROLLBACK of the
 *   work would undo it with the rest.)
 * - Session state the work changes (SET, role, LISTEN, temporary tables, session advisory locks,
 *   cursors WITH HOLD, prepared statements) is reset before the connection goes back to the pool:
 *   by the harness's COMMIT check, or after its ROLLBACK (fence-transaction.ts).
 *
 * One check is made here, before anything is sent: a text that is nothing but a transaction
 * control statement (`COMMIT`, `ROLLBACK`, `BEGIN`, …) is refused with a TransactionControlError
 * that says what to do instead, and the transaction stays as it was. Everything else is the
 * server's to refuse. This guards against the work's mistakes, not against hostile code, which
 * runs in the same process and could open a connection of its own.
 */
import pg from "pg";
import { TransactionControlError } from "../errors/transaction.ts";

/** The fence transaction's `query`, and nothing else of the client. */
export type WorkQueries = Pick<pg.ClientBase, "query">;

/** Why a call on a closed guard is refused. */
export const TRANSACTION_ENDED =
  "the work's transaction has already ended: the work kept using it after its promise settled";

/**
 * SQLSTATE of migration 0023's deferred trigger: the fence's transaction was to end (COMMIT, or SET
 * CONSTRAINTS ALL IMMEDIATE) without the harness's check. The server has rolled it back.
 */
const UNCHECKED_COMMIT_SQLSTATE = "JF002";

const WHY = {
  commit:
    "it would commit the fence's transaction before the work is done; the harness commits when the work returns",
  rollback:
    "it would end the fence's transaction; throw to roll back, or use SAVEPOINT and ROLLBACK TO SAVEPOINT",
  begin: "the work already runs inside the fence's transaction, which the harness opened",
  refusedCommit:
    "the fence's transaction may be committed by the harness only (a COMMIT, END or PREPARE TRANSACTION of the work, or a SET CONSTRAINTS ALL IMMEDIATE, which runs the fence's commit check at once): the server refused it and rolled the transaction back, work and fence",
  ended:
    "it ended the fence's transaction: the server rolled it back, work and fence, and the work's later statements are refused",
  after:
    "the fence's transaction had already ended (an earlier statement of the work ended it): nothing more is sent",
} as const;

/**
 * A text that is one transaction control statement and nothing else, in its plain spellings: the
 * friendly early refusal. Any other spelling reaches the server, which refuses it or ends the
 * transaction, and the work gets the same error a moment later.
 */
const TRANSACTION_CONTROL =
  /^\s*(commit|end|rollback|abort|begin|start\s+transaction)(\s+(work|transaction))?\s*;?\s*$/i;

/** The early refusal of `text`, when it is nothing but a transaction control statement. */
export function transactionControl(text: string): TransactionControlError | undefined {
  const verb = TRANSACTION_CONTROL.exec(text)?.[1]?.toLowerCase();
  if (verb === undefined) return undefined;
  const why =
    verb === "commit" || verb === "end"
      ? WHY.commit
      : verb === "rollback" || verb === "abort"
        ? WHY.rollback
        : WHY.begin;
  return new TransactionControlError(text.trim(), why);
}

/** A statement pg sends when its turn comes: pg.Query, or a Submittable such as a pg-cursor. */
interface Sendable {
  submit(connection: unknown): Error | null | undefined;
  callback?: (error: Error | null, result?: unknown) => void;
  queryMode?: string;
  query_timeout?: number;
}

/** The guard over one fence transaction's client. */
export interface WorkGuard {
  /** What the work is given. */
  readonly tx: WorkQueries;
  /** Ends the guard: every later call, and every statement not yet sent, is refused. */
  close(): void;
  /** Statements the work sent that have not been answered yet. */
  pending(): number;
  /** Whether the work sent anything to the server (only then can it have changed the session). */
  used(): boolean;
  /** The error of the work's statement that ended the fence's transaction, if one did. */
  endedBy(): TransactionControlError | undefined;
}

/**
 * Wraps `client` for the work: `tx.query` takes what `client.query` takes (text and values, a
 * QueryConfig, a Submittable such as a pg-cursor) and returns what it returns, sent with the
 * extended protocol. It refuses, as a rejected promise (thrown for a Submittable, whose call
 * returns the Submittable), a plain transaction control text, any statement once the transaction
 * has ended, and every call once the guard is closed. The callback forms are not supported (the
 * work awaits its statements) and throw a TypeError.
 */
export function guardTransaction(client: pg.ClientBase): WorkGuard {
  let open = true;
  let pending = 0;
  let used = false;
  let endedBy: TransactionControlError | undefined;

  /** Asked as pg writes a statement: the previous one's ReadyForQuery has been read by then. */
  const refusalAtSend = (text: string): Error | undefined => {
    if (!open) return new TransactionControlError(text, TRANSACTION_ENDED);
    if (endedBy !== undefined || client.getTransactionStatus() === "I") {
      return new TransactionControlError(text, WHY.after);
    }
    return undefined;
  };
  const guardSend = (statement: Sendable, text: string): void => {
    const submit = statement.submit;
    statement.submit = function (this: Sendable, connection: unknown) {
      return refusalAtSend(text) ?? submit.call(this, connection);
    };
  };

  const query = (...args: unknown[]): unknown => {
    const [config, values, callback] = args;
    const submittable = isSubmittable(config);
    const text = typeof config === "string" ? config : isObject(config) ? String(config.text ?? "") : "";
    if (
      typeof values === "function" ||
      typeof callback === "function" ||
      (isObject(config) && !submittable && typeof config.callback === "function")
    ) {
      throw open
        ? new TypeError("the work's transaction takes no callbacks: await the promise tx.query returns")
        : new TransactionControlError(text, TRANSACTION_ENDED);
    }
    const refusal =
      config === null || config === undefined
        ? new TypeError("tx.query takes SQL text, a QueryConfig or a Submittable")
        : !open
          ? new TransactionControlError(text, TRANSACTION_ENDED)
          : transactionControl(text);
    if (refusal !== undefined) {
      // A Submittable's caller gets the Submittable back, not a promise: there is none to reject.
      if (submittable) throw refusal;
      return Promise.reject(refusal);
    }
    used = true;
    if (submittable) {
      guardSend(config as unknown as Sendable, text);
      return client.query(config as unknown as pg.Submittable);
    }
    const statement = new pg.Query(config as pg.QueryConfig, values as unknown[]) as unknown as Sendable;
    statement.queryMode = "extended";
    if (isObject(config) && typeof config.query_timeout === "number")
      statement.query_timeout = config.query_timeout;
    guardSend(statement, text);
    pending += 1;
    const answer = new Promise((resolve, reject) => {
      statement.callback = (error, result) => {
        pending -= 1;
        if (error) {
          if ((error as { code?: unknown }).code !== UNCHECKED_COMMIT_SQLSTATE) return reject(error);
          endedBy ??= new TransactionControlError(text, WHY.refusedCommit, { cause: error });
          return reject(endedBy);
        }
        // Read as the statement's own ReadyForQuery left it: this statement ended the transaction.
        if (client.getTransactionStatus() === "I") {
          endedBy ??= new TransactionControlError(text, WHY.ended);
          return reject(endedBy);
        }
        resolve(result);
      };
    });
    client.query(statement as unknown as pg.Submittable);
    return answer;
  };
  const tx = Object.freeze({ query }) as unknown as WorkQueries;
  return {
    tx,
    close() {
      open = false;
    },
    pending: () => pending,
    used: () => used,
    endedBy: () => endedBy,
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

function isSubmittable(value: unknown): boolean {
  return isObject(value) && typeof value.submit === "function";
}
