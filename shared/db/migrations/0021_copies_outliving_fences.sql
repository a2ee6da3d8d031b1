-- No copy of a job outlives its fence unnoticed (docs/design.md §7.2).
--
-- A fence lives `fence TTL` from when its job was applied; the TTL cleanup then deletes it (unless
-- a pending dead letter names the job). Until now the TTL was checked against the source queue's
-- retention only, but a copy of a job can wait elsewhere: in the backstop queue (14 days) and in a
-- sender's outbox (without a deadline). Such a copy found after its job's fence was cleaned was
-- recorded `unrecorded` or `undelivered`, and an operator's replay applied the job a second time.
--
-- From here:
-- * the deployment registers each consumer's fence TTL (core.register_fence_ttl), beside its
--   replay queues, so the database knows how long that consumer's fences live;
-- * an outbox row has a deadline (`send_by`, a day after it was written): the scheduled relay never
--   sends a row past it, it moves it to the dead letters instead. Every consumer's TTL is validated
--   to cover that wait, so a copy the relay sends always finds its fence if the job was applied;
-- * a dead letter recorded for a copy the harness never saw (`unrecorded`, from the backstop drain;
--   `undelivered`, from an outbox row) is `outlived` when its job has no fence and the copy was
--   first sent at least (TTL - 1 day) ago: the job may have been applied and its fence cleaned, so
--   nothing can tell a replay from a second application. The decision is taken in the insert
--   itself (a BEFORE INSERT trigger), after the job's fence is locked, so the TTL cleanup cannot
--   delete the fence between the look and the insert;
-- * a replay (single or bulk) refuses an `outlived` row unless the operator forces it with a
--   reason, which is recorded in the row's `discard_reason` beside `resolved_by` (a constraint makes
--   the reason required, so no path replays such a row silently).

-- 1. The registry: each consumer's fence TTL.
ALTER TABLE core.consumer_roles ADD COLUMN fence_ttl_seconds integer,
  ADD CONSTRAINT consumer_roles_fence_ttl_bounded
    CHECK (fence_ttl_seconds IS NULL OR fence_ttl_seconds BETWEEN 86401 AND 315360000);

COMMENT ON COLUMN core.consumer_roles.fence_ttl_seconds IS
  'The fence TTL the consumer''s harness writes (seconds); NULL: not registered, the default TTL (21 days) is assumed. Decides when a copy of its job is outlived (docs/design.md §7.2).';

-- Records `consumer`'s fence TTL, as the harness writes it (its validated JOBFENCE_FENCE_TTL_SECONDS).
-- The deployment calls it after migrating, like core.register_consumer_queues; runs with the
-- caller's rights (the migrator's), and no consumer may call it.
CREATE FUNCTION core.register_fence_ttl(consumer text, ttl_seconds integer) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF ttl_seconds IS NULL OR ttl_seconds <= 86400 OR ttl_seconds > 315360000 THEN
    RAISE EXCEPTION 'a fence TTL is more than one day (86400 s) and at most ten years, got %', ttl_seconds
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE core.consumer_roles AS c SET fence_ttl_seconds = ttl_seconds
   WHERE c.consumer = register_fence_ttl.consumer;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'consumer % has no role in this database: migrate its set first', consumer
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION core.register_fence_ttl(text, integer) FROM PUBLIC;

-- 2. The outbox's deadline. No consumer may write it (the INSERT grant of 0015 names the columns a
-- consumer writes), so every row gets the default: one day after it was written, the
-- OUTBOX_MAX_WAIT_SECONDS every fence TTL is validated against (shared/fence/ttl.ts).
ALTER TABLE core.outbox ADD COLUMN send_by timestamptz NOT NULL DEFAULT now() + interval '1 day';

COMMENT ON COLUMN core.outbox.send_by IS
  'The last moment a relay may send the row; past it the scheduled relay moves it to the dead letters instead (docs/design.md §7.2).';

-- 3. The kind.
ALTER TABLE core.dead_letters
  DROP CONSTRAINT dead_letters_error_kind_known,
  ADD CONSTRAINT dead_letters_error_kind_known
    CHECK (error_kind IN ('poison', 'hard', 'exhausted', 'unrecorded', 'conflict', 'interrupted', 'undelivered', 'outlived'));

