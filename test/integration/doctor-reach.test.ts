/**
 * What a consumer's role reaches beyond its own grants is checked like them: the doctor reports a
 * consumer reaching data it does not declare (above all another consumer's own) through an object
 * that runs as another role, an inheritance child, PUBLIC, PostgreSQL's own objects or a large
 * object. Each case is made on a real PostgreSQL by the service's SQL (as the migrator), is shown to
 * work as the consumer's role, and is a finding; the ordinary setup of a service's migration owning
 * its tables and granting them to consumers that declare them is none.
 */
import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { doctorDatabase } from "../../shared/commands/doctor.ts";
import { migrateDatabase } from "../../shared/commands/migrate.ts";
import { consumerSchemaName } from "../../shared/db/consumer-catalog.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import type { DataDeclaration } from "../../shared/doctor/declared-data.ts";
import { CHECK, type Finding } from "../../shared/doctor/findings.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

/** Consumer names of this run: roles are cluster-wide, and each run's are its own. */
const run = randomBytes(3).toString("hex");
const A = `reach-a-${run}`;
const B = `reach-b-${run}`;
const roleA = consumerRoleName(A);
const roleB = consumerRoleName(B);
/** B's own schema, named after it. */
const sb = consumerSchemaName(B);
const sa = consumerSchemaName(A);

/** Not about a role another test file made in the cluster meanwhile (their `jft_…` roles). */
const ours = (finding: Finding) => !/\bjft_/.test(`${finding.where} ${finding.what}`);

let db: TestDatabase | undefined;
afterEach(async () => {
  await db?.drop();
  db = undefined;
});

interface Case {
  readonly data?: { readonly a?: DataDeclaration; readonly b?: DataDeclaration };
  /** The service's SQL, run as the migrator after `jobfence migrate`. */
  readonly sql: string;
  /** Run as A's role: it succeeds, so A does reach what the finding names. */
  readonly probe: string;
}

/** Migrates a database for A and B, runs the case's SQL and probe, and returns the doctor's findings. */
async function findingsOf(c: Case): Promise<string[]> {
  db = await createTestDatabase();
  const consumers = [
    { name: A, ...(c.data?.a ? { data: c.data.a } : {}) },
    { name: B, ...(c.data?.b ? { data: c.data.b } : {}) },
  ];
  await migrateDatabase({ databaseUrl: db.url, consumers });
  await db.withClient((client) => client.query(c.sql));
  await db.withClient(async (client) => {
    await client.query("BEGIN");
    try {
      await client.query(`SET LOCAL ROLE ${roleA}`);
      await client.query(c.probe);
    } finally {
      await client.query("ROLLBACK");
    }
  });
  const report = await doctorDatabase({ databaseUrl: db.url, consumers, sets: deploymentMigrationSets() });
  return report.findings.filter(ours).map((f) => `${f.check} ${f.where}`);
}

/** B's own table, which B's role works on. */
const B_LEDGER = `CREATE SCHEMA ${sb}; CREATE TABLE ${sb}.ledger (x int); INSERT INTO ${sb}.ledger VALUES (7);
  GRANT USAGE ON SCHEMA ${sb} TO ${roleB}; GRANT SELECT, INSERT, UPDATE ON ${sb}.ledger TO ${roleB};`;

