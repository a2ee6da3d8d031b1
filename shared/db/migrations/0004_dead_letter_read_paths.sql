-- Read paths of the dead-letter API at scale (issue: p95 < 50 ms with a million rows).
--
-- Stats read a small table of counts kept by triggers instead of counting the big one: a dead
-- letter is written rarely, so one counter update per insert or transition costs nothing that
-- matters, while a GROUP BY over a million rows costs hundreds of milliseconds.

CREATE TABLE core.dead_letter_counts (
  consumer   text   NOT NULL,
  status     text   NOT NULL,
  error_kind text   NOT NULL,
  count      bigint NOT NULL,
  PRIMARY KEY (consumer, status, error_kind)
);

COMMENT ON TABLE core.dead_letter_counts IS
  'Dead letters per (consumer, status, error_kind), maintained by triggers on core.dead_letters; read by the stats endpoint.';

-- Statement-level triggers with transition tables: one counter write per key and statement, not
-- per row (a bulk replay of 500 rows touches a handful of counters once each), and the keys are
-- written in sorted order, so two concurrent statements lock counters in the same order and
-- cannot deadlock on them.
--
-- SECURITY DEFINER: the counters are the migrator's bookkeeping. Writers of dead letters (the
-- consumer and ops roles) get no privilege on this table; the trigger acts for them.
CREATE FUNCTION core.dead_letters_count_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
  INSERT INTO core.dead_letter_counts AS c (consumer, status, error_kind, count)
  SELECT consumer, status, error_kind, count(*) FROM inserted GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (consumer, status, error_kind) DO UPDATE SET count = c.count + EXCLUDED.count;
  RETURN NULL;
END
$$;

CREATE FUNCTION core.dead_letters_count_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
  INSERT INTO core.dead_letter_counts AS c (consumer, status, error_kind, count)
  SELECT consumer, status, error_kind, sum(delta)
    FROM (SELECT consumer, status, error_kind, -1 AS delta FROM old_rows
          UNION ALL
          SELECT consumer, status, error_kind, 1 FROM new_rows) AS d
   GROUP BY 1, 2, 3
  HAVING sum(delta) <> 0
   ORDER BY 1, 2, 3
  ON CONFLICT (consumer, status, error_kind) DO UPDATE SET count = c.count + EXCLUDED.count;
  RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION core.dead_letters_count_inserted() FROM PUBLIC;
REVOKE ALL ON FUNCTION core.dead_letters_count_updated() FROM PUBLIC;

CREATE TRIGGER dead_letters_count_inserted
  AFTER INSERT ON core.dead_letters REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION core.dead_letters_count_inserted();

CREATE TRIGGER dead_letters_count_updated
  AFTER UPDATE ON core.dead_letters REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION core.dead_letters_count_updated();

INSERT INTO core.dead_letter_counts (consumer, status, error_kind, count)
SELECT consumer, status, error_kind, count(*) FROM core.dead_letters GROUP BY 1, 2, 3;

GRANT SELECT ON core.dead_letter_counts TO jobfence_ops;

-- Filters the list endpoint offers that had no index of their own: each keeps the keyset columns
-- behind it so a page is one index range scan, whatever the filter's selectivity.
CREATE INDEX dead_letters_queue_created_idx ON core.dead_letters (queue, created_at, id);
CREATE INDEX dead_letters_error_kind_created_idx ON core.dead_letters (error_kind, created_at, id);
-- "Pending for consumer X", the most common operator query.
CREATE INDEX dead_letters_consumer_status_created_idx ON core.dead_letters (consumer, status, created_at, id);
-- Oldest pending per consumer, read once per consumer by stats.
CREATE INDEX dead_letters_pending_consumer_created_idx
  ON core.dead_letters (consumer, created_at, id) WHERE status = 'pending_review';