-- A discard says why; so does a replay of an outlived row (the operator's forced override). Any
-- other resolution carries no reason.
ALTER TABLE core.dead_letters
  DROP CONSTRAINT dead_letters_discard_reason_required,
  ADD CONSTRAINT dead_letters_discard_reason_required CHECK (
    CASE WHEN status = 'discarded' OR (status = 'replayed' AND error_kind = 'outlived')
      THEN discard_reason IS NOT NULL AND (discard_reason COLLATE "C") ~ '[^[:space:]]' AND char_length(discard_reason) <= 2000
      ELSE discard_reason IS NULL
    END
  );

-- When the copy a dead letter records was first sent: what the drain recorded as the copy's earliest
-- possible first send (`first_sent_at`, ISO 8601: a FIFO backstop's SentTimestamp less the source
-- retention), else the outbox row's creation (`outbox_created_at`, written by
-- core.outbox_undelivered from the row), else SQS's SentTimestamp (milliseconds since the epoch).
-- NULL when none can be read (the row then keeps its kind, see below).
CREATE FUNCTION core.dead_letter_copy_sent_at(attributes jsonb) RETURNS timestamptz
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF jsonb_typeof(attributes -> 'first_sent_at') = 'string' THEN
    RETURN (attributes ->> 'first_sent_at')::timestamptz;
  END IF;
  IF jsonb_typeof(attributes -> 'outbox_created_at') = 'string' THEN
    RETURN (attributes ->> 'outbox_created_at')::timestamptz;
  END IF;
  IF jsonb_typeof(attributes -> 'sent_timestamp') = 'string' AND (attributes ->> 'sent_timestamp') ~ '^[0-9]{1,15}$' THEN
    RETURN to_timestamp((attributes ->> 'sent_timestamp')::bigint / 1000.0);
  END IF;
  RETURN NULL;
EXCEPTION WHEN data_exception THEN
  RETURN NULL; -- a timestamp the server cannot read: the copy's age is unknown
END
$$;

REVOKE ALL ON FUNCTION core.dead_letter_copy_sent_at(jsonb) FROM PUBLIC;

-- The run-time rule. For a copy recorded without the harness having run it (`unrecorded`,
-- `undelivered`), with the job's fence locked first (FOR KEY SHARE, as core.hold_fence: the TTL
-- cleanup skips a locked fence, and a fence it already deleted is not found):
--   fence present                                   → unchanged: the pending row holds the fence,
--                                                      a replay finds it and supersedes the row;
--   fence absent, copy_sent_at > now() - (TTL - 1 d) → unchanged: had the job been applied, by
--                                                      any copy, its fence would still exist;
--   fence absent, copy older                         → `outlived`: the job may have been applied
--                                                      and its fence cleaned.
-- A row whose copy's time cannot be read keeps its kind: the drain and the relay always record it
-- (SQS sets SentTimestamp on every message; an outbox row has its created_at), so only a row
-- written by hand lacks it, and a consumer can write its own rows as it likes anyway.
-- TTL is the consumer's registered one, else the default (21 days). The day subtracted is the TTL
-- validation's margin (TTL_MARGIN_SECONDS): copies of one job sent apart (a producer's retry), and
-- the clocks of SQS and the database, differ by less.
-- Runs with its owner's rights: an undelivered row is written by core.outbox_undelivered for the
-- target, whose fences the sender's login may not read or lock. It reads and locks only the fence of
-- the row's own (consumer, job_id); a row a consumer may not insert is refused by row-level
-- security after this trigger, so nothing of another consumer's fence is seen or kept.
CREATE FUNCTION core.dead_letters_outlived_copy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  ttl     integer;
  sent_at timestamptz;
BEGIN
  IF NEW.error_kind NOT IN ('unrecorded', 'undelivered') THEN
    RETURN NEW;
  END IF;
  PERFORM 1 FROM core.consumer_roles AS c JOIN core.processed_jobs AS p ON p.consumer_id = c.id
   WHERE c.consumer = NEW.consumer AND p.job_id = NEW.job_id
     FOR KEY SHARE OF p;
  IF FOUND THEN
    RETURN NEW;
  END IF;
  SELECT c.fence_ttl_seconds INTO ttl FROM core.consumer_roles AS c WHERE c.consumer = NEW.consumer;
  ttl := coalesce(ttl, 21 * 86400);
  sent_at := core.dead_letter_copy_sent_at(NEW.message_attributes);
  IF sent_at <= now() - make_interval(secs => greatest(ttl - 86400, 0)) THEN
    NEW.message_attributes := NEW.message_attributes || jsonb_build_object('outlived', jsonb_build_object(
      'recorded_as', NEW.error_kind,
      'copy_sent_at', sent_at,
      'fence_ttl_seconds', ttl,
      'decided_at', now()));
    NEW.error_kind := 'outlived';
  END IF;
  RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION core.dead_letters_outlived_copy() FROM PUBLIC;

