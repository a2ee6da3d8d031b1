/** Row builders for tests that exercise the schema directly. */
import { randomUUID } from "node:crypto";
import type pg from "pg";

/** Column values of a dead letter; every field has a plausible default. */
export interface DeadLetterValues {
  job_id: string;
  consumer: string;
  queue: string;
  tenant_id: string | null;
  payload: unknown;
  message_attributes: unknown;
  attempts: number;
  error_kind: string;
  last_error: unknown;
  status: string;
  correlation_id: string;
}

/** A valid pending dead letter, with `overrides` applied. */
export function deadLetter(overrides: Partial<DeadLetterValues> = {}): DeadLetterValues {
  const jobId = overrides.job_id ?? `job-${randomUUID()}`;
  return {
    job_id: jobId,
    consumer: "award-points",
    queue: "https://sqs.eu-west-1.amazonaws.com/123456789012/award-points",
    tenant_id: "t_42",
    payload: { job_id: jobId, tenant_id: "t_42", payload: { user_id: "u1", points: 5 } },
    message_attributes: {},
    attempts: 5,
    error_kind: "exhausted",
    last_error: { class: "Error", message: "connection reset" },
    status: "pending_review",
    correlation_id: `corr-${jobId}`,
    ...overrides,
  };
}

/** Inserts a dead letter and returns its id. */
export async function insertDeadLetter(
  client: pg.ClientBase,
  overrides: Partial<DeadLetterValues> = {},
): Promise<string> {
  const v = deadLetter(overrides);
  const { rows } = await client.query<{ id: string }>(
    `INSERT INTO core.dead_letters
       (job_id, consumer, queue, tenant_id, payload, message_attributes, attempts, error_kind, last_error,
        status, correlation_id, body_form, body)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'text', $12)
     RETURNING id`,
    [
      v.job_id,
      v.consumer,
      v.queue,
      v.tenant_id,
      JSON.stringify(v.payload),
      JSON.stringify(v.message_attributes),
      v.attempts,
      v.error_kind,
      JSON.stringify(v.last_error),
      v.status,
      v.correlation_id,
      JSON.stringify(v.payload),
    ],
  );
  return (rows[0] as { id: string }).id;
}

/**
 * Registers `consumers` that are not yet (core.ensure_consumer_role, as migrating a consumer's set
 * does): a fence names its consumer by the registry's id (migration 0016).
 */
export async function registerConsumers(client: pg.ClientBase, consumers: readonly string[]): Promise<void> {
  await client.query(
    `SELECT core.ensure_consumer_role(n) FROM unnest($1::text[]) AS n
      WHERE NOT EXISTS (SELECT 1 FROM core.consumer_roles AS c WHERE c.consumer = n)`,
    [consumers],
  );
}

/** Inserts a fence row for `job_id` that expires `ttlSeconds` after now (registering its consumer). */
export async function insertFence(
  client: pg.ClientBase,
  jobId: string,
  options: { consumer?: string; tenantId?: string; ttlSeconds?: number } = {},
): Promise<void> {
  const consumer = options.consumer ?? "award-points";
  await registerConsumers(client, [consumer]);
  await client.query(
    `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at)
     VALUES ($1, core.consumer_id($2), $3, now() + make_interval(secs => $4))`,
    [jobId, consumer, options.tenantId ?? "t_42", options.ttlSeconds ?? 7 * 86400],
  );
}

/** Runs `fn` in a transaction that is always rolled back, so a test leaves no trace. */
export async function inRolledBackTransaction<T>(client: pg.ClientBase, fn: () => Promise<T>): Promise<T> {
  await client.query("BEGIN");
  try {
    return await fn();
  } finally {
    await client.query("ROLLBACK");
  }
}
