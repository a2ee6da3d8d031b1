-- Attempts that mean attempts (SPEC §4).
--
-- SQS's ApproximateReceiveCount counts deliveries, and many deliveries run nothing: a FIFO record
-- held back behind its failed head, a record the invocation's time budget left unstarted, the
-- batch-mates of a record that crashed its invocation, a delivery that waited on another's fence
-- lock. An attempt is a run of the work that failed, so the harness counts those itself, here: one
-- row per SQS message that has failed or been redelivered, written in its own short statement on
-- the failure and redelivery paths only. A first delivery that succeeds never touches this table.
--
-- `started` is the in-flight marker: a redelivery sets it to its receive count before its work
-- runs, and every outcome the harness records clears it. A marker still set when a later delivery
-- of the message arrives means the delivery that set it ended without an outcome (the invocation
-- timed out, crashed or ran out of memory with this record in flight): an interruption.
CREATE TABLE core.message_attempts (
  consumer      text        NOT NULL,
  message_id    text        NOT NULL,
  job_id        text        NOT NULL,
  failures      integer     NOT NULL DEFAULT 0,
  interruptions integer     NOT NULL DEFAULT 0,
  started       integer,
  history       jsonb       NOT NULL DEFAULT '[]',
  updated_at    timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT message_attempts_pkey PRIMARY KEY (consumer, message_id),
  CONSTRAINT message_attempts_consumer_not_blank
    CHECK ((consumer COLLATE "C") ~ '[^[:space:]]' AND char_length(consumer) <= 128),
  CONSTRAINT message_attempts_message_id_length CHECK (char_length(message_id) BETWEEN 1 AND 255),
  CONSTRAINT message_attempts_job_id_length CHECK (char_length(job_id) BETWEEN 1 AND 255),
  CONSTRAINT message_attempts_failures_not_negative CHECK (failures >= 0),
  CONSTRAINT message_attempts_interruptions_not_negative CHECK (interruptions >= 0),
  CONSTRAINT message_attempts_started_positive CHECK (started >= 1),
  -- The bound the writers keep (shared/db/queries/message-attempts.ts drops the oldest entry).
  CONSTRAINT message_attempts_history_bounded
    CHECK (jsonb_typeof(history) = 'array' AND jsonb_array_length(history) <= 20)
);

COMMENT ON TABLE core.message_attempts IS
  'Per SQS message: failed runs of its work, interruptions and the bounded error history. Written only on failure and redelivery paths.';
COMMENT ON COLUMN core.message_attempts.started IS
  'In-flight marker: the receive count of the redelivery whose work started and has not reported an outcome.';

-- A row is needed only while its message can still be delivered: SQS keeps a message at most 14
-- days, so a row untouched for longer can go. The TTL cleanup deletes those through a function
-- (as it deletes fences), in bounded batches; it has no grant on the table itself.
CREATE INDEX message_attempts_updated_idx ON core.message_attempts (updated_at);

GRANT SELECT, INSERT, UPDATE ON core.message_attempts TO jobfence_consumer;

CREATE FUNCTION core.delete_stale_attempts(batch_size integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
  deleted integer;
BEGIN
  IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
    RAISE EXCEPTION 'batch_size must be 1–100000, got %', batch_size USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM core.message_attempts
   WHERE ctid = ANY (ARRAY(
           SELECT ctid FROM core.message_attempts
            WHERE updated_at < now() - interval '14 days'
            ORDER BY updated_at
            LIMIT batch_size
              FOR UPDATE SKIP LOCKED))
     AND updated_at < now() - interval '14 days';
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;

REVOKE ALL ON FUNCTION core.delete_stale_attempts(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.delete_stale_attempts(integer) TO jobfence_cleanup;

-- The dead letter carries the history of the attempts that led to it, and a kind of its own for a
-- message whose deliveries kept ending without an outcome.
ALTER TABLE core.dead_letters
  ADD COLUMN attempt_history jsonb NOT NULL DEFAULT '[]',
  ADD CONSTRAINT dead_letters_attempt_history_array CHECK (jsonb_typeof(attempt_history) = 'array'),
  DROP CONSTRAINT dead_letters_error_kind_known,
  ADD CONSTRAINT dead_letters_error_kind_known
    CHECK (error_kind IN ('poison', 'hard', 'exhausted', 'unrecorded', 'conflict', 'interrupted'));

COMMENT ON COLUMN core.dead_letters.attempt_history IS
  'The failed runs and interruptions before the dead letter, oldest first: {attempt, at, receive_count, kind, error: {name, message}}.';

-- Batch-commit mode inserts every record's fence at BEGIN. When the invocation's time runs short
-- before some records' work could start, the batch commits what ran and withdraws the fences of
-- the jobs it did not reach. A transaction may delete only the fences it inserted itself (their
-- xmin is its own id), so no committed fence, and no other transaction's, can be withdrawn.
CREATE FUNCTION core.withdraw_own_fences(consumer text, job_ids text[]) RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
  WITH withdrawn AS (
    DELETE FROM core.processed_jobs AS f
     WHERE f.consumer = withdraw_own_fences.consumer
       AND f.job_id = ANY (withdraw_own_fences.job_ids)
       AND f.xmin = xid(pg_current_xact_id())
    RETURNING 1)
  SELECT count(*)::integer FROM withdrawn
$$;

REVOKE ALL ON FUNCTION core.withdraw_own_fences(text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.withdraw_own_fences(text, text[]) TO jobfence_consumer;
