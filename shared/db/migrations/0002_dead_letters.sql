-- Dead letters (SPEC §5): every poison message, hard failure, exhausted retry and message the
-- harness could never record. Append-only except the one status transition.

CREATE TABLE core.dead_letters (
  id                 uuid        NOT NULL DEFAULT gen_random_uuid(),
  job_id             text        NOT NULL,
  consumer           text        NOT NULL,
  queue              text        NOT NULL,
  tenant_id          text,
  payload            jsonb       NOT NULL,
  message_attributes jsonb       NOT NULL DEFAULT '{}'::jsonb,
  attempts           integer     NOT NULL,
  error_kind         text        NOT NULL,
  last_error         jsonb       NOT NULL,
  status             text        NOT NULL DEFAULT 'pending_review',
  discard_reason     text,
  correlation_id     text        NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now(),
  resolved_at        timestamptz,
  resolved_by        text,
  CONSTRAINT dead_letters_pkey PRIMARY KEY (id),
  CONSTRAINT dead_letters_job_id_length CHECK (char_length(job_id) BETWEEN 1 AND 255),
  CONSTRAINT dead_letters_consumer_not_blank CHECK (consumer ~ '[^[:space:]]' AND char_length(consumer) <= 128),
  CONSTRAINT dead_letters_queue_not_blank CHECK (queue ~ '[^[:space:]]'),
  CONSTRAINT dead_letters_correlation_id_not_blank CHECK (correlation_id ~ '[^[:space:]]'),
  -- Every dead letter comes from at least one receive of its message.
  CONSTRAINT dead_letters_attempts_positive CHECK (attempts >= 1),
  CONSTRAINT dead_letters_error_kind_known
    CHECK (error_kind IN ('poison', 'hard', 'exhausted', 'unrecorded')),
  CONSTRAINT dead_letters_status_known
    CHECK (status IN ('pending_review', 'replayed', 'discarded', 'superseded')),
  CONSTRAINT dead_letters_payload_object CHECK (jsonb_typeof(payload) = 'object'),
  CONSTRAINT dead_letters_message_attributes_object CHECK (jsonb_typeof(message_attributes) = 'object'),
  -- last_error is {"class": ..., "message": ..., "stack"?: ...}; the harness trims the stack, the
  -- bound here keeps one runaway error from bloating the table.
  CONSTRAINT dead_letters_last_error_shape CHECK (
    -- coalesce: a missing key makes jsonb_typeof NULL, and a NULL check passes.
    coalesce(
      jsonb_typeof(last_error) = 'object'
      AND jsonb_typeof(last_error -> 'class') = 'string'
      AND jsonb_typeof(last_error -> 'message') = 'string'
      AND octet_length(last_error::text) <= 16384,
      false
    )
  ),
  -- A row is resolved exactly when it has left pending_review, and a resolution names its actor.
  CONSTRAINT dead_letters_resolution_consistent CHECK (
    (status = 'pending_review') = (resolved_at IS NULL)
    AND (status = 'pending_review') = (resolved_by IS NULL)
  ),
  CONSTRAINT dead_letters_resolved_by_not_blank CHECK (resolved_by IS NULL OR resolved_by ~ '[^[:space:]]'),
  -- Discarding requires a reason (seed behaviour 8, AC7); no other status carries one.
  CONSTRAINT dead_letters_discard_reason_required CHECK (
    CASE WHEN status = 'discarded'
      THEN discard_reason IS NOT NULL AND discard_reason ~ '[^[:space:]]' AND char_length(discard_reason) <= 2000
      ELSE discard_reason IS NULL
    END
  )
);

COMMENT ON TABLE core.dead_letters IS
  'Failures an operator must review: poison, hard, exhausted, unrecorded. Append-only; status moves only pending_review -> replayed | discarded | superseded.';

-- At most one pending dead letter per (consumer, job_id): writing one is idempotent, so a crash
-- between the insert and the SQS ack cannot produce a second row on redelivery.
CREATE UNIQUE INDEX dead_letters_one_pending_per_job
  ON core.dead_letters (consumer, job_id)
  WHERE status = 'pending_review';

-- The list endpoint pages newest first with a keyset on (created_at, id); each filter that narrows
-- strongly gets an index with the keyset columns behind it so a page is an index range scan.
CREATE INDEX dead_letters_created_idx ON core.dead_letters (created_at, id);
CREATE INDEX dead_letters_status_created_idx ON core.dead_letters (status, created_at, id);
CREATE INDEX dead_letters_consumer_created_idx ON core.dead_letters (consumer, created_at, id);
CREATE INDEX dead_letters_tenant_created_idx ON core.dead_letters (tenant_id, created_at, id);
CREATE INDEX dead_letters_job_id_idx ON core.dead_letters (job_id);
CREATE INDEX dead_letters_correlation_id_idx ON core.dead_letters (correlation_id);
-- Stats (counts by consumer x status x error_kind) as an index-only scan.
CREATE INDEX dead_letters_stats_idx ON core.dead_letters (consumer, status, error_kind);
-- Oldest pending and the daily escalation read only the pending rows.
CREATE INDEX dead_letters_pending_created_idx ON core.dead_letters (created_at) WHERE status = 'pending_review';

-- A dead letter enters the table awaiting review; a resolved status is only reached by the
-- transition below, so every resolution has passed through pending_review.
CREATE FUNCTION core.dead_letters_guard_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status <> 'pending_review' THEN
    RAISE EXCEPTION 'a dead letter is recorded as pending_review, not %', NEW.status
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_enters_pending',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER dead_letters_guard_insert
  BEFORE INSERT ON core.dead_letters
  FOR EACH ROW EXECUTE FUNCTION core.dead_letters_guard_insert();

-- The one allowed update: pending_review -> replayed | discarded | superseded, touching nothing
-- but the status and its resolution columns. Compared as jsonb minus those columns so a column
-- added later is immutable without editing this function.
CREATE FUNCTION core.dead_letters_guard_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status <> 'pending_review' THEN
    RAISE EXCEPTION 'dead letter % is % and can no longer change', OLD.id, OLD.status
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_transition',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  IF NEW.status NOT IN ('replayed', 'discarded', 'superseded') THEN
    RAISE EXCEPTION 'dead letter % cannot move from pending_review to %', OLD.id, NEW.status
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_transition',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  IF (to_jsonb(NEW) - ARRAY['status', 'resolved_at', 'resolved_by', 'discard_reason'])
     IS DISTINCT FROM (to_jsonb(OLD) - ARRAY['status', 'resolved_at', 'resolved_by', 'discard_reason']) THEN
    RAISE EXCEPTION 'dead letter % is append-only: only status and its resolution may change', OLD.id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_append_only',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER dead_letters_guard_update
  BEFORE UPDATE ON core.dead_letters
  FOR EACH ROW EXECUTE FUNCTION core.dead_letters_guard_update();

-- Nothing deletes a dead letter, not even its owner by accident: row deletes and TRUNCATE refuse.
CREATE FUNCTION core.dead_letters_refuse_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'dead letters are append-only and cannot be deleted'
    USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_append_only',
          SCHEMA = 'core', TABLE = 'dead_letters';
END
$$;

CREATE TRIGGER dead_letters_refuse_delete
  BEFORE DELETE ON core.dead_letters
  FOR EACH ROW EXECUTE FUNCTION core.dead_letters_refuse_delete();

CREATE TRIGGER dead_letters_refuse_truncate
  BEFORE TRUNCATE ON core.dead_letters
  FOR EACH STATEMENT EXECUTE FUNCTION core.dead_letters_refuse_delete();