describe("the doctor follows what a consumer reaches through objects that run as another role", () => {
  it("a SECURITY DEFINER function A may execute, owned by another role, in A's own schema", async () => {
    const found = await findingsOf({
      sql: `${B_LEDGER}
        CREATE SCHEMA ${sa}; GRANT USAGE ON SCHEMA ${sa} TO ${roleA};
        CREATE FUNCTION ${sa}.peek() RETURNS SETOF int LANGUAGE sql SECURITY DEFINER
          SET search_path = pg_catalog, ${sa}, pg_temp AS 'SELECT x FROM ${sb}.ledger';
        REVOKE ALL ON FUNCTION ${sa}.peek() FROM PUBLIC; GRANT EXECUTE ON FUNCTION ${sa}.peek() TO ${roleA};`,
      probe: `SELECT * FROM ${sa}.peek()`,
    });
    expect(found).toEqual([`${CHECK.reachAsAnotherRole} function ${sa}.peek()`]);
  });

  it("a view (not security_invoker) owned by another role, over B's own table", async () => {
    const found = await findingsOf({
      sql: `${B_LEDGER}
        CREATE SCHEMA ${sa}; GRANT USAGE ON SCHEMA ${sa} TO ${roleA};
        CREATE VIEW ${sa}.theirs AS SELECT * FROM ${sb}.ledger; GRANT SELECT, UPDATE ON ${sa}.theirs TO ${roleA};`,
      probe: `UPDATE ${sa}.theirs SET x = 8`,
    });
    expect(found).toEqual([`${CHECK.reachAsAnotherRole} view ${sa}.theirs`]);
  });

  it("... and none for a security_invoker view, which reads with A's own rights (it cannot read B's table)", async () => {
    const found = await findingsOf({
      sql: `${B_LEDGER}
        CREATE SCHEMA ${sa}; GRANT USAGE ON SCHEMA ${sa} TO ${roleA};
        CREATE VIEW ${sa}.theirs WITH (security_invoker) AS SELECT * FROM ${sb}.ledger;
        GRANT SELECT ON ${sa}.theirs TO ${roleA};`,
      probe: `SELECT has_table_privilege('${sa}.theirs', 'SELECT')`,
    });
    expect(found).toEqual([]);
  });

  it("a rule on a table A declares and writes, whose action writes B's own table as the table's owner", async () => {
    const found = await findingsOf({
      data: { a: { tables: { "billing.orders": { privileges: ["INSERT"] } } } },
      sql: `${B_LEDGER}
        CREATE SCHEMA billing; CREATE TABLE billing.orders (x int);
        GRANT USAGE ON SCHEMA billing TO ${roleA}; GRANT INSERT ON billing.orders TO ${roleA};
        CREATE RULE mirror AS ON INSERT TO billing.orders DO ALSO INSERT INTO ${sb}.ledger VALUES (NEW.x);`,
      probe: "INSERT INTO billing.orders VALUES (99)",
    });
    expect(found).toEqual([`${CHECK.reachAsAnotherRole} rule mirror on billing.orders`]);
  });

  it("a SECURITY DEFINER trigger on a table A declares and writes, writing B's own table", async () => {
    const found = await findingsOf({
      data: { a: { tables: { "billing.orders": { privileges: ["INSERT"] } } } },
      sql: `${B_LEDGER}
        CREATE SCHEMA billing; CREATE TABLE billing.orders (x int);
        GRANT USAGE ON SCHEMA billing TO ${roleA}; GRANT INSERT ON billing.orders TO ${roleA};
        CREATE FUNCTION billing.mirror() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
          SET search_path = pg_catalog, billing, pg_temp
          AS $$BEGIN INSERT INTO ${sb}.ledger VALUES (NEW.x); RETURN NEW; END$$;
        REVOKE ALL ON FUNCTION billing.mirror() FROM PUBLIC;
        CREATE TRIGGER mirror AFTER INSERT ON billing.orders FOR EACH ROW EXECUTE FUNCTION billing.mirror();`,
      probe: "INSERT INTO billing.orders VALUES (99)",
    });
    expect(found).toEqual([`${CHECK.reachAsAnotherRole} trigger mirror on billing.orders`]);
  });

  it("an inheritance child in B's own schema of a table A declares", async () => {
    const found = await findingsOf({
      data: { a: { tables: { "billing.events": { privileges: ["SELECT", "DELETE"] } } } },
      sql: `CREATE SCHEMA billing; CREATE TABLE billing.events (x int);
        GRANT USAGE ON SCHEMA billing TO ${roleA}; GRANT SELECT, DELETE ON billing.events TO ${roleA};
        CREATE SCHEMA ${sb}; CREATE TABLE ${sb}.events () INHERITS (billing.events);
        INSERT INTO ${sb}.events VALUES (1);
        GRANT USAGE ON SCHEMA ${sb} TO ${roleB}; GRANT SELECT, INSERT, DELETE ON ${sb}.events TO ${roleB};`,
      probe: "DELETE FROM billing.events",
    });
    expect(found).toEqual([`${CHECK.inheritedReach} table ${sb}.events`]);
  });

  it("a foreign key ON DELETE CASCADE from B's own table into a table A declares and deletes from", async () => {
    const found = await findingsOf({
      data: { a: { tables: { "billing.customers": { privileges: ["SELECT", "DELETE"] } } } },
      sql: `CREATE SCHEMA billing; CREATE TABLE billing.customers (id int PRIMARY KEY);
        INSERT INTO billing.customers VALUES (1);
        GRANT USAGE ON SCHEMA billing TO ${roleA}; GRANT SELECT, DELETE ON billing.customers TO ${roleA};
        CREATE SCHEMA ${sb};
        CREATE TABLE ${sb}.orders (id int, customer int REFERENCES billing.customers ON DELETE CASCADE);
        INSERT INTO ${sb}.orders VALUES (10, 1);
        GRANT USAGE ON SCHEMA ${sb} TO ${roleB}; GRANT SELECT, INSERT, DELETE ON ${sb}.orders TO ${roleB};`,
      probe: "DELETE FROM billing.customers",
    });
    expect(found).toEqual([`${CHECK.reachAsAnotherRole} table ${sb}.orders`]);
  });
});

