-- The outbox: follow-up messages a job's work sends to other consumers' queues.
--
-- A row is written in the job's fence transaction, so it exists exactly when the job's effect
-- committed. The harness sends it right after COMMIT and deletes it; a relay on a schedule sends
-- what a crash left behind (FOR UPDATE SKIP LOCKED, so relays never wait on each other), and moves
-- a row it could not send after bounded retries into core.dead_letters as `undelivered`, for the
-- target consumer, replayable like any other dead letter. Sent rows leave at once, so the table
-- holds only what is in flight or being retried.
--
-- A follow-up's job_id is derived from its parent's (consumer, job_id), its target and the name
-- or index the author gave it: sending a row twice (a relay that crashed between the send and the
-- DELETE, the relay after COMMIT racing the scheduled one) is absorbed by the target's fence.

CREATE TABLE core.outbox (
  -- The sending consumer: row-level security limits each consumer to its own rows.
  consumer        text        NOT NULL,
  parent_job_id   text        NOT NULL,
  -- The receiving consumer; its queue URL is the deployment's, never the row's.
  target          text        NOT NULL,
  job_id          text        NOT NULL,
  tenant_id       text        NOT NULL,
  correlation_id  text        NOT NULL,
  -- The message body: the follow-up's job envelope as JSON text, sent as it is.
  body            text        NOT NULL,
  -- The follow-up job's fingerprint, which its undelivered dead letter carries.
  job_fingerprint bytea       NOT NULL,
  -- FIFO targets: the message group the author chose (NULL: the tenant's).
  group_id        text,
  -- W3C trace context of the sending job's span (NULL when none was active).
  traceparent     text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  -- Sends the scheduled relay tried and failed, and when it tries next. The relay right after
  -- COMMIT counts none: it has this long before the scheduled relay may take the row too.
  attempts        integer     NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now() + interval '30 seconds',
  last_error      jsonb,
  -- The sender is part of the key: no consumer's row can take the key of another's follow-up (a
  -- follow-up's job id is derived from its parent's consumer, so legitimate rows never collide).
  CONSTRAINT outbox_pkey PRIMARY KEY (consumer, target, job_id),
  -- A target is a consumer of this database: a row can name no other (and no dead letter it
  -- becomes can be filed under a name no deployment registered).
  CONSTRAINT outbox_target_registered FOREIGN KEY (target) REFERENCES core.consumer_roles (consumer),
  CONSTRAINT outbox_consumer_name CHECK ((consumer COLLATE "C") ~ '^[a-z][a-z0-9-]{0,62}$'),
  CONSTRAINT outbox_target_name CHECK ((target COLLATE "C") ~ '^[a-z][a-z0-9-]{0,62}$'),
  CONSTRAINT outbox_parent_job_id_length CHECK (char_length(parent_job_id) BETWEEN 1 AND 255),
  CONSTRAINT outbox_job_id_length CHECK (char_length(job_id) BETWEEN 1 AND 255),
  CONSTRAINT outbox_tenant_id_length CHECK (char_length(tenant_id) <= 255),
  CONSTRAINT outbox_correlation_id_length CHECK (char_length(correlation_id) BETWEEN 1 AND 255),
  -- SQS's largest message; the harness refuses a larger one when the work sends it.
  CONSTRAINT outbox_body_size CHECK (octet_length(body) BETWEEN 2 AND 1048576),
  CONSTRAINT outbox_job_fingerprint_length CHECK (octet_length(job_fingerprint) = 16),
  CONSTRAINT outbox_group_id_token CHECK (group_id IS NULL OR char_length(group_id) BETWEEN 1 AND 128),
  CONSTRAINT outbox_traceparent_length CHECK (traceparent IS NULL OR char_length(traceparent) <= 512),
  CONSTRAINT outbox_attempts_bounded CHECK (attempts BETWEEN 0 AND 1000),
  CONSTRAINT outbox_last_error_shape CHECK (
    last_error IS NULL OR coalesce(jsonb_typeof(last_error) = 'object' AND octet_length(last_error::text) <= 4096, false)
  )
);

-- The scheduled relay's scan: one consumer's due rows, oldest first.
CREATE INDEX outbox_due_idx ON core.outbox (consumer, next_attempt_at);

COMMENT ON TABLE core.outbox IS
  'Follow-up messages written in their parent job''s fence transaction; sent after COMMIT, deleted once sent (docs/design.md §11).';

ALTER TABLE core.outbox ENABLE ROW LEVEL SECURITY;
CREATE POLICY consumer_own_outbox ON core.outbox FOR ALL TO jobfence_consumer
  USING (consumer = (SELECT core.session_consumer()))
  WITH CHECK (consumer = (SELECT core.session_consumer()));
CREATE POLICY ops_reads_outbox ON core.outbox FOR SELECT TO jobfence_ops USING (true);

-- A consumer writes a row's content; the database writes its time and retry state, which only the
-- relay's UPDATE changes.
GRANT SELECT, DELETE ON core.outbox TO jobfence_consumer;
GRANT INSERT (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint,
              group_id, traceparent)
   ON core.outbox TO jobfence_consumer;
GRANT UPDATE (attempts, next_attempt_at, last_error) ON core.outbox TO jobfence_consumer;
GRANT SELECT ON core.outbox TO jobfence_ops;

ALTER TABLE core.dead_letters
  DROP CONSTRAINT dead_letters_error_kind_known,
  ADD CONSTRAINT dead_letters_error_kind_known
    CHECK (error_kind IN ('poison', 'hard', 'exhausted', 'unrecorded', 'conflict', 'interrupted', 'undelivered'));

-- Moves an outbox row of `sender` the relay could not send into core.dead_letters as `undelivered`: the
-- follow-up is the target consumer's job, so the row is the target's, with the target's queue, and
-- a replay sends it there like any dead letter. Runs with its owner's rights, past row-level
-- security (a consumer may not write another consumer's dead letters), so it checks what the
-- caller may move: a row of a consumer whose role the session's login holds, to a queue a replay
-- of the target may use. The content comes from the row, not the caller; its attempts are the
-- row's failed sends and the one that just failed; `message_group` is the group it was sent with
-- (FIFO targets: the author's or the tenant's, as SQS took it), which a replay sends it with. Returns the dead letter's
-- id and whether this call created it (false: the same body was already pending), or no row when
-- there was nothing to move.
CREATE FUNCTION core.outbox_undelivered(sender text, target_name text, follow_up_job_id text, queue_url text, message_group text, error jsonb)
RETURNS TABLE (id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  moved          core.outbox;
  payload        jsonb;
  dead_letter_id uuid;
BEGIN
  DELETE FROM core.outbox AS o
   WHERE o.target = target_name AND o.job_id = follow_up_job_id
     AND o.consumer = sender
     AND EXISTS (SELECT 1 FROM core.consumer_roles AS c JOIN pg_catalog.pg_roles AS r ON r.rolname = c.role_name
                  WHERE c.consumer = sender AND pg_has_role(session_user, r.oid, 'MEMBER'))
  RETURNING o.* INTO moved;
  IF NOT FOUND THEN
    RETURN;
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
  INSERT INTO core.dead_letters AS d
    (job_id, consumer, queue, tenant_id, correlation_id, body_form, body, payload, message_attributes,
     attempts, error_kind, last_error, job_fingerprint, attempt_history)
  VALUES (moved.job_id, moved.target, queue_url, moved.tenant_id, moved.correlation_id, 'text', moved.body, payload,
          jsonb_strip_nulls(jsonb_build_object(
            'message_group_id', message_group,
            'parent', jsonb_build_object('consumer', moved.consumer, 'job_id', moved.parent_job_id),
            'outbox_created_at', moved.created_at,
            'message_attributes', CASE WHEN moved.traceparent IS NULL THEN '{}'::jsonb
              ELSE jsonb_build_object('traceparent', jsonb_build_object('dataType', 'String', 'stringValue', moved.traceparent)) END)),
          moved.attempts + 1, 'undelivered', error, moved.job_fingerprint, '[]'::jsonb)
  ON CONFLICT (consumer, job_id, body_fingerprint) WHERE status = 'pending_review' DO NOTHING
  RETURNING d.id INTO dead_letter_id;
  IF dead_letter_id IS NOT NULL THEN
    RETURN QUERY SELECT dead_letter_id, true;
    RETURN;
  END IF;
  RETURN QUERY SELECT d.id, false FROM core.dead_letters AS d
    WHERE d.consumer = moved.target AND d.job_id = moved.job_id AND d.status = 'pending_review'
      AND d.body_fingerprint = core.dead_letter_body_fingerprint(moved.body, NULL);
END
$$;

REVOKE ALL ON FUNCTION core.outbox_undelivered(text, text, text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outbox_undelivered(text, text, text, text, text, jsonb) TO jobfence_consumer;

-- A replay, and the move above, may not send one consumer's dead letter to a queue registered for
-- another. A consumer writes its dead letters' `queue`; until now a consumer with no queue
-- registered was unrestricted, so a row of it (or an undelivered follow-up filed under it) naming
-- another consumer's queue would have been replayed there.
CREATE OR REPLACE FUNCTION core.replay_queue_allowed(consumer text, queue text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT coalesce((SELECT cardinality(c.queues) = 0 OR replay_queue_allowed.queue = ANY (c.queues)
                     FROM core.consumer_roles AS c WHERE c.consumer = replay_queue_allowed.consumer), true)
     AND NOT EXISTS (SELECT 1 FROM core.consumer_roles AS o
                      WHERE o.consumer <> replay_queue_allowed.consumer AND replay_queue_allowed.queue = ANY (o.queues))
$$;
