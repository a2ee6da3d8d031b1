-- A dead letter being written holds its job's fence against the TTL cleanup (SPEC §7).
--
-- Migration 0010 made the cleanup skip a fence that a pending dead letter names. It decided with
-- its statement's snapshot, which cannot see a dead letter that commits while the cleanup runs: the
-- backstop drain writes `unrecorded` rows whether or not the job's fence exists, the harness writes
-- `conflict` rows while it does, and either could commit just after the cleanup looked and just
-- before it deleted. The fence was then gone under a pending dead letter, and a replay would have
-- sent a job that had been applied.
--
-- Now both sides take the fence row's lock before deciding:
-- - a dead-letter write locks the job's fence FOR KEY SHARE (core.hold_fence) in the statement that
--   inserts the row, so the lock lasts until the dead letter commits;
-- - the cleanup locks its candidates FOR UPDATE SKIP LOCKED (a fence a writer holds is skipped),
--   then deletes them in a second statement whose fresh snapshot sees every dead letter committed
--   before it, re-checking that none names the job.
-- A writer that comes second waits for the cleanup and then finds the fence gone: the fence had
-- expired and no dead letter named its job when it was deleted, which is what the TTL allows.

CREATE FUNCTION core.hold_fence(job text, consumer_name text) RETURNS TABLE (fingerprint uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
  SELECT p.fingerprint FROM core.processed_jobs AS p
   WHERE p.job_id = job AND p.consumer = consumer_name
     FOR KEY SHARE
$$;

REVOKE ALL ON FUNCTION core.hold_fence(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.hold_fence(text, text) TO jobfence_consumer;

CREATE OR REPLACE FUNCTION core.delete_expired_fences(batch_size integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
  candidates tid[];
  deleted integer;
BEGIN
  IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
    RAISE EXCEPTION 'batch_size must be 1–100000, got %', batch_size USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- 1. Lock the candidates. SKIP LOCKED: two cleanups divide the rows instead of queueing on each
  --    other, and a fence a dead-letter write holds is left for a later run.
  candidates := ARRAY(
    SELECT p.ctid FROM core.processed_jobs AS p
     WHERE p.expires_at < now()
       AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                        WHERE d.status = 'pending_review' AND d.consumer = p.consumer AND d.job_id = p.job_id)
     ORDER BY p.expires_at
     LIMIT batch_size
       FOR UPDATE SKIP LOCKED);
  -- 2. Delete them, re-checked in this statement's own, later snapshot: a dead letter that
  --    committed since step 1 keeps its fence. None can commit after it: a writer needs the lock
  --    step 1 holds.
  DELETE FROM core.processed_jobs AS f
   WHERE f.ctid = ANY (candidates)
     AND f.expires_at < now()
     AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                      WHERE d.status = 'pending_review' AND d.consumer = f.consumer AND d.job_id = f.job_id);
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;