describe("the doctor counts what a consumer holds without a grant of its own", () => {
  it("a table in B's own schema that A declares, B's role holding nothing on it, B not sharing it", async () => {
    const found = await findingsOf({
      data: { a: { tables: { [`${sb}.secret`]: { privileges: ["SELECT"] } } } },
      sql: `${B_LEDGER} CREATE TABLE ${sb}.secret (x int);
        GRANT USAGE ON SCHEMA ${sb} TO ${roleA}; GRANT SELECT ON ${sb}.secret TO ${roleA};`,
      probe: `SELECT * FROM ${sb}.secret`,
    });
    expect(found).toEqual([`${CHECK.undeclaredSharing} table ${sb}.secret`]);
  });

  it("... and none when B declares it shared with A (and A with B, as every holder does)", async () => {
    const found = await findingsOf({
      data: {
        a: { tables: { [`${sb}.secret`]: { privileges: ["SELECT"], shared: [B] } } },
        b: { tables: { [`${sb}.secret`]: { privileges: ["SELECT"], shared: [A] } } },
      },
      sql: `${B_LEDGER} CREATE TABLE ${sb}.secret (x int);
        GRANT USAGE ON SCHEMA ${sb} TO ${roleA}; GRANT SELECT ON ${sb}.secret TO ${roleA};
        GRANT SELECT ON ${sb}.secret TO ${roleB};`,
      probe: `SELECT * FROM ${sb}.secret`,
    });
    expect(found).toEqual([]);
  });

  it("PUBLIC's SELECT on a table in schema public, which no consumer's role holds anything in", async () => {
    const found = await findingsOf({
      sql: "CREATE TABLE public.secrets (s text); GRANT SELECT ON public.secrets TO PUBLIC;",
      probe: "SELECT * FROM public.secrets",
    });
    expect(found).toEqual([`${CHECK.publicReach} table public.secrets`]);
  });

  it("PUBLIC's USAGE and UPDATE in a service's schema; declared by A, only B's is a finding", async () => {
    const found = await findingsOf({
      data: { a: { tables: { "billing.cards": { privileges: ["SELECT", "UPDATE"] } } } },
      sql: `CREATE SCHEMA billing; CREATE TABLE billing.cards (n text);
        GRANT USAGE ON SCHEMA billing TO PUBLIC; GRANT SELECT, UPDATE ON billing.cards TO PUBLIC;`,
      probe: "UPDATE billing.cards SET n = 'x'",
    });
    expect(found.sort()).toEqual([
      `${CHECK.publicReach} schema billing`,
      `${CHECK.publicReach} table billing.cards`,
      `${CHECK.publicReach} table billing.cards`,
    ]);
  });

  it("grants on PostgreSQL's own function and catalog", async () => {
    const found = await findingsOf({
      sql: `GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_file(text) TO ${roleA};
        GRANT SELECT ON pg_catalog.pg_authid TO ${roleA};`,
      probe: "SELECT count(*) FROM pg_authid",
    });
    expect(found.sort()).toEqual([
      `${CHECK.systemPrivileges} function pg_catalog.pg_read_file(text)`,
      `${CHECK.systemPrivileges} table pg_catalog.pg_authid`,
    ]);
  });

  it("a grant on a large object", async () => {
    const oid = 420_000 + Math.floor(Math.random() * 10_000);
    const found = await findingsOf({
      sql: `SELECT lo_from_bytea(${oid}, 'secret'::bytea); GRANT SELECT ON LARGE OBJECT ${oid} TO ${roleA};`,
      probe: `SELECT lo_get(${oid})`,
    });
    expect(found).toEqual([`${CHECK.systemPrivileges} large object ${oid}`]);
  });
});

