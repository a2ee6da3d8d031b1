/**
 * The fence transaction (docs/design.md §3.1), the one copy both commit modes use:
 *
 *   BEGIN; mark; INSERT fence(s) … ON CONFLICT DO NOTHING -- one round trip; returns the fresh ones
 *   (SELECT the fingerprints of fences that existed)     -- only when some did: a duplicate pays this
 *   work(job, tx) …                                      -- on the guarded connection (work-transaction.ts)
 *   (INSERT the follow-ups the work sent)                -- only when it sent some: one round trip for all
 *   SELECT core.fence_commit_check(xid, scope…); COMMIT  -- one round trip: the check marks the
 *                                                           transaction for the fence's deferred
 *                                                           trigger, which refuses any other COMMIT
 *
 * When the work sent a statement, the check also resets the session before the COMMIT (settings,
 * role, LISTEN, temporary tables, session advisory locks, cursors WITH HOLD, prepared statements:
 * core.reset_fence_session), and a ROLLBACK is followed by the same reset in its message, so nothing
 * the work changed of the pooled connection reaches the next job. Every path ends the connection's
 * loan exactly once: released after a message that ended the transaction and reset the session,
 * destroyed when that failed for a reason other than the server's answer (the connection's state is
 * then unknown, and the pool must not hand it to the next record).
 */
import { performance } from "node:perf_hooks";
import pg from "pg";
import { connectBefore } from "../db/connect-before.ts";
import {
  beginWithFences,
  type FenceSet,
  type FencesInserted,
  fenceCommit,
  fenceFingerprints,
} from "../db/queries/begin-with-fences.ts";
import { insertFollowUps, type StagedFollowUp } from "../db/queries/insert-follow-ups.ts";
import { UnexpectedDatabaseAnswerError } from "../errors/database.ts";
import { InvocationDeadlineError } from "../errors/job.ts";
import type { FollowUpRefusedError } from "../errors/sending.ts";
import {
  FenceLockTimeoutError,
  ForeignTransactionError,
  TransactionControlError,
  TransactionRolledBackError,
} from "../errors/transaction.ts";
import { faultHook } from "../fault-points.ts";
import { commitFailure } from "./commit-failure.ts";
import {
  AFTER_ROLLBACK_RESET,
  endLoan,
  forgetPreparedStatements,
  rollBackAndRelease,
} from "./connection-loan.ts";
import { guardTransaction, TRANSACTION_ENDED, type WorkGuard, type WorkQueries } from "./work-transaction.ts";

