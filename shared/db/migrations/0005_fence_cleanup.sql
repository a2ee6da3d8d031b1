-- TTL cleanup through a function, not a grant (SPEC §7, §9). With DELETE on the fence table the
-- cleanup role could delete a live fence, and a live fence deleted is a job applied twice. The
-- function deletes only rows whose expires_at has passed, in one bounded batch per call; the
-- cleanup role may call it and nothing else.

CREATE FUNCTION core.delete_expired_fences(batch_size integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
  deleted integer;
BEGIN
  IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
    RAISE EXCEPTION 'batch_size must be 1–100000, got %', batch_size USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- SKIP LOCKED: two cleanups running at once divide the rows instead of queueing on each other,
  -- and a row a concurrent transaction holds is left for the next run. The delete re-checks
  -- expires_at, so a row is never deleted before it has expired.
  DELETE FROM core.processed_jobs
   WHERE ctid = ANY (ARRAY(
           SELECT ctid FROM core.processed_jobs
            WHERE expires_at < now()
            ORDER BY expires_at
            LIMIT batch_size
              FOR UPDATE SKIP LOCKED))
     AND expires_at < now();
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;

-- How many expired fences remain, counted up to `cap` so a huge backlog costs a bounded scan.
CREATE FUNCTION core.expired_fence_backlog(cap integer) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
  SELECT count(*)::integer FROM (
    SELECT 1 FROM core.processed_jobs WHERE expires_at < now() LIMIT greatest(cap, 0)
  ) AS expired
$$;

REVOKE ALL ON FUNCTION core.delete_expired_fences(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION core.expired_fence_backlog(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.delete_expired_fences(integer) TO jobfence_cleanup;
GRANT EXECUTE ON FUNCTION core.expired_fence_backlog(integer) TO jobfence_cleanup;

REVOKE DELETE ON core.processed_jobs FROM jobfence_cleanup;
REVOKE SELECT (job_id, consumer, expires_at) ON core.processed_jobs FROM jobfence_cleanup;
