-- Bulk operations (SPEC §6): replay or discard by filter as durable, paced, audited jobs the
-- server runs, instead of a client loop on someone's laptop.
--
-- An operation is created from a plan: its filter, and its set written out row by row
-- (core.bulk_operation_items) when it starts, so it acts on exactly the dead letters that were
-- confirmed, never on one that failed or committed later. A worker walks the set oldest first in
-- chunks; each chunk's sends, resolutions and the operation's progress commit together, so a crash
-- repeats at most the chunk in flight (its sends are absorbed by the fence) and skips nothing.
-- Pacing is durable: after a chunk of n rows the operation is not due again for n / rate seconds.

CREATE TABLE core.bulk_operations (
  id                  uuid        NOT NULL DEFAULT gen_random_uuid(),
  kind                text        NOT NULL,
  filter              jsonb       NOT NULL,
  reason              text,
  delay_seconds       integer     NOT NULL DEFAULT 0,
  rate_per_second     real        NOT NULL,
  -- Rows in its set (core.bulk_operation_items).
  planned             bigint      NOT NULL,
  -- A digest of the plan token that confirmed it: each plan starts one operation at most.
  plan_token_digest   bytea,
  status              text        NOT NULL DEFAULT 'running',
  -- Progress: the position in the set of the last row handled, and what became of each so far.
  cursor_position     bigint      NOT NULL DEFAULT 0,
  processed           bigint      NOT NULL DEFAULT 0,
  replayed            bigint      NOT NULL DEFAULT 0,
  superseded          bigint      NOT NULL DEFAULT 0,
  discarded           bigint      NOT NULL DEFAULT 0,
  conflicts           bigint      NOT NULL DEFAULT 0,
  failed              bigint      NOT NULL DEFAULT 0,
  -- A chunk that could not run (SQS unreachable, a lock held): tried again with backoff.
  chunk_failures      integer     NOT NULL DEFAULT 0,
  last_error          text,
  next_run_at         timestamptz NOT NULL DEFAULT now(),
  submitted_by        text        NOT NULL,
  submitted_at        timestamptz NOT NULL DEFAULT now(),
  cancelled_by        text,
  finished_at         timestamptz,
  updated_at          timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT bulk_operations_pkey PRIMARY KEY (id),
  CONSTRAINT bulk_operations_kind_known CHECK (kind IN ('replay', 'discard')),
  CONSTRAINT bulk_operations_filter_object CHECK (jsonb_typeof(filter) = 'object'),
  -- A discard says why, like a single one; a replay has no reason.
  CONSTRAINT bulk_operations_reason CHECK (
    CASE WHEN kind = 'discard'
      THEN reason IS NOT NULL AND (reason COLLATE "C") ~ '[^[:space:]]' AND char_length(reason) <= 2000
      ELSE reason IS NULL
    END
  ),
  -- SQS DelaySeconds: 0–900; only a replay sends anything to delay.
  CONSTRAINT bulk_operations_delay CHECK (delay_seconds BETWEEN 0 AND 900 AND (kind = 'replay' OR delay_seconds = 0)),
  CONSTRAINT bulk_operations_rate CHECK (rate_per_second > 0 AND rate_per_second <= 1000),
  CONSTRAINT bulk_operations_planned CHECK (planned >= 1),
  CONSTRAINT bulk_operations_status_known CHECK (status IN ('running', 'completed', 'cancelled', 'failed')),
  CONSTRAINT bulk_operations_cursor CHECK (cursor_position BETWEEN 0 AND planned),
  CONSTRAINT bulk_operations_one_per_plan UNIQUE (plan_token_digest),
  CONSTRAINT bulk_operations_counts CHECK (
    processed = replayed + superseded + discarded + conflicts + failed
    AND least(replayed, superseded, discarded, conflicts, failed, chunk_failures) >= 0
  ),
  CONSTRAINT bulk_operations_submitted_by_not_blank CHECK ((submitted_by COLLATE "C") ~ '[^[:space:]]'),
  -- Finished exactly when no longer running; cancelled exactly when someone cancelled it.
  CONSTRAINT bulk_operations_finished CHECK ((status = 'running') = (finished_at IS NULL)),
  CONSTRAINT bulk_operations_cancelled_by CHECK (
    (status = 'cancelled') = (cancelled_by IS NOT NULL) AND (cancelled_by IS NULL OR (cancelled_by COLLATE "C") ~ '[^[:space:]]')
  )
);

COMMENT ON TABLE core.bulk_operations IS
  'Bulk replays and discards by filter, run in paced chunks by the bulk-operations worker; rows are never deleted, and only a running operation changes.';

-- The worker's pick: due running operations, soonest first. The list: newest first.
CREATE INDEX bulk_operations_due_idx ON core.bulk_operations (next_run_at) WHERE status = 'running';
CREATE INDEX bulk_operations_submitted_idx ON core.bulk_operations (submitted_at DESC, id DESC);

-- An operation's set, in the order it is walked ((created_at, id) of the dead letters). Written
-- once, when the operation starts; never changed.
CREATE TABLE core.bulk_operation_items (
  operation_id   uuid   NOT NULL REFERENCES core.bulk_operations (id),
  position       bigint NOT NULL,
  -- No foreign key to core.dead_letters (see core.bulk_operation_skips below).
  dead_letter_id uuid   NOT NULL,
  PRIMARY KEY (operation_id, position),
  CONSTRAINT bulk_operation_items_position CHECK (position >= 1)
);

