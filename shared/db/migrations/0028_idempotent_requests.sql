-- Idempotent requests to the ops API (issue 34, docs/api.md "Idempotency-Key").
--
-- 1. One running bulk operation per kind and filter. Ten clients that start the same bulk replay at
--    once used to make ten audited operations racing over one set of rows. A start whose kind and
--    filter (as validated and stored) match a running operation is now refused by a partial unique
--    index, so the refusal holds however the starts interleave: the second insert waits for the
--    first to commit, then fails on the index, and the API answers 409 naming the running one.
--
--    The index holds a digest of the filter, not the filter: a filter's text can be kilobytes and a
--    btree entry must stay small. The digest is a stored generated column, so the database computes
--    it and nobody writes it. It hashes jsonb's text form, which is the same for the same filter
--    whatever order its keys were sent in. (sha256 takes bytea and convert_to is not immutable; the
--    text's bytes are read through decode(..., 'escape') with every backslash doubled, which gives
--    back exactly the text's bytes.)
ALTER TABLE core.bulk_operations
  ADD COLUMN filter_digest bytea GENERATED ALWAYS AS (
    sha256(decode(replace(filter::text, '\', '\\'), 'escape'))
  ) STORED;

COMMENT ON COLUMN core.bulk_operations.filter_digest IS
  'SHA-256 of the filter''s jsonb text (key order normalised), computed by the database: at most one running operation per kind and digest.';

-- A database that already holds such duplicates keeps the oldest running; the later ones are
-- cancelled, since they walk the same rows. Rows they had not reached yet stay pending review.
UPDATE core.bulk_operations AS o
   SET status = 'cancelled', cancelled_by = 'jobfence migration 0028 (a duplicate of an older running operation)',
       finished_at = now()
 WHERE o.status = 'running'
   AND EXISTS (SELECT 1 FROM core.bulk_operations AS e
                WHERE e.status = 'running' AND e.kind = o.kind AND e.filter_digest = o.filter_digest
                  AND (e.submitted_at, e.id) < (o.submitted_at, o.id));

CREATE UNIQUE INDEX bulk_operations_one_running_per_filter
  ON core.bulk_operations (kind, filter_digest) WHERE status = 'running';

-- 2. Idempotency keys: what a request sent with an `Idempotency-Key` header asked, and, once it
--    succeeded, what it was answered. A repeat of the same request under the same key by the same
--    caller gets that answer again and does nothing; the same key for another request is refused.
--
--    A key is the caller's: (actor, key), where actor is the token's `sub`, so two callers never
--    share one. The first request claims the row (no response yet), runs, and then records its
--    response on the claim; a request that fails deletes its claim, so a retry is evaluated afresh.
--    A claim whose process died is never answered: after the API's timeout, a repeat of the same
--    request takes it over (a new `claim` id, so the late process can neither record nor release
--    it). A row expires 24 hours after it was claimed; an expired key is free for any request, and
--    the cleanup (core.delete_expired_idempotency_keys, run by jobfence_cleanup) deletes the row.
CREATE TABLE core.idempotency_keys (
  actor           text        NOT NULL,
  key             text        NOT NULL,
  -- The route the key was used on (its operationId), for the refusal's words.
  operation       text        NOT NULL,
  -- SHA-256 of the request: method, path and validated body.
  request_digest  bytea       NOT NULL,
  -- The holder of the row: replaced when an abandoned claim is taken over.
  claim           uuid        NOT NULL DEFAULT gen_random_uuid(),
  created_at      timestamptz NOT NULL DEFAULT now(),
  expires_at      timestamptz NOT NULL DEFAULT now() + interval '24 hours',
  -- The successful response, once recorded: its status and its body as sent (JSON text, exactly).
  response_status smallint,
  response_body   json,
  completed_at    timestamptz,
  CONSTRAINT idempotency_keys_pkey PRIMARY KEY (actor, key),
  -- 1–255 visible ASCII characters, as the API validates the header.
  CONSTRAINT idempotency_keys_key_visible_ascii CHECK ((key COLLATE "C") ~ '^[!-~]{1,255}$'),
  -- The token's sub, as the API accepts it as an actor.
  CONSTRAINT idempotency_keys_actor CHECK (
    char_length(actor) BETWEEN 1 AND 255 AND (actor COLLATE "C") ~ '[^[:space:]]'),
  CONSTRAINT idempotency_keys_operation CHECK ((operation COLLATE "C") ~ '^[A-Za-z]{1,64}$'),
  CONSTRAINT idempotency_keys_digest_size CHECK (octet_length(request_digest) = 32),
  CONSTRAINT idempotency_keys_lifetime CHECK (expires_at = created_at + interval '24 hours'),
  -- A response is recorded whole or not at all, and only a successful one is kept.
  CONSTRAINT idempotency_keys_response_whole CHECK (
    (response_status IS NULL) = (response_body IS NULL)
    AND (response_status IS NULL) = (completed_at IS NULL)),
  CONSTRAINT idempotency_keys_response_success CHECK (response_status BETWEEN 200 AND 299),
  -- Lambda answers at most 6 MB; nothing larger is ever a response.
  CONSTRAINT idempotency_keys_response_size CHECK (octet_length(response_body::text) <= 6291456),
  CONSTRAINT idempotency_keys_completed_after_claim CHECK (completed_at >= created_at)
);

-- The cleanup takes rows in expiry order.
CREATE INDEX idempotency_keys_expires_at_idx ON core.idempotency_keys (expires_at);

COMMENT ON TABLE core.idempotency_keys IS
  'Idempotency-Key headers of the ops API by caller: the request each key was first used for and, once it succeeded, its response, answered again to a repeat. Expires 24 h after the claim; deleted by core.delete_expired_idempotency_keys.';

-- Only the API reads and writes keys: it claims (insert, or take over an expired or abandoned row),
-- records a response on its own claim, and deletes its claim when the request fails. Consumers and
-- the cleanup role have no right on the table; the cleanup deletes expired rows through its function.
REVOKE ALL ON core.idempotency_keys FROM PUBLIC;
GRANT SELECT, DELETE ON core.idempotency_keys TO jobfence_ops;
GRANT INSERT (actor, key, operation, request_digest) ON core.idempotency_keys TO jobfence_ops;
GRANT UPDATE (operation, request_digest, claim, created_at, expires_at, response_status, response_body,
              completed_at)
  ON core.idempotency_keys TO jobfence_ops;

-- Deletes up to `batch_size` expired keys; returns how many. SKIP LOCKED: a key being taken over
-- right now is left to that request, and two cleanups divide the rows.
CREATE FUNCTION core.delete_expired_idempotency_keys(batch_size integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  deleted integer;
BEGIN
  IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
    RAISE EXCEPTION 'batch_size must be 1–100000, got %', batch_size USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM core.idempotency_keys AS k
   WHERE (k.actor, k.key) IN (SELECT e.actor, e.key FROM core.idempotency_keys AS e
                               WHERE e.expires_at < now()
                               ORDER BY e.expires_at
                               LIMIT batch_size
                                 FOR UPDATE SKIP LOCKED)
     -- Re-checked on the row deleted: a key claimed afresh since it was picked is live again.
     AND k.expires_at < now();
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;

REVOKE ALL ON FUNCTION core.delete_expired_idempotency_keys(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.delete_expired_idempotency_keys(integer) TO jobfence_cleanup;