describe("the doctor names objects with their schema", () => {
  it("a function in schema public prints as public.f()", async () => {
    const found = await findingsOf({
      sql: "CREATE FUNCTION public.f() RETURNS int LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS 'SELECT 1';",
      probe: "SELECT public.f()",
    });
    expect(found).toEqual([`${CHECK.definerPublicExecute} function public.f()`]);
  });
});

describe("the ordinary setup is no finding", () => {
  it("a service's tables, view, partitions, cascading foreign key and plain trigger, all declared by A", async () => {
    const found = await findingsOf({
      data: {
        a: {
          tables: {
            "billing.invoices": { privileges: ["SELECT", "UPDATE", "DELETE"] },
            "billing.lines": { privileges: ["SELECT"] },
            "billing.open_invoices": { privileges: ["SELECT"] },
            "billing.events": { privileges: ["SELECT", "INSERT"] },
          },
        },
      },
      sql: `CREATE SCHEMA billing;
        CREATE TABLE billing.invoices (id int PRIMARY KEY, paid boolean, touched timestamptz);
        CREATE TABLE billing.lines (invoice int REFERENCES billing.invoices ON DELETE CASCADE, amount int);
        CREATE VIEW billing.open_invoices AS SELECT id FROM billing.invoices WHERE NOT paid;
        CREATE TABLE billing.events (at date, what text) PARTITION BY RANGE (at);
        CREATE TABLE billing.events_2026 PARTITION OF billing.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
        CREATE FUNCTION billing.touch() RETURNS trigger LANGUAGE plpgsql
          AS $$BEGIN NEW.touched := now(); RETURN NEW; END$$;
        CREATE TRIGGER touch BEFORE UPDATE ON billing.invoices FOR EACH ROW EXECUTE FUNCTION billing.touch();
        GRANT USAGE ON SCHEMA billing TO ${roleA};
        GRANT SELECT, UPDATE, DELETE ON billing.invoices TO ${roleA};
        GRANT SELECT ON billing.lines, billing.open_invoices TO ${roleA};
        GRANT SELECT, INSERT ON billing.events TO ${roleA};`,
      probe: "DELETE FROM billing.invoices; INSERT INTO billing.events VALUES ('2026-05-01', 'x')",
    });
    expect(found).toEqual([]);
  });
});
