-- The service's own migration, applied by the service (not by jobfence): the invoices the
-- record-payment consumer pays, granted to the consumer's group role, which `jobfence migrate
-- --consumer record-payment` created.
CREATE SCHEMA billing;
CREATE TABLE billing.invoices (
  id text PRIMARY KEY,
  amount_cents integer NOT NULL CHECK (amount_cents > 0),
  paid_cents integer NOT NULL DEFAULT 0 CHECK (paid_cents >= 0)
);
GRANT USAGE ON SCHEMA billing TO jobfence_consumer_record_payment;
GRANT SELECT, UPDATE (paid_cents) ON billing.invoices TO jobfence_consumer_record_payment;
