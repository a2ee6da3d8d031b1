/**
 * jobfence owns only `core`: a service's own migrations (plain SQL here, run by the service, not
 * by jobfence's runner) make a `billing.invoices` table and grant it to two consumers' roles, which
 * `jobfence migrate` (migrateDatabase) created. Declared shared, the doctor has nothing to say and
 * each consumer works on the table under its own role; undeclared, or declared but not shared, it
 * is a finding. A consumer with no migrations at all migrates and runs.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { deploymentConsumerSchemas } from "../../functions/doctor/reference.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { doctorDatabase } from "../../shared/commands/doctor.ts";
import { migrateDatabase } from "../../shared/commands/migrate.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import type { DataDeclaration } from "../../shared/doctor/declared-data.ts";
import { CHECK, type Finding } from "../../shared/doctor/findings.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import type { ConsumerDefinition } from "../../shared/index.ts";
import { consumerTestKit } from "../../testing/index.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

/** Consumer names of this run: roles are cluster-wide, and each run's are its own. */
const run = randomBytes(3).toString("hex");
const PAY = `record-payment-${run}`;
const RECEIPT = `send-receipt-${run}`;

const invoice = z.object({ invoice_id: z.string().min(1) });

/** The service's own migration: plain SQL, applied by the service as the migrator. */
const SERVICE_MIGRATION = (grantees: readonly string[]) => `
  CREATE SCHEMA billing;
  CREATE TABLE billing.invoices (
    tenant_id    text NOT NULL,
    invoice_id   text NOT NULL,
    paid_by      text,
    receipt_by   text,
    PRIMARY KEY (tenant_id, invoice_id)
  );
  ${grantees
    .map(
      (role) => `GRANT USAGE ON SCHEMA billing TO ${role};
                 GRANT SELECT, UPDATE ON billing.invoices TO ${role};`,
    )
    .join("\n")}`;

function payDefinition(data?: DataDeclaration): ConsumerDefinition<typeof invoice> {
  return {
    name: PAY,
    payload: invoice,
    ...(data ? { data } : {}),
    work: async (job, tx) => {
      await tx.query(
        "UPDATE billing.invoices SET paid_by = current_user WHERE tenant_id = $1 AND invoice_id = $2",
        [job.tenantId, job.payload.invoice_id],
      );
    },
  };
}

function receiptDefinition(data?: DataDeclaration): ConsumerDefinition<typeof invoice> {
  return {
    name: RECEIPT,
    payload: invoice,
    ...(data ? { data } : {}),
    work: async (job, tx) => {
      await tx.query(
        "UPDATE billing.invoices SET receipt_by = current_user WHERE tenant_id = $1 AND invoice_id = $2 AND paid_by IS NOT NULL",
        [job.tenantId, job.payload.invoice_id],
      );
    },
  };
}

