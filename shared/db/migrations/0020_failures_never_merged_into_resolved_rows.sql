-- A failure is never merged into a dead letter that is leaving pending_review (docs/design.md §5).
--
-- A dead-letter write whose body already has a pending row merges into it: the INSERT's
-- ON CONFLICT (consumer, job_id, body_fingerprint) WHERE status = 'pending_review' DO NOTHING, then
-- a lookup of that row. A replay locks the row FOR UPDATE, sends its body to SQS, marks it
-- `replayed` and commits; a bulk chunk does the same for many rows. A replayed message that failed
-- again at once (poison, a permanent error, its last attempt) found the row still pending in that
-- window, merged into it and was acked, and the replay then resolved the row: the job was neither
-- applied nor pending. A discard or a supersede whose UPDATE had not committed yet did the same.
--
-- The lookup now locks the row it merges into FOR SHARE. That conflicts with the FOR UPDATE of a
-- replay or a bulk chunk and with the row lock any UPDATE takes (a discard, a supersede, a
-- resolution), so the lookup waits for such a transaction to end; READ COMMITTED then re-checks
-- the row's newest version, and a row that left pending_review is not returned: the writer inserts
-- a row of its own instead. A row the lookup does return was pending when nothing could be
-- resolving it, and no transition can take it until the writer's transaction ends (its merge is
-- then durable): whatever resolves it later decides after the failure was recorded in it, and a
-- replay then sends the body again.
--
-- A consumer may not lock dead letters itself (that needs UPDATE on the table, which would let it
-- resolve its own rows), so the lookup runs with its owner's rights, like core.hold_fence: it
-- answers, and locks, only rows of a consumer whose role the session's login holds.
CREATE FUNCTION core.hold_pending_dead_letter(consumer_name text, job text, fingerprint bytea)
RETURNS TABLE (id uuid, error_kind text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
  SELECT d.id, d.error_kind FROM core.dead_letters AS d
   WHERE d.consumer = consumer_name AND d.job_id = job AND d.body_fingerprint = fingerprint
     AND d.status = 'pending_review'
     AND EXISTS (SELECT 1 FROM core.consumer_roles AS c JOIN pg_catalog.pg_roles AS r ON r.rolname = c.role_name
                  WHERE c.consumer = consumer_name AND pg_has_role(session_user, r.oid, 'MEMBER'))
     FOR SHARE OF d
$$;

REVOKE ALL ON FUNCTION core.hold_pending_dead_letter(text, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.hold_pending_dead_letter(text, text, bytea) TO jobfence_consumer;

COMMENT ON FUNCTION core.hold_pending_dead_letter(text, text, bytea) IS
  'The pending dead letter a write of the same body merges into, locked FOR SHARE until the writer''s transaction ends; waits for a replay, bulk chunk, discard or supersede holding it and returns nothing when that resolved it.';

-- The relay's move of an undelivered follow-up (core.outbox_undelivered, as 0019 left it) merges the
-- same way: it locks the pending row it merges into FOR SHARE, and inserts a row of its own once a
-- transition it waited for has taken the row. The lock is held until the relay's transaction
-- commits, together with its claimed outbox row's removal. After three rounds it gives up with a
-- serialization failure, so the relay keeps its row and tries again later.
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