-- What an operation did not resolve, and why: a conflict (another job applied under the id) or a
-- send SQS refused. The rows stay pending; an operator plans again for them or looks at each.
CREATE TABLE core.bulk_operation_skips (
  operation_id   uuid        NOT NULL REFERENCES core.bulk_operations (id),
  -- No foreign key to core.dead_letters: it would make TRUNCATE fail on the reference before the
  -- table's own refusal could say why; dead letters are never deleted, so the id stays valid.
  dead_letter_id uuid        NOT NULL,
  reason         text        NOT NULL,
  detail         text        NOT NULL,
  at             timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (operation_id, dead_letter_id),
  CONSTRAINT bulk_operation_skips_reason_known CHECK (reason IN ('conflict', 'send-failed')),
  CONSTRAINT bulk_operation_skips_detail_bounded CHECK (char_length(detail) <= 1000)
);

-- The operation's definition and audit never change; a finished operation never changes at all;
-- nothing deletes one.
CREATE FUNCTION core.bulk_operations_guard_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status <> 'running' THEN
    RAISE EXCEPTION 'bulk operation % is % and can no longer change', OLD.id, OLD.status
      USING ERRCODE = 'check_violation', CONSTRAINT = 'bulk_operations_transition',
            SCHEMA = 'core', TABLE = 'bulk_operations';
  END IF;
  IF (NEW.id, NEW.kind, NEW.filter, NEW.reason, NEW.delay_seconds, NEW.rate_per_second, NEW.planned,
      NEW.plan_token_digest, NEW.submitted_by, NEW.submitted_at)
     IS DISTINCT FROM
     (OLD.id, OLD.kind, OLD.filter, OLD.reason, OLD.delay_seconds, OLD.rate_per_second, OLD.planned,
      OLD.plan_token_digest, OLD.submitted_by, OLD.submitted_at) THEN
    RAISE EXCEPTION 'bulk operation %: only its progress and status may change', OLD.id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'bulk_operations_definition_fixed',
            SCHEMA = 'core', TABLE = 'bulk_operations';
  END IF;
  -- Progress only moves forward.
  IF NEW.processed < OLD.processed OR NEW.cursor_position < OLD.cursor_position THEN
    RAISE EXCEPTION 'bulk operation %: progress cannot go back', OLD.id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'bulk_operations_progress',
            SCHEMA = 'core', TABLE = 'bulk_operations';
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$$;

CREATE TRIGGER bulk_operations_guard_update
  BEFORE UPDATE ON core.bulk_operations
  FOR EACH ROW EXECUTE FUNCTION core.bulk_operations_guard_update();

CREATE FUNCTION core.bulk_operations_refuse_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'bulk operations, their sets and their skips are an audit record and cannot be changed or deleted'
    USING ERRCODE = 'check_violation', CONSTRAINT = 'bulk_operations_append_only', SCHEMA = 'core';
END
$$;

CREATE TRIGGER bulk_operations_refuse_delete
  BEFORE DELETE ON core.bulk_operations
  FOR EACH ROW EXECUTE FUNCTION core.bulk_operations_refuse_delete();
CREATE TRIGGER bulk_operations_refuse_truncate
  BEFORE TRUNCATE ON core.bulk_operations
  FOR EACH STATEMENT EXECUTE FUNCTION core.bulk_operations_refuse_delete();
CREATE TRIGGER bulk_operation_items_refuse_change
  BEFORE DELETE OR UPDATE ON core.bulk_operation_items
  FOR EACH ROW EXECUTE FUNCTION core.bulk_operations_refuse_delete();
CREATE TRIGGER bulk_operation_items_refuse_truncate
  BEFORE TRUNCATE ON core.bulk_operation_items
  FOR EACH STATEMENT EXECUTE FUNCTION core.bulk_operations_refuse_delete();
CREATE TRIGGER bulk_operation_skips_refuse_delete
  BEFORE DELETE OR UPDATE ON core.bulk_operation_skips
  FOR EACH ROW EXECUTE FUNCTION core.bulk_operations_refuse_delete();
CREATE TRIGGER bulk_operation_skips_refuse_truncate
  BEFORE TRUNCATE ON core.bulk_operation_skips
  FOR EACH STATEMENT EXECUTE FUNCTION core.bulk_operations_refuse_delete();

-- The ops role (the API and the bulk-operations worker) creates, runs and cancels operations.
GRANT SELECT ON core.bulk_operations, core.bulk_operation_items, core.bulk_operation_skips TO jobfence_ops;
GRANT INSERT (kind, filter, reason, delay_seconds, rate_per_second, planned, plan_token_digest, submitted_by)
  ON core.bulk_operations TO jobfence_ops;
GRANT UPDATE (status, cursor_position, processed, replayed, superseded, discarded, conflicts, failed,
              chunk_failures, last_error, next_run_at, cancelled_by, finished_at)
  ON core.bulk_operations TO jobfence_ops;
GRANT INSERT ON core.bulk_operation_items, core.bulk_operation_skips TO jobfence_ops;