/** SQLSTATE of a lock wait that ran into lock_timeout. */
const LOCK_NOT_AVAILABLE = "55P03";

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
  readonly #guard: WorkGuard;
  /** The transaction's id, when it inserted a fence (only then can work run in it), and its scope. */
  readonly #inserted: Pick<FencesInserted, "xid" | "scope" | "scopeSql">;
  /**
   * The fences this transaction inserted and has not withdrawn: the COMMIT check requires each
   * still there, so a work that withdrew its own fence (core.withdraw_own_fences) cannot commit.
   */
  readonly #fresh: Set<string>;
  readonly #jobIds: string[];
  readonly #consumer: string;
  readonly #startedAt: number;
  readonly #followUps: StagedFollowUp[] = [];
  #refusal: FollowUpRefusedError | undefined;
  #ended = false;

  private constructor(
    client: pg.PoolClient,
    consumer: string,
    inserted: Pick<FencesInserted, "xid" | "scope" | "fresh" | "scopeSql">,
    jobIds: string[],
    startedAt: number,
  ) {
    this.#guard = guardTransaction(client);
    this.tx = this.#guard.tx;
    this.#client = client;
    this.#inserted = inserted;
    this.#fresh = new Set(inserted.fresh);
    this.#jobIds = jobIds;
    this.#consumer = consumer;
    this.#startedAt = startedAt;
  }

  /**
   * Takes a connection, begins and inserts the fences. Throws (with the connection returned or
   * destroyed) when the database refuses or cannot be reached, including a lock timeout behind a
   * concurrent delivery of the same job. The wait for a connection ends when `signal` aborts
   * (InvocationDeadlineError, nothing opened: ../db/connect-before.ts).
   */
  static async open(pool: pg.Pool, fences: FenceSet, signal?: AbortSignal): Promise<OpenedFences> {
    const jobIds = [...new Set(fences.jobs.map((j) => j.jobId))];
    if (faultHook) await faultHook("fence:before", { jobIds });
    const client = await connectBefore(pool, signal);
    const startedAt = performance.now();
    try {
      const inserted = await beginWithFences(client, fences);
      const { fresh, xid } = inserted;
      // Spliced into the ROLLBACK's SQL below: it must be the digits PostgreSQL sent.
      if (xid !== null && !/^\d+$/.test(xid)) throw new RangeError(`not a transaction id: ${xid}`);
      const others = jobIds.filter((id) => !fresh.has(id));
      const existing =
        others.length > 0 ? await fenceFingerprints(client, fences.consumer, others) : new Map();
      if (faultHook) await faultHook("fence:after-insert", { jobIds });
      return {
        transaction: new FenceTransaction(client, fences.consumer, inserted, jobIds, startedAt),
        fresh,
        existing,
      };
    } catch (error) {
      await endLoan(client, error, false);
      // The insert waited lock_timeout behind a concurrent delivery of one of these jobs.
      if (error instanceof pg.DatabaseError && error.code === LOCK_NOT_AVAILABLE)
        throw new FenceLockTimeoutError(jobIds, error);
      throw error;
    }
  }

  /**
   * Commits, after checking that the open transaction is still the one that inserted the fences
   * and that its role and search_path are those it began with, then resets the session; returns
   * the milliseconds from BEGIN to COMMIT. Throws TransactionRolledBackError when the server rolled
   * back instead (the work let a statement fail), TransactionControlError when the work ended the
   * transaction or changed its scope, ForeignTransactionError when the open transaction is another
   * one, or the connection's error (the outcome is then unknown; the fence makes a redelivery safe
   * either way).
   */
  async commit(): Promise<number> {
    const reset = this.#guard.used();
    this.#end();
    if (faultHook) await faultHook("fence:after-work", { jobIds: this.#jobIds });
    const ended = this.endedByWork;
    if (ended) {
      // Rolled back already: nothing to commit, and nothing of it may be written now (the
      // follow-ups would go in by themselves).
      await rollBackAndRelease(this.#client, reset);
      throw ended;
    }
    let results: pg.QueryResult[];
    try {
      // The work's follow-ups go in just before the COMMIT, all in one statement; a work that sent
      // none costs nothing here.
      if (this.#followUps.length > 0) await insertFollowUps(this.#client, this.#followUps);
      results = (await this.#client.query(
        fenceCommit({ ...this.#inserted, fresh: this.#fresh }, reset),
      )) as unknown as pg.QueryResult[];
    } catch (error) {
      const failure = commitFailure(error);
      await endLoan(this.#client, error, reset);
      throw failure;
    }
    const command = Array.isArray(results) ? results[1]?.command : undefined;
    if (reset) forgetPreparedStatements(this.#client);
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
    return this.#guard.pending();
  }

  /**
   * Why the transaction has ended before the harness ended it, if it has: a statement of the work
   * ended it (its own ROLLBACK, or a COMMIT the server refused), and the server rolled it back,
   * fence and work. Read from the client's state, no round trip. Nothing of it can commit now.
   */
  get endedByWork(): TransactionControlError | undefined {
    const ended = this.#guard.endedBy();
    if (ended || this.#client.getTransactionStatus() !== "I") return ended;
    return new TransactionControlError("", "the fence's transaction ended during the work");
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
   * Rolls back, resets the session and returns the connection (destroys it if that fails). Safe to
   * call twice. Returns a ForeignTransactionError when the transaction it rolls back is not the
   * fence's (something ended it and began another behind the work's `tx`): the failure is then not
   * the work's to retry.
   */
  async abandon(): Promise<ForeignTransactionError | undefined> {
    if (this.#ended) return undefined;
    const reset = this.#guard.used();
    this.#end();
    const client = this.#client;
    // No fence inserted (no work ran), or the transaction is no longer open (the work ended it and
    // the server rolled it back; the status pg read last can lag the error that ended it) or failed
    // ('E': nothing can be asked of it): no check to make. The fence's deferred trigger let no
    // COMMIT but the harness's through, so nothing of it stands.
    if (this.#inserted.xid === null || this.#guard.endedBy() || client.getTransactionStatus() !== "T") {
      await rollBackAndRelease(client, reset);
      return undefined;
    }
    try {
      await client.query(
        `SELECT core.assert_fence_transaction('${this.#inserted.xid}'::xid8);\nROLLBACK${reset ? AFTER_ROLLBACK_RESET : ""}`,
      );
      if (reset) forgetPreparedStatements(client);
      client.release();
      return undefined;
    } catch (error) {
      await endLoan(client, error, reset);
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
    for (const id of jobIds) this.#fresh.delete(id);
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
    this.#guard.close();
  }
}
