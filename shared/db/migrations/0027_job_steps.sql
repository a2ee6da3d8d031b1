-- Steps: the checkpoints of a job's calls outside the database (issue 33, docs/consumers.md "Steps").
--
-- A consumer's `steps` run before its fence transaction. Each step that is not recorded yet is
-- first claimed here (a row with the job's fingerprint and no result), then called with a key
-- derived from (consumer, job id, step name), and as soon as the call returns its result is written
-- into the claimed row. A later delivery of the job (a retry, a duplicate, a replay) finds the result
-- and hands it to the work without calling again; a delivery that died between the call and the
-- result finds the claim and calls again with the same key, and the provider answers with what it
-- did the first time.
--
-- The job itself is claimed first, by the first delivery whose steps begin: a row named `_job`
-- (position 0, never a result) with the body's fingerprint. Every delivery takes or finds it, in the
-- statement that reads the job's steps, before any step runs; a different body sent under the job's
-- id finds another fingerprint there and is a conflict before it calls anything, whatever steps its
-- payload would choose.
--
-- Each step's claim comes before its call so that
-- * a different body sent under the job's id finds the claim's fingerprint and is a conflict before
--   it calls anything (the provider would otherwise give it the first body's answer for the key);
-- * a delivery that read the job's steps a while ago asks again just before calling: a step another
--   delivery recorded meanwhile is not called again;
-- * a dead letter shows a step that was called and whose answer was never recorded.
--
-- A claim gets its result once, and a result never changes: consumers may read and claim their own
-- rows and set the result of a claim of theirs that has none; nothing else. Two deliveries of one
-- body may both call (with the same key) and both try to record: the first result stays, and the
-- other reads it, so every delivery's work sees the one recorded result.
--
-- Lifetime: a row lives as long as anything can still deliver its job. The cleanup
-- (core.delete_expired_steps, run by jobfence_cleanup with the fences) deletes a row only when
-- * it is past its own expires_at (called_at + the consumer's fence TTL, which covers every copy
--   of a job: docs/design.md §7), and
-- * the job has no fence that is not yet past its expires_at (the fence is written after the steps,
--   so it outlives them), and
-- * no dead letter of the job is pending review (an operator may still replay it), and none was
--   resolved less than the row's own lifetime ago (a replayed copy may still be on its queue);
-- * and, for the job's own claim, no other row of the job is left (it goes last).

CREATE TABLE core.job_steps (
  job_id      text        NOT NULL,
  consumer_id smallint    NOT NULL,
  step        text        NOT NULL,
  -- The step's place in the job's run: 1 for the first step claimed, and so on.
  position    smallint    NOT NULL,
  -- The fingerprint of the job that claimed it: a different body sent under the job's id is a
  -- conflict, and never calls nor receives another body's results.
  fingerprint uuid,
  -- The result as the step's schema accepted it, as JSON text kept exactly (json, not jsonb: jsonb
  -- refuses \u0000 and lone surrogates, which a provider's answer may carry). NULL: called, its
  -- answer not recorded (yet, or ever: the delivery died).
  result      json,
  called_at   timestamptz NOT NULL DEFAULT now(),
  -- When the result was recorded: set by the database (core.job_steps_recorded), never by a writer.
  recorded_at timestamptz,
  expires_at  timestamptz NOT NULL,
  CONSTRAINT job_steps_pkey PRIMARY KEY (job_id, consumer_id, step),
  CONSTRAINT job_steps_job_id_length CHECK (char_length(job_id) BETWEEN 1 AND 255),
  -- A step's name, or `_job`: the job's own claim (position 0, never a result, always a body's
  -- fingerprint: one without would let any body through).
  CONSTRAINT job_steps_step_name CHECK (
    (step ~ '^[a-z0-9][a-z0-9_-]{0,63}$' AND position BETWEEN 1 AND 1000)
    OR (step = '_job' AND position = 0 AND result IS NULL AND fingerprint IS NOT NULL)),
  -- 64 KiB: a step records what the work needs (an id, a status), not a provider's whole answer.
  CONSTRAINT job_steps_result_size CHECK (octet_length(result::text) <= 65536),
  CONSTRAINT job_steps_recorded_with_result CHECK ((result IS NULL) = (recorded_at IS NULL)),
  CONSTRAINT job_steps_expires_after_called CHECK (expires_at > called_at)
);

-- The cleanup finds its candidates in expiry order.
CREATE INDEX job_steps_expires_at_idx ON core.job_steps (expires_at);

COMMENT ON TABLE core.job_steps IS
  'Checkpoints of a job''s external calls (steps): claimed before each call, its result recorded as the call returns, before the fence transaction; read by every later delivery and replay of the job. Deleted only by core.delete_expired_steps.';
COMMENT ON COLUMN core.job_steps.consumer_id IS
  'The consumer, by its id in core.consumer_roles (no foreign key, as for fences: row-level security checks it is the session''s own).';
COMMENT ON COLUMN core.job_steps.result IS
  'The step''s result as its schema accepted it, JSON text kept exactly; NULL while called and not recorded.';

ALTER TABLE core.job_steps ENABLE ROW LEVEL SECURITY;
CREATE POLICY consumer_reads_own_steps ON core.job_steps FOR SELECT TO jobfence_consumer
  USING (consumer_id = (SELECT core.session_consumer_id()));
CREATE POLICY consumer_claims_own_steps ON core.job_steps FOR INSERT TO jobfence_consumer
  WITH CHECK (consumer_id = (SELECT core.session_consumer_id()) AND result IS NULL);
-- Only a claim of its own that has no result yet: a recorded result is never changed.
CREATE POLICY consumer_records_own_steps ON core.job_steps FOR UPDATE TO jobfence_consumer
  USING (consumer_id = (SELECT core.session_consumer_id()) AND result IS NULL)
  WITH CHECK (consumer_id = (SELECT core.session_consumer_id()) AND result IS NOT NULL);
CREATE POLICY ops_reads_steps ON core.job_steps FOR SELECT TO jobfence_ops USING (true);

-- A consumer reads its own rows, claims steps (called_at and recorded_at are the server's) and
-- records a claim's result; it can neither change anything else nor delete a row. Ops reads them (a
-- dead letter shows its job's steps). The cleanup role has no right on the table: it deletes only
-- through core.delete_expired_steps.
REVOKE ALL ON core.job_steps FROM PUBLIC;
GRANT SELECT ON core.job_steps TO jobfence_consumer, jobfence_ops;
GRANT INSERT (job_id, consumer_id, step, position, fingerprint, expires_at) ON core.job_steps TO jobfence_consumer;
GRANT UPDATE (result) ON core.job_steps TO jobfence_consumer;

-- The moment a claim's result is recorded is the server's clock, whatever the writer sends.
CREATE FUNCTION core.job_steps_recorded() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  NEW.recorded_at := CASE WHEN NEW.result IS NULL THEN NULL ELSE now() END;
  RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION core.job_steps_recorded() FROM PUBLIC;

CREATE TRIGGER job_steps_recorded
  BEFORE UPDATE OF result ON core.job_steps
  FOR EACH ROW EXECUTE FUNCTION core.job_steps_recorded();

-- Deletes up to `batch_size` step rows nothing can deliver again (above); returns how many.
CREATE FUNCTION core.delete_expired_steps(batch_size integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  names      text[];
  candidates tid[];
  deleted    integer;
BEGIN
  IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
    RAISE EXCEPTION 'batch_size must be 1–100000, got %', batch_size USING ERRCODE = 'invalid_parameter_value';
  END IF;
  names := core.consumer_names();
  -- SKIP LOCKED: two cleanups divide the rows instead of queueing on each other.
  candidates := ARRAY(
    SELECT s.ctid FROM core.job_steps AS s
     WHERE s.expires_at < now()
       AND NOT EXISTS (SELECT 1 FROM core.processed_jobs AS p
                        WHERE p.job_id = s.job_id AND p.consumer_id = s.consumer_id AND p.expires_at >= now())
       AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                        WHERE d.consumer = names[s.consumer_id] AND d.job_id = s.job_id
                          AND (d.status = 'pending_review'
                               OR d.resolved_at > now() - (s.expires_at - s.called_at)))
       -- The job's own claim goes last, after every step of the job: while one is kept, a different
       -- body must still find the job claimed.
       AND (s.step <> '_job' OR NOT EXISTS (SELECT 1 FROM core.job_steps AS o
                                             WHERE o.job_id = s.job_id AND o.consumer_id = s.consumer_id
                                               AND o.step <> '_job'))
     ORDER BY s.expires_at
     LIMIT batch_size
       FOR UPDATE SKIP LOCKED);
  -- Re-checked in this statement's own, later snapshot: a dead letter or fence that committed since
  -- the candidates were chosen keeps its job's steps.
  DELETE FROM core.job_steps AS s
   WHERE s.ctid = ANY (candidates)
     AND s.expires_at < now()
     AND NOT EXISTS (SELECT 1 FROM core.processed_jobs AS p
                      WHERE p.job_id = s.job_id AND p.consumer_id = s.consumer_id AND p.expires_at >= now())
     AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                      WHERE d.consumer = names[s.consumer_id] AND d.job_id = s.job_id
                        AND (d.status = 'pending_review'
                             OR d.resolved_at > now() - (s.expires_at - s.called_at)))
     AND (s.step <> '_job' OR NOT EXISTS (SELECT 1 FROM core.job_steps AS o
                                           WHERE o.job_id = s.job_id AND o.consumer_id = s.consumer_id
                                             AND o.step <> '_job'));
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;

REVOKE ALL ON FUNCTION core.delete_expired_steps(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.delete_expired_steps(integer) TO jobfence_cleanup;
