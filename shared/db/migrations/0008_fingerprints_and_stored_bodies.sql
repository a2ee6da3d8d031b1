-- Fingerprints, conflicts and the stored body (SPEC §2, §3, §5).
--
-- 1. The fence records what the job is: a fingerprint of its tenant and payload (RFC 8785
--    canonical JSON, first 128 bits of SHA-256). A duplicate whose fingerprint differs is a
--    conflict: one job id, two different jobs. Fences written before this migration have none and
--    count as equal.
-- 2. A dead letter keeps the body exactly as received, in a form marked by a column: `text` when
--    PostgreSQL's text can hold it, `utf16` (the UTF-16 code units, little-endian, in bytea) when it
--    cannot (U+0000, lone surrogates). No content can make that column refuse a write. `payload`
--    keeps the envelope as jsonb when jsonb accepts the body as an object, NULL otherwise.
-- 3. Writing a dead letter is idempotent per distinct message content: one pending row per
--    (consumer, job_id, body fingerprint), the fingerprint computed here from the stored body so
--    no writer can claim another body's row.
-- 4. Blank checks compare under the "C" collation: under ICU or some libc locales `[:space:]`
--    includes characters (U+0085, U+00A0, …) that the harness does not count as blank, and a check
--    that disagrees with the harness is a dead letter that can never be written.

-- Stored as uuid: PostgreSQL's fixed-width 16-byte type needs no length header and no alignment,
-- so a fence grows by 16 bytes where a bytea would cost 24 (bench/fence-storage.ts). It is read
-- back as its 16 bytes with uuid_send(); nothing treats it as a UUID.
ALTER TABLE core.processed_jobs
  ADD COLUMN fingerprint uuid,
  DROP CONSTRAINT processed_jobs_consumer_not_blank,
  ADD CONSTRAINT processed_jobs_consumer_not_blank
    CHECK ((consumer COLLATE "C") ~ '[^[:space:]]' AND char_length(consumer) <= 128);

COMMENT ON COLUMN core.processed_jobs.fingerprint IS
  'First 16 bytes of SHA-256 over the RFC 8785 form of {tenant_id, payload}, as uuid (uuid_send gives the bytes); NULL on fences written before fingerprints existed (they count as equal).';

ALTER TABLE core.dead_letters
  ALTER COLUMN payload DROP NOT NULL,
  ADD COLUMN body_form text,
  ADD COLUMN body text,
  ADD COLUMN body_utf16 bytea,
  ADD COLUMN body_fingerprint bytea,
  ADD COLUMN job_fingerprint bytea,
  ADD COLUMN fence_fingerprint bytea;

COMMENT ON COLUMN core.dead_letters.payload IS
  'The envelope as jsonb when jsonb accepts the body as an object; NULL otherwise. Replay never reads it: it sends the stored body.';
COMMENT ON COLUMN core.dead_letters.body_form IS
  'How the body is stored: text (column body, exactly as received) or utf16 (column body_utf16, the UTF-16 code units little-endian, for bodies text cannot hold).';
COMMENT ON COLUMN core.dead_letters.body_fingerprint IS
  'SHA-256 of the form''s tag and the stored bytes (core.dead_letter_body_fingerprint); set by trigger. One pending row per (consumer, job_id, body_fingerprint).';
COMMENT ON COLUMN core.dead_letters.job_fingerprint IS
  'The fingerprint of the job the message carried (as the fence would record it), when its envelope could be read.';
COMMENT ON COLUMN core.dead_letters.fence_fingerprint IS
  'Conflicts only: the fingerprint of the applied job whose fence this message collided with.';

-- SHA-256 of a tag naming the form and the stored bytes: 't' || UTF-8 of the text, or 'u' || the
-- UTF-16 bytes. The tag keeps the forms apart (the UTF-16 bytes of one body can be the UTF-8 bytes
-- of another). shared/dead-letters/stored-body.ts computes the same.
CREATE FUNCTION core.dead_letter_body_fingerprint(body text, body_utf16 bytea) RETURNS bytea
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
  SELECT CASE WHEN body IS NOT NULL THEN sha256(convert_to('t', 'UTF8') || convert_to(body, 'UTF8'))
              ELSE sha256(convert_to('u', 'UTF8') || body_utf16) END
$$;

