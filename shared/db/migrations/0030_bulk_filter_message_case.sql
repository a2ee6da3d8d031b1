-- A bulk operation's filter digest treats message filters that differ only in case as one filter.
--
-- The `message` filter matches case-insensitively (ILIKE), so `Timeout` and `TIMEOUT` select the same
-- dead letters. 0028's digest was taken over the filter's text as given, so it told the two apart, and
-- two operations could run over one set at once. The rows were still resolved once each, but the audit
-- showed two operations where the API promises one per kind and filter.
--
-- The digest now lowers the message with the database's lower(), the function ILIKE folds case with,
-- so two texts the match treats alike have one digest. The filter itself keeps the text as the
-- operator typed it. The rest of the filter is digested as before: its jsonb text, with key order
-- normalised. Declared IMMUTABLE although convert_to is only STABLE: a database's encoding never
-- changes (as core.error_fingerprint, migration 0011).
CREATE FUNCTION core.bulk_filter_digest(filter jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  -- jsonb's text never holds a raw line break, so the break sets the message apart unambiguously.
  SELECT sha256(convert_to((filter - 'message')::text || coalesce(E'\n' || lower(filter ->> 'message'), ''), 'UTF8'))
$$;

COMMENT ON FUNCTION core.bulk_filter_digest(jsonb) IS
  'The identity of a bulk operation''s filter: SHA-256 of its jsonb text without the message, and the message lowered as ILIKE compares it.';

REVOKE ALL ON FUNCTION core.bulk_filter_digest(jsonb) FROM PUBLIC;
-- Called by the generated column, so by the one writer of core.bulk_operations.
GRANT EXECUTE ON FUNCTION core.bulk_filter_digest(jsonb) TO jobfence_ops;

-- Running operations that are now duplicates of an older one (same kind, same rows) are cancelled,
-- the oldest kept, as 0028 did; the rows they had not reached stay pending review.
UPDATE core.bulk_operations AS o
   SET status = 'cancelled',
       cancelled_by = 'jobfence migration 0030 (a duplicate of an older running operation: its message differed only in case)',
       finished_at = now()
 WHERE o.status = 'running'
   AND EXISTS (SELECT 1 FROM core.bulk_operations AS e
                WHERE e.status = 'running' AND e.kind = o.kind
                  AND core.bulk_filter_digest(e.filter) = core.bulk_filter_digest(o.filter)
                  AND (e.submitted_at, e.id) < (o.submitted_at, o.id));

-- The column is computed anew (its index goes with it).
ALTER TABLE core.bulk_operations DROP COLUMN filter_digest;
ALTER TABLE core.bulk_operations
  ADD COLUMN filter_digest bytea GENERATED ALWAYS AS (core.bulk_filter_digest(filter)) STORED;

COMMENT ON COLUMN core.bulk_operations.filter_digest IS
  'core.bulk_filter_digest(filter), computed by the database: at most one running operation per kind and digest.';

CREATE UNIQUE INDEX bulk_operations_one_running_per_filter
  ON core.bulk_operations (kind, filter_digest) WHERE status = 'running';
