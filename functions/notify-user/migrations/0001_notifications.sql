-- notify-user's own tables, granted to its group role alone (jobfence_consumer_notify_user, created
-- by the migration runner before this set): no other consumer reaches them. job_id is the primary
-- key: the fence already applies each job once; the key makes a second notification an error,
-- never a double.

CREATE SCHEMA notify_user;
REVOKE ALL ON SCHEMA notify_user FROM PUBLIC;

CREATE TABLE notify_user.notifications (
  job_id         text        PRIMARY KEY,
  tenant_id      text        NOT NULL,
  user_id        text        NOT NULL,
  kind           text        NOT NULL CHECK (kind IN ('points-awarded')),
  points         integer     NOT NULL CHECK (points > 0),
  -- The chain's correlation id: the award's, carried by the follow-up.
  correlation_id text        NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX notifications_user_idx ON notify_user.notifications (tenant_id, user_id, created_at);

GRANT USAGE ON SCHEMA notify_user TO jobfence_consumer_notify_user;
GRANT INSERT ON notify_user.notifications TO jobfence_consumer_notify_user;
