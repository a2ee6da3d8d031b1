/**
 * The fence transaction (docs/design.md §3.1), the one copy both commit modes use:
 *
 *   BEGIN; INSERT fence(s) … ON CONFLICT DO NOTHING   -- one round trip; returns the fresh ones
 *   (SELECT the fingerprints of fences that existed)  -- only when some did: a duplicate pays this
 *   work(job, tx) …                                   -- on the guarded connection (work-transaction.ts)
 *   (INSERT the follow-ups the work sent)             -- only when it sent some: one round trip for all
 *   SELECT core.assert_fence_transaction(xid); COMMIT -- one round trip: the COMMIT runs only if the
 *                                                        open transaction is still the fence's
 *
 * Every path ends the connection's loan exactly once: released after COMMIT or ROLLBACK, destroyed
 * when either failed for a reason other than the server's answer (the connection's state is then
 * unknown, and the pool must not hand it to the next record).
 */
import { performance } from "node:perf_hooks";
import pg from "pg";
import { beginWithFences, type FenceSet, fenceFingerprints } from "../db/queries/begin-with-fences.ts";
import { insertFollowUps } from "../db/queries/insert-follow-ups.ts";
import {
  FenceLockTimeoutError,
  FOREIGN_TRANSACTION_SQLSTATE,
  type FollowUpRefusedError,
  ForeignTransactionError,
  InvocationDeadlineError,
  TransactionControlError,
  TransactionRolledBackError,
  UnexpectedDatabaseAnswerError,
} from "../errors.ts";
import { faultHook } from "../fault-points.ts";
import type { StagedFollowUp } from "../outbox/follow-up.ts";
import { guardTransaction, TRANSACTION_ENDED, type WorkQueries } from "./work-transaction.ts";

/** Whether a fence of these jobs was committed by the given transaction (its xmin). */
const FENCES_COMMITTED_BY = `
  SELECT EXISTS (SELECT 1 FROM core.consumer_roles AS c JOIN core.processed_jobs AS p ON p.consumer_id = c.id
                  WHERE c.consumer = $1 AND p.job_id = ANY ($2::text[]) AND p.xmin = xid($3::xid8)) AS committed`;

/** SQLSTATE of a lock wait that ran into lock_timeout. */
const LOCK_NOT_AVAILABLE = "55P03";

/** SQLSTATE of a statement sent into a transaction that has already failed. */
const IN_FAILED_TRANSACTION = "25P02";

/** What opening the transaction found. */
export interface OpenedFences {
  readonly transaction: FenceTransaction;
  /** Job ids whose fence this transaction holds. */
  readonly fresh: ReadonlySet<string>;
  /** Every other job id, with its existing fence's fingerprint (null: written before fingerprints). */
  readonly existing: ReadonlyMap<string, Buffer | null>;
}

/** One open fence transaction on a pooled connection. */
export class FenceTransaction {
  /** The connection as the work may use it: queries only (see work-transaction.ts). */
  readonly tx: WorkQueries;
  readonly #client: pg.PoolClient;
  readonly #closeGuard: () => void;
  readonly #pending: () => number;
  /** The transaction's id, when it inserted a fence (only then can work run in it). */
  readonly #xid: string | null;
  readonly #jobIds: string[];
  readonly #consumer: string;
  readonly #startedAt: number;
  readonly #followUps: StagedFollowUp[] = [];
  #refusal: FollowUpRefusedError | undefined;
  #ended = false;

  private constructor(
    client: pg.PoolClient,
    consumer: string,
    xid: string | null,
    jobIds: string[],
    startedAt: number,
  ) {
    const guard = guardTransaction(client);
    this.tx = guard.tx;
    this.#closeGuard = () => guard.close();
    this.#pending = () => guard.pending();
    this.#client = client;
    this.#xid = xid;
    this.#jobIds = jobIds;
    this.#consumer = consumer;
    this.#startedAt = startedAt;
  }

