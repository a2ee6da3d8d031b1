-- The idempotency fence (SPEC §3). One row per (job_id, consumer), inserted in the same
-- transaction as the job's work: the row exists if and only if the work committed.

CREATE TABLE core.processed_jobs (
  job_id       text        NOT NULL,
  consumer     text        NOT NULL,
  tenant_id    text        NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  CONSTRAINT processed_jobs_pkey PRIMARY KEY (job_id, consumer),
  -- SPEC §2: a job_id is a non-empty string of at most 255 characters.
  CONSTRAINT processed_jobs_job_id_length CHECK (char_length(job_id) BETWEEN 1 AND 255),
  CONSTRAINT processed_jobs_consumer_not_blank CHECK (consumer ~ '[^[:space:]]' AND char_length(consumer) <= 128),
  -- A fence that expires at or before it was written would let cleanup delete it while the job's
  -- retries can still arrive (SPEC §7).
  CONSTRAINT processed_jobs_expires_after_processed CHECK (expires_at > processed_at)
);

COMMENT ON TABLE core.processed_jobs IS
  'Idempotency fence: a row means the job''s work committed for that consumer. Written in the work transaction; deleted only by TTL cleanup after expires_at.';

-- TTL cleanup deletes "expires_at < now()" in bounded batches; this index lets each batch find
-- its rows without scanning the table.
CREATE INDEX processed_jobs_expires_at_idx ON core.processed_jobs (expires_at);