CREATE TRIGGER dead_letters_outlived_copy
  BEFORE INSERT ON core.dead_letters
  FOR EACH ROW EXECUTE FUNCTION core.dead_letters_outlived_copy();

-- 4. Bulk replays: an outlived row is skipped and said so, unless the operation was started with
-- force_outlived and a reason, which then resolves each such row it replays.
ALTER TABLE core.bulk_operations ADD COLUMN force_outlived boolean NOT NULL DEFAULT false,
  DROP CONSTRAINT bulk_operations_reason,
  ADD CONSTRAINT bulk_operations_reason CHECK (
    CASE WHEN kind = 'discard' OR force_outlived
      THEN reason IS NOT NULL AND (reason COLLATE "C") ~ '[^[:space:]]' AND char_length(reason) <= 2000
      ELSE reason IS NULL
    END
  ),
  ADD CONSTRAINT bulk_operations_force_outlived_replay CHECK (NOT force_outlived OR kind = 'replay');

GRANT INSERT (force_outlived) ON core.bulk_operations TO jobfence_ops;

ALTER TABLE core.bulk_operation_skips
  DROP CONSTRAINT bulk_operation_skips_reason_known,
  ADD CONSTRAINT bulk_operation_skips_reason_known
    CHECK (reason IN ('conflict', 'send-failed', 'foreign-queue', 'unproven-follow-up', 'outlived'));

-- The scheduled relay claims its due rows through core.outbox_claim (migration 0019); it also answers
-- whether each row is past its deadline, so the relay moves such a row instead of sending it.
DROP FUNCTION core.outbox_claim(text, integer);
CREATE FUNCTION core.outbox_claim(sender text, batch_size integer)
RETURNS TABLE (target text, job_id text, parent_job_id text, tenant_id text, correlation_id text, body text,
               job_fingerprint bytea, group_id text, traceparent text, attempts integer, created_at timestamptz,
               expired boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'core.outbox_claim must be the first write of its transaction (a work''s transaction cannot claim outbox rows)'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF batch_size IS NULL OR batch_size < 1 OR batch_size > 1000 THEN
    RAISE EXCEPTION 'batch_size must be 1–1000, got %', batch_size USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT core.session_login_holds(sender) THEN
    RETURN;
  END IF;
  RETURN QUERY
    WITH due AS (
      SELECT o.consumer, o.target, o.job_id FROM core.outbox AS o
       WHERE o.consumer = sender AND o.next_attempt_at <= now()
       ORDER BY o.next_attempt_at
       LIMIT batch_size
         FOR UPDATE SKIP LOCKED)
    UPDATE core.outbox AS o SET claimed_by = pg_current_xact_id()
      FROM due
     WHERE o.consumer = due.consumer AND o.target = due.target AND o.job_id = due.job_id
    RETURNING o.target, o.job_id, o.parent_job_id, o.tenant_id, o.correlation_id, o.body, o.job_fingerprint,
              o.group_id, o.traceparent, o.attempts, o.created_at, o.send_by <= now();
END
$$;

REVOKE ALL ON FUNCTION core.outbox_claim(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outbox_claim(text, integer) TO jobfence_consumer;

-- A follow-up the relay moved past its deadline, or without its fence and older than the fence's
-- lifetime, is recorded `outlived` by the trigger above, with its sender, parent and key as
-- core.outbox_undelivered wrote them (0019): the sender column may name a sender on such a row too,
-- and its provenance is checked whatever its kind, so a forced replay of an outlived follow-up
-- still refuses one whose provenance fails (no override sends a forged row).
ALTER TABLE core.dead_letters
  DROP CONSTRAINT dead_letters_sender_undelivered,
  ADD CONSTRAINT dead_letters_sender_undelivered CHECK (sender IS NULL OR error_kind IN ('undelivered', 'outlived'));

CREATE OR REPLACE FUNCTION core.dead_letter_provenance_fault(error_kind text, consumer text, job_id text, body_form text, body text,
                                                  sender text, parent_job_id text, follow_up_key text)
RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE WHEN error_kind IS DISTINCT FROM 'undelivered' AND sender IS NULL THEN NULL
              WHEN body_form IS DISTINCT FROM 'text' THEN 'its body is not the text the outbox stored'
              ELSE core.follow_up_fault(sender, consumer, parent_job_id, job_id, follow_up_key, body) END
$$;