  /**
   * Takes a connection, begins and inserts the fences. Throws (with the connection returned or
   * destroyed) when the database refuses or cannot be reached, including a lock timeout behind a
   * concurrent delivery of the same job.
   */
  static async open(pool: pg.Pool, fences: FenceSet): Promise<OpenedFences> {
    const jobIds = [...new Set(fences.jobs.map((j) => j.jobId))];
    if (faultHook) await faultHook("fence:before", { jobIds });
    const client = await pool.connect();
    const startedAt = performance.now();
    try {
      const { fresh, xid } = await beginWithFences(client, fences);
      // Spliced into the COMMIT's SQL below: it must be the digits PostgreSQL sent.
      if (xid !== null && !/^\d+$/.test(xid)) throw new RangeError(`not a transaction id: ${xid}`);
      const others = jobIds.filter((id) => !fresh.has(id));
      const existing =
        others.length > 0 ? await fenceFingerprints(client, fences.consumer, others) : new Map();
      if (faultHook) await faultHook("fence:after-insert", { jobIds });
      return {
        transaction: new FenceTransaction(client, fences.consumer, xid, jobIds, startedAt),
        fresh,
        existing,
      };
    } catch (error) {
      await endLoan(client, error);
      // The insert waited lock_timeout behind a concurrent delivery of one of these jobs.
      if (error instanceof pg.DatabaseError && error.code === LOCK_NOT_AVAILABLE)
        throw new FenceLockTimeoutError(jobIds, error);
      throw error;
    }
  }

