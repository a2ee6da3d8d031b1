/**
 * Reading what a consumer under test left in the database, as the migrator: its fences, its dead
 * letters, and anything in its own tables. Reads only, and on a connection of their own, so an
 * assertion never runs with (or is limited by) the consumer's privileges.
 */
import type pg from "pg";
import { parseJsonExact } from "../shared/db/exact-json.ts";
import { JOB_CLAIM } from "../shared/db/queries/job-steps.ts";
import type { DeadLetterStatus } from "../shared/dead-letters/status.ts";
import { stepKey } from "../shared/envelope/step-key.ts";
import type { ErrorKind } from "../shared/errors/error-kind.ts";
import type { LastError } from "../shared/errors/last-error.ts";

/** A job's fence: the proof its work committed (core.processed_jobs). */
export interface FenceRow {
  readonly jobId: string;
  readonly consumer: string;
  readonly tenantId: string;
  readonly processedAt: Date;
  readonly expiresAt: Date;
  /**
   * The job's fingerprint in hex, comparable with `fingerprintHex(jobFingerprint(tenant, payload))`;
   * null on fences written before fingerprints were kept.
   */
  readonly fingerprint: string | null;
}

/** A step a job recorded (core.job_steps): a call outside the database that happened. */
export interface StepRow {
  readonly step: string;
  readonly position: number;
  /** The idempotency key its provider was given. */
  readonly key: string;
  /** The result, as the step's schema accepted it; null while none was recorded. */
  readonly result: unknown;
  /** When it was (first) called. */
  readonly calledAt: Date;
  /** When its result was recorded; null: called, its answer never recorded. */
  readonly recordedAt: Date | null;
}

/** A dead letter of the consumer (core.dead_letters), the fields a test asserts on. */
export interface DeadLetterRow {
  readonly id: string;
  readonly jobId: string;
  readonly tenantId: string | null;
  readonly correlationId: string;
  readonly kind: ErrorKind;
  readonly status: DeadLetterStatus;
  /** The attempts it records, at least 1 (a poison message's one delivery counts as one). */
  readonly attempts: number;
  /** The last error: its class and message (and a trimmed stack). */
  readonly error: LastError;
  /** The envelope as received, when the body was a JSON object; null otherwise. */
  readonly envelope: unknown;
  /** The queue it came from (and a replay would go to). */
  readonly queue: string;
  readonly createdAt: Date;
}

/** Which dead letters to read. */
export interface DeadLetterFilter {
  readonly jobId?: string;
  readonly kind?: ErrorKind;
  readonly status?: DeadLetterStatus;
}

/** Readers over one consumer's rows. */
export class ConsumerReaders {
  readonly #pool: pg.Pool;
  readonly #consumer: string;

  /** @param pool connected as the migrator (or any role that may read everything) */
  constructor(pool: pg.Pool, consumer: string) {
    this.#pool = pool;
    this.#consumer = consumer;
  }

  /** The consumer's fence of `jobId`, or undefined when the job was never applied. */
  async fence(jobId: string): Promise<FenceRow | undefined> {
    const { rows } = await this.#pool.query<FenceRow>(
      `SELECT p.job_id AS "jobId", c.consumer, p.tenant_id AS "tenantId", p.processed_at AS "processedAt",
              p.expires_at AS "expiresAt", replace(p.fingerprint::text, '-', '') AS fingerprint
         FROM core.consumer_roles AS c JOIN core.processed_jobs AS p ON p.consumer_id = c.id
        WHERE c.consumer = $1 AND p.job_id = $2`,
      [this.#consumer, jobId],
    );
    return rows[0];
  }

  /** The steps job `jobId` recorded, in order. */
  async steps(jobId: string): Promise<StepRow[]> {
    const { rows } = await this.#pool.query<Omit<StepRow, "key" | "result"> & { result: string | null }>(
      `SELECT s.step, s.position, s.result::text AS result, s.called_at AS "calledAt", s.recorded_at AS "recordedAt"
         FROM core.consumer_roles AS c JOIN core.job_steps AS s ON s.consumer_id = c.id
        WHERE c.consumer = $1 AND s.job_id = $2 AND s.step <> '${JOB_CLAIM}'
        ORDER BY s.position, s.called_at`,
      [this.#consumer, jobId],
    );
    return rows.map((row) => ({
      ...row,
      key: stepKey(this.#consumer, jobId, row.step),
      result: row.result === null ? null : parseJsonExact(row.result),
    }));
  }

  /** The consumer's dead letters matching `filter`, oldest first. */
  async deadLetters(filter: DeadLetterFilter = {}): Promise<DeadLetterRow[]> {
    const { rows } = await this.#pool.query<DeadLetterRow>(
      `SELECT id::text, job_id AS "jobId", tenant_id AS "tenantId", correlation_id AS "correlationId",
              error_kind AS kind, status, attempts, last_error AS error, payload AS envelope, queue,
              created_at AS "createdAt"
         FROM core.dead_letters
        WHERE consumer = $1
          AND ($2::text IS NULL OR job_id = $2)
          AND ($3::text IS NULL OR error_kind = $3)
          AND ($4::text IS NULL OR status = $4)
        ORDER BY created_at, id`,
      [this.#consumer, filter.jobId ?? null, filter.kind ?? null, filter.status ?? null],
    );
    return rows;
  }

  /** Runs `sql` as the migrator and returns its rows: for the effects in the consumer's own tables. */
  async query<R extends object = Record<string, unknown>>(
    sql: string,
    params: readonly unknown[] = [],
  ): Promise<R[]> {
    const { rows } = await this.#pool.query<R>(sql, [...params]);
    return rows;
  }
}
