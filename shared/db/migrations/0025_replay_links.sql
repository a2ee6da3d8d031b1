-- A replayed dead letter links to the dead letter its replay produced (issue 32).
--
-- A replay sends the body exactly as it was received and resolves the row as `replayed`; when the
-- copy fails again, the consumer records a new pending dead letter of the same (consumer, job_id,
-- body) (a failure is never merged into a row leaving pending_review, migration 0020). Nothing
-- tied the two: an operator who replayed a row and saw it come back had to search by job id.
--
-- The new row names the row it came from in `replay_of`, written by the database at insert: the
-- latest `replayed` row of the same consumer, job id and body that no other row names yet. A body
-- from which no job id could be read is filed under its SQS message id, and every copy, the
-- replayed one included, has a message id of its own: such a row is matched by consumer and body
-- alone, with a replayed row that was filed under its message id too. The
-- other direction (the replayed row's successor) is read through the unique index below, so a
-- resolved row stays append-only (its guard, migration 0016, is unchanged).
--
-- Who may see or set it:
-- * no role may write the column: it is not in any INSERT or UPDATE grant, and the trigger sets it
--   whatever an INSERT gives;
-- * the trigger runs with its owner's rights (an undelivered row is written by
--   core.outbox_undelivered for the target, and a consumer may not read resolved_at), and it looks
--   only at rows of NEW.consumer; a row a consumer may not insert is refused before it runs
--   (core.dead_letters_as_own_consumer, migration 0026), so it never reads or locks another
--   consumer's rows for one;
-- * consumers' column grants on core.dead_letters do not include it: no consumer reads any link,
--   its own or another's. jobfence_ops reads it with the rest of the row.
-- A failure of another copy of the same message after the replay (a duplicate still in the queue)
-- is linked the same way: from the row's point of view it is what became of the job next.

ALTER TABLE core.dead_letters
  ADD COLUMN replay_of uuid REFERENCES core.dead_letters (id);

COMMENT ON COLUMN core.dead_letters.replay_of IS
  'The replayed dead letter this one came from: the latest replayed row of the same consumer, job id and body not yet linked, set by core.dead_letters_link_replay at insert; NULL otherwise.';

-- One successor per replayed row, and the index its reads (and the trigger's "not yet linked") use.
CREATE UNIQUE INDEX dead_letters_one_per_replay ON core.dead_letters (replay_of) WHERE replay_of IS NOT NULL;

-- Candidates of a row with a job id: the replayed rows of its (consumer, job_id, body). (Its
-- pending one has the unique index dead_letters_one_pending_per_body.)
CREATE INDEX dead_letters_replayed_job_body_idx
  ON core.dead_letters (consumer, job_id, body_fingerprint)
  WHERE status = 'replayed';

-- Candidates of a row filed under its message id: the rows of its (consumer, body) filed so too.
CREATE INDEX dead_letters_message_id_body_idx
  ON core.dead_letters (consumer, body_fingerprint, status, created_at)
  WHERE status IN ('pending_review', 'replayed') AND job_id = (message_attributes ->> 'message_id');

CREATE FUNCTION core.dead_letters_link_replay() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  -- Pending rows of one body filed under their message ids that a write waits for at most (below):
  -- identical unreadable bodies are few; a flood of them must not make each write lock them all.
  waited_for_at_most constant integer := 100;
  candidate record;
BEGIN
  -- Runs after dead_letters_fingerprint_body (triggers fire in name order): the fingerprint is
  -- the database's own.
  IF NEW.job_id IS DISTINCT FROM NEW.message_attributes ->> 'message_id' THEN
    -- A replay holds its row FOR UPDATE while it sends the copy, and the copy may fail before the
    -- replay commits. That row is the pending one of this job id and body, if any: waited for here
    -- (as core.hold_pending_dead_letter does), it is then seen `replayed` by the next statement.
    -- Found through the job id alone, row by row: a query naming the status as well is planned
    -- over a partial index of every pending row while the table has no statistics yet (a large
    -- INSERT … SELECT), and then reads all of them for every row inserted.
    FOR candidate IN SELECT r.id, r.consumer, r.body_fingerprint, r.status FROM core.dead_letters AS r
                      WHERE r.job_id = NEW.job_id AND r.consumer = NEW.consumer LOOP
      IF candidate.consumer = NEW.consumer AND candidate.body_fingerprint = NEW.body_fingerprint
         AND candidate.status = 'pending_review' THEN
        PERFORM 1 FROM core.dead_letters AS r WHERE r.id = candidate.id FOR SHARE OF r;
      END IF;
    END LOOP;
    -- The replayed row taken is locked (NO KEY UPDATE: the new row's foreign key still shares it)
    -- and a row another write is linking right now is skipped: two failures written at once link
    -- two rows, or one and none, never both the same (which the unique index would refuse).
    NEW.replay_of := (
      SELECT r.id FROM core.dead_letters AS r
       WHERE r.consumer = NEW.consumer AND r.job_id = NEW.job_id AND r.body_fingerprint = NEW.body_fingerprint
         AND r.status = 'replayed'
         AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS s WHERE s.replay_of = r.id)
       ORDER BY r.resolved_at DESC, r.id DESC
       LIMIT 1
       FOR NO KEY UPDATE OF r SKIP LOCKED);
  ELSE
    -- Filed under its own message id (no job id could be read): every copy has another, so the
    -- pending rows of the same body filed so are the ones a replay may be sending; the newest are
    -- waited for.
    -- Locked oldest first, the order in which a bulk operation's chunk locks them: the two never
    -- wait on each other in opposite orders (a deadlock).
    PERFORM 1 FROM (
      SELECT r.id FROM core.dead_letters AS r
       WHERE r.consumer = NEW.consumer AND r.body_fingerprint = NEW.body_fingerprint
         AND r.status = 'pending_review' AND r.job_id = (r.message_attributes ->> 'message_id')
       ORDER BY r.created_at DESC
       LIMIT waited_for_at_most) AS newest
      JOIN core.dead_letters AS r ON r.id = newest.id
     ORDER BY r.created_at, r.id
       FOR SHARE OF r;
    NEW.replay_of := (
      SELECT r.id FROM core.dead_letters AS r
       WHERE r.consumer = NEW.consumer AND r.body_fingerprint = NEW.body_fingerprint
         AND r.status = 'replayed' AND r.job_id = (r.message_attributes ->> 'message_id')
         AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS s WHERE s.replay_of = r.id)
       ORDER BY r.resolved_at DESC, r.id DESC
       LIMIT 1
       FOR NO KEY UPDATE OF r SKIP LOCKED);
  END IF;
  RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION core.dead_letters_link_replay() FROM PUBLIC;

CREATE TRIGGER dead_letters_link_replay
  BEFORE INSERT ON core.dead_letters
  FOR EACH ROW EXECUTE FUNCTION core.dead_letters_link_replay();

-- As in 0019: the ops role's view of every dead letter, recreated to show the new column.
DROP VIEW core.ops_dead_letters;
CREATE VIEW core.ops_dead_letters WITH (security_invoker = false) AS
  SELECT * FROM core.dead_letters WHERE pg_catalog.pg_has_role('jobfence_ops', 'USAGE');
COMMENT ON VIEW core.ops_dead_letters IS
  'Every dead letter, for jobfence_ops''s filtered reads: planned with the table''s statistics, which row-level security withholds from a session subject to it (ILIKE is not leakproof).';
REVOKE ALL ON core.ops_dead_letters FROM PUBLIC;
GRANT SELECT ON core.ops_dead_letters TO jobfence_ops;