  /**
   * Commits, after checking that the open transaction is still the one that inserted the fences;
   * returns the milliseconds from BEGIN to COMMIT. Throws TransactionRolledBackError when the
   * server rolled back instead (the work let a statement fail), ForeignTransactionError when the
   * work ended the fence's transaction, or the connection's error (the outcome is then unknown;
   * the fence makes a redelivery safe either way).
   */
  async commit(): Promise<number> {
    this.#end();
    if (faultHook) await faultHook("fence:after-work", { jobIds: this.#jobIds });
    let results: pg.QueryResult[];
    try {
      // The work's follow-ups go in just before the COMMIT, all in one statement; a work that sent
      // none costs nothing here.
      if (this.#followUps.length > 0) await insertFollowUps(this.#client, this.#followUps);
      // With no fence inserted no work ran, and there is nothing to check: COMMIT alone.
      results = (await this.#client.query(
        this.#xid === null
          ? "SELECT;\nCOMMIT"
          : `SELECT core.assert_fence_transaction('${this.#xid}'::xid8);\nCOMMIT`,
      )) as unknown as pg.QueryResult[];
    } catch (error) {
      const failure = commitFailure(error);
      await endLoan(this.#client, error);
      throw failure;
    }
    const command = Array.isArray(results) ? results[1]?.command : undefined;
    // A COMMIT in a failed transaction is answered ROLLBACK, without an error.
    if (command !== "COMMIT") {
      this.#client.release();
      throw new TransactionRolledBackError(command);
    }
    this.#client.release();
    const elapsedMs = performance.now() - this.#startedAt;
    if (faultHook) await faultHook("fence:after-commit", { jobIds: this.#jobIds });
    return elapsedMs;
  }

  /**
   * Stages a follow-up the work sent: written to the outbox with the COMMIT, so it exists exactly
   * when the work's effect does. Refused once the transaction has ended.
   */
  stage(followUp: StagedFollowUp): void {
    if (this.#ended) throw new TransactionControlError("send", TRANSACTION_ENDED);
    this.#followUps.push(followUp);
  }

  /**
   * Records a follow-up the work tried to send and was refused: the job fails with it even if its
   * work caught it (a follow-up silently dropped would commit the effect without it).
   */
  refuse(error: FollowUpRefusedError): void {
    this.#refusal ??= error;
  }

  /** The first follow-up refused in this transaction, if any. */
  get refusal(): FollowUpRefusedError | undefined {
    return this.#refusal;
  }

  /** The follow-ups staged so far: after a successful commit, what the relay sends. */
  get followUps(): readonly StagedFollowUp[] {
    return this.#followUps;
  }

  /**
   * Whether the work returned with statements it sent still unanswered (it did not await them):
   * whatever they do happens after the work says it is done, and a batch-mate's statements would
   * queue behind them.
   */
  get leftStatements(): number {
    return this.#pending();
  }

  /**
   * Whether the transaction has failed (a statement of the work failed and the work went on): a
   * COMMIT would be answered ROLLBACK. Read from the server's last ReadyForQuery, no round trip.
   * pg rejects a failed statement at its ErrorResponse; the ReadyForQuery that says "failed" can
   * arrive a packet later, so right after a swallowed failure this may still read false. Nothing
   * relies on it alone: batch mode then meets 25P02 in the next statement and redoes every record
   * in a transaction of its own, and a COMMIT in a failed transaction is answered ROLLBACK.
   */
  get failed(): boolean {
    return this.#client.getTransactionStatus() === "E";
  }

  /**
   * Rolls back and returns the connection (destroys it if the rollback fails). Safe to call twice.
   * Returns a ForeignTransactionError when the transaction it rolls back is not the fence's (the
   * work ended it by a path the guard did not see, and what it committed stands): the failure is
   * then no longer the work's to retry, since a retry would find the fence and skip the rest.
   */
  async abandon(): Promise<ForeignTransactionError | undefined> {
    if (this.#ended) return undefined;
    this.#end();
    const client = this.#client;
    const status = client.getTransactionStatus();
    if (status === "I") {
      await rollBackAndRelease(client);
      return foreignTransaction("no transaction was open when the harness rolled back", undefined);
    }
    if (this.#xid === null) {
      // No fence was inserted, so no work ran: nothing to check.
      await rollBackAndRelease(client);
      return undefined;
    }
    if (status !== "T") {
      // Failed ('E'): nothing can be asked of it before the ROLLBACK. After it, a fence this
      // transaction inserted can only still exist if the work committed it (and began anew): one
      // more round trip, on the failure path only.
      try {
        await client.query("ROLLBACK");
        const { rows } = await client.query<{ committed: boolean }>(FENCES_COMMITTED_BY, [
          this.#consumer,
          this.#jobIds,
          this.#xid,
        ]);
        client.release();
        return rows[0]?.committed
          ? foreignTransaction("its fences were committed by the work itself", undefined)
          : undefined;
      } catch (error) {
        client.release(asError(error));
        return undefined;
      }
    }
    try {
      await client.query(`SELECT core.assert_fence_transaction('${this.#xid}'::xid8);\nROLLBACK`);
      client.release();
      return undefined;
    } catch (error) {
      await endLoan(client, error);
      const failure = commitFailure(error);
      return failure instanceof ForeignTransactionError ? failure : undefined;
    }
  }

  /**
   * Withdraws the fences of `jobIds` that this transaction inserted (core.withdraw_own_fences: no
   * other fence can be touched), so it can commit without them: their jobs were not reached.
   */
  async withdraw(jobIds: readonly string[]): Promise<void> {
    if (jobIds.length === 0) return;
    const { rows } = await this.#client.query<{ n: number }>(
      "SELECT core.withdraw_own_fences($1, $2::text[]) AS n",
      [this.#consumer, jobIds],
    );
    // Each was inserted by this transaction; fewer withdrawn means the transaction is not what
    // the harness thinks, and it must not commit.
    if (rows[0]?.n !== jobIds.length)
      throw new UnexpectedDatabaseAnswerError(`withdrew ${rows[0]?.n} of ${jobIds.length} fences`);
  }

  /**
   * The invocation's time ran out with the work still running: closes the guard and destroys the
   * connection, so the server rolls the transaction back and nothing the work sends after this
   * point reaches it. Never commits, never waits. A no-op once the transaction has ended.
   */
  interrupt(): void {
    if (this.#ended) return;
    this.#end();
    this.#client.release(new InvocationDeadlineError("the invocation's time ran out during the work"));
  }

  #end(): void {
    if (this.#ended) throw new RangeError("the fence transaction has already ended");
    this.#ended = true;
    this.#closeGuard();
  }
}

function foreignTransaction(detail: string, cause: unknown): ForeignTransactionError {
  return new ForeignTransactionError(
    `the work ended the fence's transaction (${detail}); what it committed stands`,
    cause === undefined ? undefined : { cause },
  );
}

/** What a failed commit (or checked rollback) means to the record. */
function commitFailure(error: unknown): unknown {
  const code = (error as { code?: unknown }).code;
  if (code === FOREIGN_TRANSACTION_SQLSTATE) {
    return foreignTransaction("the transaction open at its end is another one", error);
  }
  if (code === IN_FAILED_TRANSACTION) return new TransactionRolledBackError("ROLLBACK");
  return error;
}

/**
 * Ends the loan after an error: a server's answer (an error with an SQLSTATE) leaves the
 * connection usable once rolled back; anything else (a broken socket, a timeout) leaves its
 * state unknown, so it is destroyed.
 */
async function endLoan(client: pg.PoolClient, error: unknown): Promise<void> {
  if (error instanceof pg.DatabaseError) {
    await rollBackAndRelease(client);
  } else {
    client.release(asError(error));
  }
}

async function rollBackAndRelease(client: pg.PoolClient): Promise<void> {
  try {
    await client.query("ROLLBACK");
    client.release();
  } catch (rollbackError) {
    client.release(asError(rollbackError));
  }
}

/** `value` as an Error, for APIs that take one. */
export function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
