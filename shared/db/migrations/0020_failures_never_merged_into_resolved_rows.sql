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

