-- The reference consumer's own tables. The ledger deliberately has no uniqueness on job_id: the
-- fence in core.processed_jobs is the only thing that keeps a job from being entered twice, which
-- is exactly what the acceptance tests need to observe.

CREATE SCHEMA award_points;

CREATE TABLE award_points.ledger (
  id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id     text        NOT NULL,
  tenant_id  text        NOT NULL,
  user_id    text        NOT NULL,
  points     integer     NOT NULL CHECK (points > 0),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ledger_job_id_idx ON award_points.ledger (job_id);

CREATE TABLE award_points.balances (
  tenant_id  text        NOT NULL,
  user_id    text        NOT NULL,
  balance    bigint      NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, user_id)
);

REVOKE ALL ON SCHEMA award_points FROM PUBLIC;
GRANT USAGE ON SCHEMA award_points TO jobfence_consumer;
GRANT INSERT ON award_points.ledger TO jobfence_consumer;
GRANT SELECT, INSERT, UPDATE ON award_points.balances TO jobfence_consumer;
