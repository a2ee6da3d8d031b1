/**
 * The statements of idempotency keys (migration 0028): claim a key for a request, read the row a
 * claim found, record the response on a claim, release a claim, and the cleanup's batch. Each
 * function is one statement; a claim is held by its `claim` id, so a process whose claim was taken
 * over can neither record nor release the new holder's.
 */
import type { Queryable } from "../queryable.ts";

/** Who uses a key for what. */
export interface KeyedRequest {
  /** The caller (the token's `sub`): a key is the caller's own. */
  readonly actor: string;
  readonly key: string;
  /** The route's operationId. */
  readonly operation: string;
  /** SHA-256 of the request (method, path, validated body). */
  readonly digest: Buffer;
}

/**
 * Claims `request.key` for the request: a new row, or one taken over because it expired (any request
 * may then use the key) or because it is an unanswered claim of this same request older than
 * `staleAfterSeconds` (its process died). Returns the claim's id, or undefined when a live row
 * stands (read it to learn why).
 */
export async function claimIdempotencyKey(
  db: Queryable,
  request: KeyedRequest,
  staleAfterSeconds: number,
): Promise<string | undefined> {
  const { rows } = await db.query<{ claim: string }>(
    `INSERT INTO core.idempotency_keys AS k (actor, key, operation, request_digest)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (actor, key) DO UPDATE
        SET operation = EXCLUDED.operation, request_digest = EXCLUDED.request_digest,
            claim = DEFAULT, created_at = DEFAULT, expires_at = DEFAULT,
            response_status = NULL, response_body = NULL, completed_at = NULL
      WHERE k.expires_at <= now()
         OR (k.response_status IS NULL AND k.request_digest = EXCLUDED.request_digest
             AND k.created_at <= now() - make_interval(secs => $5))
     RETURNING claim`,
    [request.actor, request.key, request.operation, request.digest, staleAfterSeconds],
  );
  return rows[0]?.claim;
}

/** A key's row as a repeat finds it. */
export interface IdempotencyKeyRow {
  readonly operation: string;
  readonly request_digest: Buffer;
  /** Null while the first request runs. */
  readonly response_status: number | null;
  /** The response body as first sent (JSON text). */
  readonly response_body: string | null;
  /** Still within its 24 hours. */
  readonly live: boolean;
  /** Unanswered for longer than the stale limit: its process is taken to have died. */
  readonly stale: boolean;
}

export async function readIdempotencyKey(
  db: Queryable,
  actor: string,
  key: string,
  staleAfterSeconds: number,
): Promise<IdempotencyKeyRow | undefined> {
  const { rows } = await db.query<IdempotencyKeyRow>(
    `SELECT operation, request_digest, response_status, response_body::text AS response_body,
            expires_at > now() AS live,
            response_status IS NULL AND created_at <= now() - make_interval(secs => $3) AS stale
       FROM core.idempotency_keys WHERE actor = $1 AND key = $2`,
    [actor, key, staleAfterSeconds],
  );
  return rows[0];
}

/** Records the successful response on the claim; false when the claim is no longer this one's. */
export async function completeIdempotencyKey(
  db: Queryable,
  actor: string,
  key: string,
  claim: string,
  response: { readonly status: number; readonly body: string },
): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE core.idempotency_keys
        SET response_status = $4, response_body = $5::json, completed_at = now()
      WHERE actor = $1 AND key = $2 AND claim = $3 AND response_status IS NULL`,
    [actor, key, claim, response.status, response.body],
  );
  return rowCount === 1;
}

/** Deletes an unanswered claim (its request failed), so a retry is evaluated afresh. */
export async function releaseIdempotencyKey(
  db: Queryable,
  actor: string,
  key: string,
  claim: string,
): Promise<void> {
  await db.query(
    "DELETE FROM core.idempotency_keys WHERE actor = $1 AND key = $2 AND claim = $3 AND response_status IS NULL",
    [actor, key, claim],
  );
}

/** Deletes up to `batchSize` expired keys through the cleanup's function; returns how many. */
export async function deleteExpiredIdempotencyKeys(db: Queryable, batchSize: number): Promise<number> {
  const { rows } = await db.query<{ deleted: number }>(
    "SELECT core.delete_expired_idempotency_keys($1) AS deleted",
    [batchSize],
  );
  return rows[0]?.deleted ?? 0;
}
