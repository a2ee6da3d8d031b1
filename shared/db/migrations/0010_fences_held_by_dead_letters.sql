-- A fence outlives its TTL while a pending dead letter names its job.
--
-- Replay decides by the fence: the job's fence present means the job was applied (superseded, or a
-- conflict for another job under the same id), absent means send. A fence deleted by the TTL
-- cleanup while a dead letter of its job still waits for review would turn that answer into
-- "send", and the replay would apply the job a second time. So the cleanup skips an expired fence
-- whose (consumer, job_id) a pending dead letter names, and counts those apart; once the dead
-- letter is resolved, the next run deletes the fence. The probe is served by the unique partial
-- index on pending dead letters (consumer, job_id, body_fingerprint).

CREATE OR REPLACE FUNCTION core.delete_expired_fences(batch_size integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
  deleted integer;
BEGIN
  IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
    RAISE EXCEPTION 'batch_size must be 1–100000, got %', batch_size USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- SKIP LOCKED: two cleanups running at once divide the rows instead of queueing on each other.
  -- The delete re-checks both conditions, so a row is never deleted before it has expired, nor
  -- while a pending dead letter names its job.
  DELETE FROM core.processed_jobs AS f
   WHERE f.ctid = ANY (ARRAY(
           SELECT p.ctid FROM core.processed_jobs AS p
            WHERE p.expires_at < now()
              AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                               WHERE d.status = 'pending_review' AND d.consumer = p.consumer AND d.job_id = p.job_id)
            ORDER BY p.expires_at
            LIMIT batch_size
              FOR UPDATE SKIP LOCKED))
     AND f.expires_at < now()
     AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                      WHERE d.status = 'pending_review' AND d.consumer = f.consumer AND d.job_id = f.job_id);
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;

-- Expired fences the cleanup can delete, counted up to `cap`.
CREATE OR REPLACE FUNCTION core.expired_fence_backlog(cap integer) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
  SELECT count(*)::integer FROM (
    SELECT 1 FROM core.processed_jobs AS p
     WHERE p.expires_at < now()
       AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                        WHERE d.status = 'pending_review' AND d.consumer = p.consumer AND d.job_id = p.job_id)
     LIMIT greatest(cap, 0)
  ) AS expired
$$;

-- Expired fences kept because a pending dead letter names their job, counted up to `cap`.
CREATE FUNCTION core.held_fence_count(cap integer) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
  SELECT count(*)::integer FROM (
    SELECT 1 FROM core.processed_jobs AS p
     WHERE p.expires_at < now()
       AND EXISTS (SELECT 1 FROM core.dead_letters AS d
                    WHERE d.status = 'pending_review' AND d.consumer = p.consumer AND d.job_id = p.job_id)
     LIMIT greatest(cap, 0)
  ) AS held
$$;

REVOKE ALL ON FUNCTION core.held_fence_count(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.held_fence_count(integer) TO jobfence_cleanup;
