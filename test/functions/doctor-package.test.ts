/**
 * The doctor as the package deploys it (functions/doctor/handler.ts), for a service with consumers
 * of its own and no registry: it checks `core` (the only schema jobfence applied) and what its
 * environment says each consumer declares (JOBFENCE_DOCTOR_DECLARATIONS, which the Doctor
 * construct writes from the definitions' `data`), and expects none of this repository's reference
 * consumers' sets or schemas. Against a real PostgreSQL migrated by the package's runner.
 */
import { randomBytes } from "node:crypto";
import type { Context } from "aws-lambda";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { lambdaContext } from "../../local/lambda-context.ts";
import { runMigrations } from "../../shared/db/migrate.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import type { DoctorReport, Finding } from "../../shared/doctor/findings.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const suffix = randomBytes(3).toString("hex");
/** A service's consumer, on a table of the service's own migrations. */
const CONSUMER = `record-payment-${suffix}`;
const TABLE = `billing_${suffix}.invoices`;

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ empty: true });
  await runMigrations({ connectionString: db.url, consumers: [CONSUMER] });
  // The service's own migration: its table, granted to the consumer's role (SELECT only).
  await db.withClient(async (c) => {
    await c.query(`CREATE SCHEMA billing_${suffix}`);
    await c.query(`CREATE TABLE ${TABLE} (id bigint PRIMARY KEY)`);
    await c.query(`GRANT USAGE ON SCHEMA billing_${suffix} TO ${consumerRoleName(CONSUMER)}`);
    await c.query(`GRANT SELECT ON ${TABLE} TO ${consumerRoleName(CONSUMER)}`);
  });
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await db?.drop();
});

/** The package's doctor entry, configured by `declarations` (unset when undefined), run once. */
async function runPackageDoctor(declarations: unknown): Promise<DoctorReport> {
  vi.resetModules();
  vi.stubEnv("DATABASE_URL", db.url);
  vi.stubEnv("JOBFENCE_DOCTOR_QUEUES", "[]");
  vi.stubEnv("JOBFENCE_DOCTOR_DECLARATIONS", declarations === undefined ? "" : JSON.stringify(declarations));
  vi.stubEnv("AWS_REGION", "eu-west-1");
  const { handler } = (await import("../../functions/doctor/handler.ts")) as {
    handler: (event: unknown, context: Context) => Promise<DoctorReport>;
  };
  return handler({}, lambdaContext("doctor"));
}

/**
 * Findings about this file's consumer, its table, or any migration set or consumer schema; not
 * about a role another test file made in the cluster meanwhile (`jft_…`, roles are the cluster's).
 */
const relevant = (findings: readonly Finding[]) =>
  findings.filter(
    (f) =>
      !/\bjft_/.test(`${f.where} ${f.what}`) &&
      [CONSUMER, consumerRoleName(CONSUMER), TABLE, "award", "notify", "migration set"].some((s) =>
        `${f.where} ${f.what}`.includes(s),
      ),
  );

describe("the package's doctor", () => {
  it("checks core and the declarations its environment carries, expecting no reference consumer", async () => {
    const report = await runPackageDoctor([
      { consumer: CONSUMER, data: { tables: { [TABLE]: { privileges: ["SELECT", "INSERT"] } } } },
    ]);
    const found = relevant(report.findings);
    // The one thing wrong: the declared INSERT its role lacks. No reference consumer's set or schema.
    expect(found, JSON.stringify(found, null, 2)).toHaveLength(1);
    expect(`${found[0]?.where} ${found[0]?.what}`).toContain(TABLE);
    expect(`${found[0]?.what} ${found[0]?.todo}`).toContain("INSERT");
  });

  it("with the declarations matching the grants, has no finding about the service's consumer", async () => {
    const report = await runPackageDoctor([
      { consumer: CONSUMER, data: { tables: { [TABLE]: { privileges: ["SELECT"] } } } },
    ]);
    expect(relevant(report.findings)).toEqual([]);
  });
});