/** Both declare billing.invoices, shared with each other. */
const declaredShared = () => [
  payDefinition({ tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"], shared: [RECEIPT] } } }),
  receiptDefinition({ tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"], shared: true } } }),
];

/** Not about a role another test file made in the cluster meanwhile (their `jft_…` roles). */
const ours = (finding: Finding) => !/\bjft_/.test(`${finding.where} ${finding.what}`);

let db: TestDatabase;

async function doctor(consumers: readonly ConsumerDefinition<typeof invoice>[]): Promise<Finding[]> {
  const report = await doctorDatabase({
    databaseUrl: db.url,
    consumers,
    sets: deploymentMigrationSets(),
    consumerSchemas: deploymentConsumerSchemas(),
  });
  return report.findings.filter(ours);
}

describe("two consumers sharing a table the service's own migrations made", () => {
  beforeAll(async () => {
    db = await createTestDatabase();
    // `jobfence migrate` first (core, and the consumers' roles), then the service's own tool.
    const report = await migrateDatabase({ databaseUrl: db.url, consumers: declaredShared() });
    expect(report.consumerRoles).toEqual([consumerRoleName(PAY), consumerRoleName(RECEIPT)]);
    await db.withClient((c) =>
      c.query(SERVICE_MIGRATION([consumerRoleName(PAY), consumerRoleName(RECEIPT)])),
    );
  });
  afterAll(async () => {
    await db?.drop();
  });

  it("declared shared: the doctor has no finding", async () => {
    expect(await doctor(declaredShared())).toEqual([]);
  });

  it("declared shared: each consumer works on the table under its own role", async () => {
    const [pay, receipt] = declaredShared() as [
      ConsumerDefinition<typeof invoice>,
      ConsumerDefinition<typeof invoice>,
    ];
    const payKit = await consumerTestKit(pay, { databaseUrl: db.url });
    const receiptKit = await consumerTestKit(receipt, { databaseUrl: db.url });
    try {
      const job = payKit.job({ invoice_id: "inv-1" });
      await payKit.query("INSERT INTO billing.invoices (tenant_id, invoice_id) VALUES ($1, 'inv-1')", [
        job.tenant_id,
      ]);
      expect((await payKit.deliver(job)).results).toMatchObject([{ status: "applied" }]);
      const receiptJob = receiptKit.job({ invoice_id: "inv-1" }, { tenantId: job.tenant_id });
      expect((await receiptKit.deliver(receiptJob)).results).toMatchObject([{ status: "applied" }]);
      expect(
        await payKit.query("SELECT paid_by, receipt_by FROM billing.invoices WHERE tenant_id = $1", [
          job.tenant_id,
        ]),
      ).toEqual([{ paid_by: consumerRoleName(PAY), receipt_by: consumerRoleName(RECEIPT) }]);
    } finally {
      await payKit.close();
      await receiptKit.close();
    }
  });

  it("a consumer with migrations of its own may declare the service's table too: no finding", async () => {
    const award = "jobfence_consumer_award_points";
    await db.withClient((c) =>
      c.query(`GRANT USAGE ON SCHEMA billing TO ${award}; GRANT SELECT ON billing.invoices TO ${award}`),
    );
    try {
      const everyone = { privileges: ["SELECT" as const], shared: true as const };
      expect(
        await doctor([
          payDefinition({
            tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"], shared: true } },
          }),
          receiptDefinition({
            tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"], shared: true } },
          }),
          { ...payDefinition(), name: "award-points", data: { tables: { "billing.invoices": everyone } } },
        ]),
      ).toEqual([]);
    } finally {
      await db.withClient((c) =>
        c.query(
          `REVOKE SELECT ON billing.invoices FROM ${award}; REVOKE USAGE ON SCHEMA billing FROM ${award}`,
        ),
      );
    }
  });

  it("undeclared: every privilege of each role on the service's schema and table is a finding", async () => {
    const findings = await doctor([payDefinition(), receiptDefinition()]);
    expect(findings.map((f) => `${f.check} ${f.where}`).sort()).toEqual(
      [
        ...Array(2).fill(`${CHECK.undeclaredPrivilege} schema billing`),
        ...Array(4).fill(`${CHECK.undeclaredPrivilege} table billing.invoices`),
      ].sort(),
    );
    expect(findings.map((f) => f.todo)).toContain(
      `declare it in consumer ${PAY}'s data (tables: { "billing.invoices": { privileges: ["UPDATE"] } }), or REVOKE UPDATE ON billing.invoices FROM ${consumerRoleName(PAY)}`,
    );
  });

  it("declared but not shared by one of them: undeclared sharing, naming who should declare it", async () => {
    const findings = await doctor([
      payDefinition({ tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"] } } }),
      receiptDefinition({
        tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"], shared: [PAY] } },
      }),
    ]);
    expect(findings.map((f) => `${f.check} ${f.where}`)).toEqual([
      `${CHECK.undeclaredSharing} table billing.invoices`,
    ]);
    expect(findings[0]?.what).toContain(`consumer ${PAY} does not declare sharing it with ${RECEIPT}`);
  });

  it("a declared table that is missing and a declared privilege the role lacks are findings", async () => {
    const findings = await doctor([
      payDefinition({
        tables: {
          "billing.invoices": { privileges: ["SELECT", "UPDATE", "DELETE"], shared: true },
          "billing.refunds": { privileges: ["INSERT"] },
        },
      }),
      receiptDefinition({
        tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"], shared: true } },
      }),
    ]);
    expect(findings.map((f) => `${f.check} ${f.where} ${f.todo.split(",")[0]}`)).toEqual([
      `${CHECK.declaredPrivilegeMissing} table billing.invoices GRANT DELETE ON billing.invoices TO ${consumerRoleName(PAY)}`,
      `${CHECK.declaredDataMissing} table billing.refunds create it with the service's own migrations (run before the consumer starts)`,
    ]);
  });

  it("a bad declaration is refused before connecting, every problem listed", async () => {
    const error = await doctorDatabase({
      databaseUrl: "postgres://nobody@127.0.0.1:1/none",
      consumers: [payDefinition({ tables: { invoices: { privileges: ["SELECT"] } } })],
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigurationError);
    expect((error as ConfigurationError).problems).toEqual([
      `consumer ${PAY}'s data.tables.invoices: must be schema-qualified: schema.table`,
    ]);
  });
});

describe("a consumer with no migrations at all", () => {
  let empty: TestDatabase;
  beforeAll(async () => {
    empty = await createTestDatabase({ empty: true });
  });
  afterAll(async () => {
    await empty?.drop();
  });

  it("migrates (core and its role only) and runs, and the doctor has nothing to say", async () => {
    const name = `core-only-${run}`;
    const definition: ConsumerDefinition<typeof invoice> = {
      name,
      payload: invoice,
      work: async (job, tx) => {
        await tx.query("SELECT $1::text", [job.payload.invoice_id]);
      },
    };
    const report = await migrateDatabase({ databaseUrl: empty.url, consumers: [definition] });
    expect(new Set(report.applied.map((m) => m.set))).toEqual(new Set(["core"]));
    expect(report.consumerRoles).toEqual([consumerRoleName(name)]);
    const registered = await empty.withClient(
      async (c) => (await c.query("SELECT consumer FROM core.consumer_roles")).rows,
    );
    expect(registered).toEqual([{ consumer: name }]);

    const kit = await consumerTestKit(definition, { databaseUrl: empty.url });
    try {
      const job = kit.job({ invoice_id: "inv-9" });
      expect((await kit.deliver(job)).results).toMatchObject([{ status: "applied" }]);
      expect(await kit.fence(job.job_id)).toMatchObject({ consumer: name });
    } finally {
      await kit.close();
    }
    const findings = (await doctorDatabase({ databaseUrl: empty.url, consumers: [definition] })).findings;
    expect(findings.filter(ours)).toEqual([]);
  });
});