-- Called by the insert trigger below, so as the writer of the row.
REVOKE ALL ON FUNCTION core.dead_letter_body_fingerprint(text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.dead_letter_body_fingerprint(text, bytea) TO jobfence_consumer;

-- Rows written before this migration stored the body inside payload: the envelope itself, or a
-- {"raw": …} wrapper for a body jsonb could not hold. They move to the new form once, here (the
-- append-only guard is lifted for this statement only). A wrapper with "nul": "escaped" kept each
-- U+0000 as the six characters \u0000 and one with "surrogates": "replaced" had already lost the
-- lone surrogates; those bodies were not exact before and cannot become exact now.
ALTER TABLE core.dead_letters DISABLE TRIGGER dead_letters_guard_update;
UPDATE core.dead_letters
   SET body_form = 'text',
       body = CASE WHEN jsonb_typeof(payload -> 'raw') = 'string' AND (payload - 'raw' - 'nul' - 'surrogates') = '{}'::jsonb
                   THEN payload ->> 'raw' ELSE payload::text END,
       payload = CASE WHEN jsonb_typeof(payload -> 'raw') = 'string' AND (payload - 'raw' - 'nul' - 'surrogates') = '{}'::jsonb
                      THEN NULL ELSE payload END;
UPDATE core.dead_letters SET body_fingerprint = core.dead_letter_body_fingerprint(body, NULL);
ALTER TABLE core.dead_letters ENABLE TRIGGER dead_letters_guard_update;

ALTER TABLE core.dead_letters
  ALTER COLUMN body_form SET NOT NULL,
  ALTER COLUMN body_fingerprint SET NOT NULL,
  ADD CONSTRAINT dead_letters_body_form_known CHECK (body_form IN ('text', 'utf16')),
  -- Exactly the column the form names holds the body.
  ADD CONSTRAINT dead_letters_body_stored CHECK (
    (body_form = 'text') = (body IS NOT NULL) AND (body_form = 'utf16') = (body_utf16 IS NOT NULL)
  ),
  ADD CONSTRAINT dead_letters_utf16_even CHECK (octet_length(body_utf16) % 2 = 0),
  ADD CONSTRAINT dead_letters_job_fingerprint_length CHECK (octet_length(job_fingerprint) = 16),
  -- A conflict names two different jobs under one id: the message's and the applied one's.
  ADD CONSTRAINT dead_letters_conflict_fingerprints CHECK (
    (error_kind = 'conflict') = (fence_fingerprint IS NOT NULL)
    AND (error_kind <> 'conflict' OR (job_fingerprint IS NOT NULL AND job_fingerprint <> fence_fingerprint))
  ),
  DROP CONSTRAINT dead_letters_error_kind_known,
  ADD CONSTRAINT dead_letters_error_kind_known
    CHECK (error_kind IN ('poison', 'hard', 'exhausted', 'unrecorded', 'conflict')),
  DROP CONSTRAINT dead_letters_consumer_not_blank,
  ADD CONSTRAINT dead_letters_consumer_not_blank
    CHECK ((consumer COLLATE "C") ~ '[^[:space:]]' AND char_length(consumer) <= 128),
  DROP CONSTRAINT dead_letters_queue_not_blank,
  ADD CONSTRAINT dead_letters_queue_not_blank CHECK ((queue COLLATE "C") ~ '[^[:space:]]'),
  DROP CONSTRAINT dead_letters_correlation_id_not_blank,
  ADD CONSTRAINT dead_letters_correlation_id_not_blank CHECK ((correlation_id COLLATE "C") ~ '[^[:space:]]'),
  DROP CONSTRAINT dead_letters_resolved_by_not_blank,
  ADD CONSTRAINT dead_letters_resolved_by_not_blank
    CHECK (resolved_by IS NULL OR (resolved_by COLLATE "C") ~ '[^[:space:]]'),
  DROP CONSTRAINT dead_letters_discard_reason_required,
  ADD CONSTRAINT dead_letters_discard_reason_required CHECK (
    CASE WHEN status = 'discarded'
      THEN discard_reason IS NOT NULL AND (discard_reason COLLATE "C") ~ '[^[:space:]]' AND char_length(discard_reason) <= 2000
      ELSE discard_reason IS NULL
    END
  );

-- The body fingerprint is the database's to compute: a writer that sent another body's fingerprint
-- could otherwise fold a different message into that body's pending row. One that sends a wrong
-- one is refused, so a bug in the harness's copy cannot pass unseen.
CREATE FUNCTION core.dead_letters_fingerprint_body() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE
  computed bytea := core.dead_letter_body_fingerprint(NEW.body, NEW.body_utf16);
BEGIN
  IF NEW.body_fingerprint IS NOT NULL AND NEW.body_fingerprint <> computed THEN
    RAISE EXCEPTION 'body_fingerprint does not match the stored body'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_body_fingerprint',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  NEW.body_fingerprint := computed;
  RETURN NEW;
END
$$;

CREATE TRIGGER dead_letters_fingerprint_body
  BEFORE INSERT ON core.dead_letters
  FOR EACH ROW EXECUTE FUNCTION core.dead_letters_fingerprint_body();

DROP INDEX core.dead_letters_one_pending_per_job;
-- At most one pending dead letter per distinct message content of a job: the same body delivered
-- again (a crash between the insert and the ack) finds its row; a different body gets its own.
CREATE UNIQUE INDEX dead_letters_one_pending_per_body
  ON core.dead_letters (consumer, job_id, body_fingerprint)
  WHERE status = 'pending_review';

GRANT SELECT (body_fingerprint, error_kind) ON core.dead_letters TO jobfence_consumer;

-- The harness's COMMIT check (SPEC §3): the transaction it commits must be the one that inserted
-- the fence. Work that ended it some way the statement guard did not see (and opened another) is
-- caught here, before COMMIT runs, instead of committing a transaction nobody checked.
CREATE FUNCTION core.assert_fence_transaction(expected xid8) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
  IF pg_current_xact_id_if_assigned() IS DISTINCT FROM expected THEN
    RAISE EXCEPTION 'the transaction being committed is not the fence transaction % (it is %)',
      expected, coalesce(pg_current_xact_id_if_assigned()::text, 'one without writes')
      -- A code of jobfence's own: the harness tells this apart from 25P02 (a transaction the work
      -- let fail, which is a plain transient failure).
      USING ERRCODE = 'JF001';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION core.assert_fence_transaction(xid8) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.assert_fence_transaction(xid8) TO jobfence_consumer;
