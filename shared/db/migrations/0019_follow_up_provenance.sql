-- The provenance of follow-ups: a consumer can make no other consumer, and no operator, act on an
-- outbox row it forged.
--
-- Until now a consumer's login could insert an outbox row naming any registered target, with any
-- body and job id, and turn it through core.outbox_undelivered into the target's pending
-- `undelivered` dead letter; an operator's replay (which may send to every consumer's queue) then
-- delivered it, and the target applied a job its sender had no right to send. And a work could
-- DELETE outbox rows through tx.query, losing other jobs' committed follow-ups. From here:
--
-- * the deployment declares which targets each sender may send to (core.follow_up_targets,
--   registered from the consumer registry by the migrate function, the local stack and the testing
--   kit, as the replay queues are); a consumer may write an outbox row only for a declared target,
--   only under the job id deriveJobId(target, sender, parent job id, key) gives (the key is stored,
--   so the database recomputes it), only with a body whose job_id is that id, and only in the
--   transaction that wrote its parent's fence (the fence transaction is the one place the harness
--   writes follow-ups, in batch mode too);
-- * an `undelivered` dead letter records its sender, parent and key in columns no consumer may
--   write (only core.outbox_undelivered does), and a replay checks them (core.follow_up_fault) and
--   refuses a dead letter whose provenance fails, saying why;
-- * the consumer role may no longer UPDATE or DELETE outbox rows: its relays go through functions
--   that act only on rows a relay may: core.outbox_claim locks due rows and marks them with its
--   transaction, and only at the start of a transaction (a work's fence transaction has written its
--   fence before the work runs, so it can claim nothing); core.outbox_retry and
--   core.outbox_undelivered act only on rows this transaction claimed; core.outbox_sent deletes
--   either those, or, at the start of a transaction (the relay right after a COMMIT), the rows
--   named. A work calling any of them through tx.query can remove no committed follow-up.

-- 1. The declared pairs -------------------------------------------------------------------------

CREATE TABLE core.follow_up_targets (
  sender     text        NOT NULL,
  target     text        NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT follow_up_targets_pkey PRIMARY KEY (sender, target),
  CONSTRAINT follow_up_targets_sender_registered FOREIGN KEY (sender) REFERENCES core.consumer_roles (consumer),
  CONSTRAINT follow_up_targets_target_registered FOREIGN KEY (target) REFERENCES core.consumer_roles (consumer)
);

COMMENT ON TABLE core.follow_up_targets IS
  'The follow-up targets the deployment declares for each sending consumer (its definition''s `sends`); an outbox row, and a replay of an undelivered dead letter, needs its pair here.';

-- Read by the outbox's row policy (which runs with the consumer's rights) and by the replays.
GRANT SELECT ON core.follow_up_targets TO jobfence_consumer, jobfence_ops;

