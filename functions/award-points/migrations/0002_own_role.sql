-- The ledger and balances belong to award-points alone: granted to its own group role (created by
-- the migration runner before this set) instead of the role every consumer shares.

REVOKE ALL ON award_points.ledger, award_points.balances FROM jobfence_consumer;
REVOKE ALL ON SCHEMA award_points FROM jobfence_consumer;

GRANT USAGE ON SCHEMA award_points TO jobfence_consumer_award_points;
GRANT INSERT ON award_points.ledger TO jobfence_consumer_award_points;
GRANT SELECT, INSERT, UPDATE ON award_points.balances TO jobfence_consumer_award_points;