-- Replaces the targets declared for `sender` with `targets` (an empty array: it sends to nobody).
-- The deployment calls it after migrating, for every consumer of its registry. Runs with the
-- caller's rights: only the migrator may call it.
CREATE FUNCTION core.register_follow_up_targets(sender text, targets text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  unknown text[];
BEGIN
  IF targets IS NULL OR array_position(targets, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'targets must be an array of consumer names, got %', targets
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM core.consumer_roles AS c WHERE c.consumer = register_follow_up_targets.sender) THEN
    RAISE EXCEPTION 'consumer % has no role in this database: migrate its set first', sender
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  unknown := ARRAY(SELECT DISTINCT t FROM unnest(targets) AS t
                    WHERE NOT EXISTS (SELECT 1 FROM core.consumer_roles AS c WHERE c.consumer = t) ORDER BY t);
  IF cardinality(unknown) > 0 THEN
    RAISE EXCEPTION 'follow-up targets of % are not consumers of this database: %', sender, unknown
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM core.follow_up_targets AS f
   WHERE f.sender = register_follow_up_targets.sender AND f.target <> ALL (targets);
  INSERT INTO core.follow_up_targets AS f (sender, target)
  SELECT DISTINCT register_follow_up_targets.sender, t FROM unnest(targets) AS t
  ON CONFLICT ON CONSTRAINT follow_up_targets_pkey DO NOTHING;
END
$$;

REVOKE ALL ON FUNCTION core.register_follow_up_targets(text, text[]) FROM PUBLIC;

-- 2. The follow-up's job id, as deriveJobId defines it ------------------------------------------

-- Whether `follow_up_key` is a key as the harness stores it: the RFC 8785 JSON of a string (quoted,
-- escaped as JSON.stringify escapes) or of a finite number. At most 1024 bytes.
CREATE FUNCTION core.follow_up_key_valid(follow_up_key text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
  SELECT octet_length(follow_up_key) <= 1024
     AND ((follow_up_key COLLATE "C") ~ '^"([^"\\\x01-\x1f]|\\["\\bfnrt]|\\u[0-9a-f]{4})*"$'
          OR (follow_up_key COLLATE "C") ~ '^-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?(e[+-](0|[1-9][0-9]*))?$')
$$;

REVOKE ALL ON FUNCTION core.follow_up_key_valid(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.follow_up_key_valid(text) TO jobfence_consumer, jobfence_ops;

-- deriveJobId(target, sender, parent_job_id, key) (shared/producer/job-id.ts): the target, ':' and
-- the unpadded base64url SHA-256 of the UTF-8 of the JSON array [target, sender, parent, key].
-- to_json escapes a string as JSON.stringify does (\" \\ \b \f \n \r \t, other controls as
-- lowercase \u00xx, everything else as it is), and the key is stored as its canonical JSON text.
-- Marked immutable: to_json is only stable because of how it writes dates, and only text reaches it.
CREATE FUNCTION core.follow_up_job_id(target text, sender text, parent_job_id text, follow_up_key text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
  SELECT target || ':' || rtrim(translate(encode(sha256(convert_to(
           '[' || to_json(target)::text || ',' || to_json(sender)::text || ',' || to_json(parent_job_id)::text
               || ',' || follow_up_key || ']', 'UTF8')), 'base64'), '+/', '-_'), '=')
$$;

REVOKE ALL ON FUNCTION core.follow_up_job_id(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.follow_up_job_id(text, text, text, text) TO jobfence_consumer, jobfence_ops;

-- Why a follow-up's provenance fails, or NULL when it holds: its sender declares its target, its job
-- id is the one deriveJobId gives for its sender, parent and key, and its body's job_id is that id.
-- The outbox's row policy, core.outbox_undelivered and every replay ask it. Runs with the caller's
-- rights (it reads only core.follow_up_targets).
CREATE FUNCTION core.follow_up_fault(sender text, target text, parent_job_id text, job_id text,
                                     follow_up_key text, body text)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  body_job_id text;
BEGIN
  IF sender IS NULL THEN
    RETURN 'it names no sender: it was not written by an outbox relay, or was recorded before its sender could be (migration 0019)';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM core.follow_up_targets AS f
                  WHERE f.sender = follow_up_fault.sender AND f.target = follow_up_fault.target) THEN
    RETURN format('the deployment does not declare %s as a follow-up target of %s', target, sender);
  END IF;
  IF parent_job_id IS NULL OR follow_up_key IS NULL THEN
    RETURN 'its parent job and key were not recorded (written before migration 0019), so its job id cannot be checked';
  END IF;
  IF NOT core.follow_up_key_valid(follow_up_key)
     OR job_id IS DISTINCT FROM core.follow_up_job_id(target, sender, parent_job_id, follow_up_key) THEN
    RETURN format('its job id is not deriveJobId(%s, %s, its parent job id, its key)', target, sender);
  END IF;
  BEGIN
    body_job_id := body::json ->> 'job_id';
  EXCEPTION WHEN others THEN
    body_job_id := NULL; -- not JSON: no job id at all
  END;
  IF body_job_id IS DISTINCT FROM job_id THEN
    RETURN 'its body carries another job id than its own';
  END IF;
  RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION core.follow_up_fault(text, text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.follow_up_fault(text, text, text, text, text, text) TO jobfence_consumer, jobfence_ops;

-- Whether the session's login holds `consumer`'s group role: what the relay functions below, which
-- run with their owner's rights past row-level security, ask before they touch a row of `consumer`.
-- session_user, not current_user (the owner, in there); a superuser is a member of every role.
CREATE FUNCTION core.session_login_holds(consumer text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT EXISTS (SELECT 1 FROM core.consumer_roles AS c JOIN pg_catalog.pg_roles AS r ON r.rolname = c.role_name
                  WHERE c.consumer = session_login_holds.consumer AND pg_has_role(session_user, r.oid, 'MEMBER'))
$$;

REVOKE ALL ON FUNCTION core.session_login_holds(text) FROM PUBLIC;

-- 3. The outbox: the key, the claim, and what a consumer may write -------------------------------

ALTER TABLE core.outbox
  -- The key the author gave (or the index), as RFC 8785 JSON; NULL only on rows written before 0019.
  ADD COLUMN follow_up_key text,
  -- The transaction of the scheduled relay that last claimed the row (core.outbox_claim).
  ADD COLUMN claimed_by xid8,
  ADD CONSTRAINT outbox_follow_up_key_form CHECK (follow_up_key IS NULL OR core.follow_up_key_valid(follow_up_key));

COMMENT ON COLUMN core.outbox.follow_up_key IS
  'The key deriveJobId took after the parent job id (RFC 8785 JSON); NULL on rows written before migration 0019.';
COMMENT ON COLUMN core.outbox.claimed_by IS
  'The transaction of the scheduled relay that last claimed the row; only that transaction may reschedule, move or delete it by claim.';

-- Rows written before this migration: their key is established where the default (the follow-up's
-- index, 0 to 63) derives their job id; the others keep none, are still sent by their sender's
-- relay, and, should they become undelivered, cannot be replayed (core.follow_up_fault).
UPDATE core.outbox AS o
   SET follow_up_key = k.key
  FROM (SELECT o2.consumer, o2.target, o2.job_id,
               (SELECT i::text FROM generate_series(0, 63) AS i
                 WHERE core.follow_up_job_id(o2.target, o2.consumer, o2.parent_job_id, i::text) = o2.job_id
                 LIMIT 1) AS key
          FROM core.outbox AS o2) AS k
 WHERE o.consumer = k.consumer AND o.target = k.target AND o.job_id = k.job_id AND k.key IS NOT NULL;

DROP POLICY consumer_own_outbox ON core.outbox;

CREATE POLICY consumer_reads_own_outbox ON core.outbox FOR SELECT TO jobfence_consumer
  USING (consumer = (SELECT core.session_consumer()));

-- A consumer writes a follow-up of its own, to a target the deployment declares for it, under the
-- job id deriveJobId gives, in the transaction that wrote its parent's fence (xmin: the fence was
-- inserted by this very transaction, at its BEGIN, before any work ran).
CREATE POLICY consumer_writes_proven_follow_ups ON core.outbox FOR INSERT TO jobfence_consumer
  WITH CHECK (
    consumer = (SELECT core.session_consumer())
    AND core.follow_up_fault(consumer, target, parent_job_id, job_id, follow_up_key, body) IS NULL
    AND EXISTS (SELECT 1 FROM core.processed_jobs AS p
                 WHERE p.consumer_id = (SELECT core.session_consumer_id()) AND p.job_id = parent_job_id
                   AND p.xmin = xid(pg_current_xact_id())));

REVOKE UPDATE, DELETE ON core.outbox FROM jobfence_consumer;
REVOKE UPDATE (attempts, next_attempt_at, last_error) ON core.outbox FROM jobfence_consumer;
GRANT INSERT (follow_up_key) ON core.outbox TO jobfence_consumer;

-- The scheduled relay's claim: locks up to `batch_size` of `sender`'s due rows, oldest due first,
-- skipping rows another relay holds (FOR UPDATE SKIP LOCKED), marks them with this transaction and
-- returns them. Only as the first write of its transaction: a work's fence transaction has written
-- its fence before the work runs, so a work can claim nothing, and so can never reschedule, move or
-- delete a row by claim. Rows of a consumer whose role the session's login does not hold: none.
CREATE FUNCTION core.outbox_claim(sender text, batch_size integer)
RETURNS TABLE (target text, job_id text, parent_job_id text, tenant_id text, correlation_id text, body text,
               job_fingerprint bytea, group_id text, traceparent text, attempts integer, created_at timestamptz)
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
              o.group_id, o.traceparent, o.attempts, o.created_at;
END
$$;

REVOKE ALL ON FUNCTION core.outbox_claim(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outbox_claim(text, integer) TO jobfence_consumer;

-- Deletes `sender`'s rows that were sent, by key, and returns how many were there: in a transaction
-- that has written nothing yet (the relay right after a COMMIT, on its own connection), the rows
-- named; in any other (the scheduled relay's), only the named rows this transaction claimed. A work
-- calling it in its fence transaction can so delete no row.
CREATE FUNCTION core.outbox_sent(sender text, targets text[], job_ids text[]) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  fresh   boolean := pg_current_xact_id_if_assigned() IS NULL;
  deleted integer;
BEGIN
  IF cardinality(targets) IS DISTINCT FROM cardinality(job_ids) THEN
    RAISE EXCEPTION 'targets and job_ids must pair up' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT core.session_login_holds(sender) THEN
    RETURN 0;
  END IF;
  DELETE FROM core.outbox AS o
   USING unnest(targets, job_ids) AS sent (target, job_id)
   WHERE o.consumer = sender AND o.target = sent.target AND o.job_id = sent.job_id
     AND (fresh OR o.claimed_by = pg_current_xact_id());
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;

REVOKE ALL ON FUNCTION core.outbox_sent(text, text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outbox_sent(text, text[], text[]) TO jobfence_consumer;

-- Counts a failed send of a row this transaction claimed and sets when it is tried next; returns
-- whether there was such a row.
CREATE FUNCTION core.outbox_retry(sender text, target_name text, follow_up_job_id text, delay_seconds double precision,
                                  error jsonb)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
  IF delay_seconds IS NULL OR delay_seconds < 0 OR delay_seconds > 604800 THEN
    RAISE EXCEPTION 'delay_seconds must be 0–604800, got %', delay_seconds USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT core.session_login_holds(sender) THEN
    RETURN false;
  END IF;
  UPDATE core.outbox AS o
     SET attempts = least(o.attempts + 1, 1000), next_attempt_at = now() + make_interval(secs => delay_seconds),
         last_error = error
   WHERE o.consumer = sender AND o.target = target_name AND o.job_id = follow_up_job_id
     AND o.claimed_by = pg_current_xact_id();
  RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION core.outbox_retry(text, text, text, double precision, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outbox_retry(text, text, text, double precision, jsonb) TO jobfence_consumer;

-- 4. Dead letters: an undelivered one names its sender ------------------------------------------

ALTER TABLE core.dead_letters
  ADD COLUMN sender text,
  ADD COLUMN parent_job_id text,
  ADD COLUMN follow_up_key text,
  ADD CONSTRAINT dead_letters_sender_undelivered CHECK (sender IS NULL OR error_kind = 'undelivered'),
  ADD CONSTRAINT dead_letters_parent_job_id_length CHECK (parent_job_id IS NULL OR char_length(parent_job_id) BETWEEN 1 AND 255),
  ADD CONSTRAINT dead_letters_follow_up_key_form CHECK (follow_up_key IS NULL OR core.follow_up_key_valid(follow_up_key));

COMMENT ON COLUMN core.dead_letters.sender IS
  'An undelivered follow-up''s sending consumer, written only by core.outbox_undelivered (no consumer may insert it); NULL on every other row.';
COMMENT ON COLUMN core.dead_letters.parent_job_id IS
  'An undelivered follow-up''s parent job id, written only by core.outbox_undelivered.';
COMMENT ON COLUMN core.dead_letters.follow_up_key IS
  'An undelivered follow-up''s key (RFC 8785 JSON), written only by core.outbox_undelivered.';

-- Pending undelivered dead letters recorded before this migration: their provenance is established
-- where it can be (the parent the outbox recorded, a job id the default key 0 to 63 derives, a body
-- of that id); the others keep no sender, and a replay refuses them with the reason (discard them,
-- or have the sender send the follow-up again). The row is append-only to everyone else: its guard
-- is set aside for this one update, inside the migration's transaction.
ALTER TABLE core.dead_letters DISABLE TRIGGER dead_letters_guard_update;
UPDATE core.dead_letters AS d
   SET sender = e.sender, parent_job_id = e.parent_job_id, follow_up_key = e.follow_up_key
  FROM (SELECT d2.id, d2.message_attributes -> 'parent' ->> 'consumer' AS sender,
               d2.message_attributes -> 'parent' ->> 'job_id' AS parent_job_id,
               (SELECT i::text FROM generate_series(0, 63) AS i
                 WHERE core.follow_up_job_id(d2.consumer, d2.message_attributes -> 'parent' ->> 'consumer',
                                             d2.message_attributes -> 'parent' ->> 'job_id', i::text) = d2.job_id
                 LIMIT 1) AS follow_up_key
          FROM core.dead_letters AS d2
         WHERE d2.status = 'pending_review' AND d2.error_kind = 'undelivered' AND d2.body_form = 'text'
           AND (d2.message_attributes -> 'parent' ->> 'consumer') IN (SELECT c.consumer FROM core.consumer_roles AS c)
           AND char_length(d2.message_attributes -> 'parent' ->> 'job_id') BETWEEN 1 AND 255) AS e
 WHERE d.id = e.id AND e.follow_up_key IS NOT NULL;
ALTER TABLE core.dead_letters ENABLE TRIGGER dead_letters_guard_update;

-- As in 0018: the ops role's view of every dead letter, recreated to show the new columns.
DROP VIEW core.ops_dead_letters;
CREATE VIEW core.ops_dead_letters WITH (security_invoker = false) AS
  SELECT * FROM core.dead_letters WHERE pg_catalog.pg_has_role('jobfence_ops', 'USAGE');
COMMENT ON VIEW core.ops_dead_letters IS
  'Every dead letter, for jobfence_ops''s filtered reads: planned with the table''s statistics, which row-level security withholds from a session subject to it (ILIKE is not leakproof).';
REVOKE ALL ON core.ops_dead_letters FROM PUBLIC;
GRANT SELECT ON core.ops_dead_letters TO jobfence_ops;

-- As in 0015, and: only a row this transaction claimed (core.outbox_claim), and only one whose
-- provenance holds (core.follow_up_fault), or a row written before 0019 whose key was not
-- established, which is moved with what is known and whose replay is then refused. The dead letter
-- records the sender, parent and key, which no consumer can write. It merges only into a pending
-- row it holds FOR SHARE until the relay commits (inserting its own once a replay, bulk chunk,
-- discard or supersede has taken the row; a serialization failure after three rounds, so the
-- relay keeps its row): see migration 0020 for the harness's write, which merges the same way.
CREATE OR REPLACE FUNCTION core.outbox_undelivered(sender text, target_name text, follow_up_job_id text, queue_url text, message_group text, error jsonb)
RETURNS TABLE (id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  moved          core.outbox;
  fault          text;
  payload        jsonb;
  dead_letter_id uuid;
  try            integer;
BEGIN
  IF NOT core.session_login_holds(sender) THEN
    RETURN;
  END IF;
  DELETE FROM core.outbox AS o
   WHERE o.target = target_name AND o.job_id = follow_up_job_id AND o.consumer = sender
     AND o.claimed_by = pg_current_xact_id()
  RETURNING o.* INTO moved;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  fault := core.follow_up_fault(moved.consumer, moved.target, moved.parent_job_id, moved.job_id, moved.follow_up_key, moved.body);
  IF fault IS NOT NULL AND moved.follow_up_key IS NOT NULL THEN
    RAISE EXCEPTION 'follow-up % of % to % is not one its sender could have written: %', moved.job_id, moved.consumer, moved.target, fault
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF queue_url IS NULL OR NOT core.replay_queue_allowed(target_name, queue_url) THEN
    RAISE EXCEPTION 'queue % is not one registered for consumer %', queue_url, target_name
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  BEGIN
    payload := moved.body::jsonb -> 'payload';
    IF jsonb_typeof(payload) <> 'object' THEN
      payload := NULL;
    END IF;
  EXCEPTION WHEN others THEN
    payload := NULL; -- jsonb refuses what JSON allows (a number beyond numeric): the body keeps it
  END;
  -- Merge only into a row this transaction holds FOR SHARE until the relay commits (see above):
  -- a row a replay, bulk chunk, discard or supersede is resolving is waited for, then not taken.
  FOR try IN 1..3 LOOP
    INSERT INTO core.dead_letters AS d
      (job_id, consumer, queue, tenant_id, correlation_id, body_form, body, payload, message_attributes,
       attempts, error_kind, last_error, job_fingerprint, attempt_history, sender, parent_job_id, follow_up_key)
    VALUES (moved.job_id, moved.target, queue_url, moved.tenant_id, moved.correlation_id, 'text', moved.body, payload,
            jsonb_strip_nulls(jsonb_build_object(
              'message_group_id', message_group,
              'parent', jsonb_build_object('consumer', moved.consumer, 'job_id', moved.parent_job_id),
              'outbox_created_at', moved.created_at,
              'message_attributes', CASE WHEN moved.traceparent IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('traceparent', jsonb_build_object('dataType', 'String', 'stringValue', moved.traceparent)) END)),
            moved.attempts + 1, 'undelivered', error, moved.job_fingerprint, '[]'::jsonb,
            moved.consumer, moved.parent_job_id, moved.follow_up_key)
    ON CONFLICT (consumer, job_id, body_fingerprint) WHERE status = 'pending_review' DO NOTHING
    RETURNING d.id INTO dead_letter_id;
    IF dead_letter_id IS NOT NULL THEN
      RETURN QUERY SELECT dead_letter_id, true;
      RETURN;
    END IF;
    SELECT d.id INTO dead_letter_id FROM core.dead_letters AS d
     WHERE d.consumer = moved.target AND d.job_id = moved.job_id AND d.status = 'pending_review'
       AND d.body_fingerprint = core.dead_letter_body_fingerprint(moved.body, NULL)
       FOR SHARE OF d;
    IF dead_letter_id IS NOT NULL THEN
      RETURN QUERY SELECT dead_letter_id, false;
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'the pending dead letter of % kept changing', follow_up_job_id USING ERRCODE = 'serialization_failure';
END
$$;

-- 5. Replays: why one of an undelivered dead letter is refused -----------------------------------

-- NULL for every dead letter but an undelivered one; for that, core.follow_up_fault of what it
-- recorded. Every replay (single and bulk) reads it with the row it locks.
CREATE FUNCTION core.dead_letter_provenance_fault(error_kind text, consumer text, job_id text, body_form text, body text,
                                                  sender text, parent_job_id text, follow_up_key text)
RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE WHEN error_kind IS DISTINCT FROM 'undelivered' THEN NULL
              WHEN body_form IS DISTINCT FROM 'text' THEN 'its body is not the text the outbox stored'
              ELSE core.follow_up_fault(sender, consumer, parent_job_id, job_id, follow_up_key, body) END
$$;

REVOKE ALL ON FUNCTION core.dead_letter_provenance_fault(text, text, text, text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.dead_letter_provenance_fault(text, text, text, text, text, text, text, text) TO jobfence_ops;

-- A bulk replay skips such a row, and says why.
ALTER TABLE core.bulk_operation_skips
  DROP CONSTRAINT bulk_operation_skips_reason_known,
  ADD CONSTRAINT bulk_operation_skips_reason_known
    CHECK (reason IN ('conflict', 'send-failed', 'foreign-queue', 'unproven-follow-up'));
