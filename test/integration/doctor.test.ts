/**
 * The doctor against real PostgreSQL and the SQS emulator: a freshly migrated database has no
 * finding, whether read as the migrator or as the ops login (which sees every catalog it needs but
 * the migration history); each drift made by hand, in a transaction rolled back afterwards, is
 * reported as its kind, in core or in a consumer's schema (against its committed schema.txt); and
 * queues that differ from a consumer's validated configuration are.
 *
 * Roles are cluster-wide, and other test files create roles named `jft_…` (some deliberately
 * misconfigured) while this one runs: findings about those are not this database's and are left
 * out. Roles this file creates are named `jfdoc_…`, made inside the rolled-back transactions or
 * dropped at the end.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import {
  BACKSTOP_RETENTION_SECONDS,
  CONSUMERS,
  type ConsumerDeployment,
  deployedDeliveryTimings,
  expectedQueues,
} from "../../functions/consumers.ts";
import { DOCTOR_METRIC, doctorInvocation } from "../../functions/doctor/doctor.ts";
import { deploymentConsumerSchemas } from "../../functions/doctor/reference.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { localSqsClient } from "../../local/aws-clients.ts";
import { type SqsEmulator, startSqsEmulator } from "../../local/sqs-emulator.ts";
import {
  ensureConsumerRole,
  provisionLogin,
  registerConsumerQueues,
} from "../../shared/db/queries/provision-login.ts";
import { runDoctor } from "../../shared/doctor/doctor.ts";
import { CHECK, type CheckId, type DoctorReport, type Finding } from "../../shared/doctor/findings.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { createQueue } from "../support/sqs.ts";

let db: TestDatabase;
let client: pg.Client;
/** Committed roles this file made, dropped at the end. */
const created: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
});
afterAll(async () => {
  for (const name of created) await client?.query(`DROP ROLE IF EXISTS ${name}`).catch(() => {});
  await client?.end();
  await db?.drop();
});

/** Not about a role another test file made in the cluster meanwhile. */
function ours(finding: Finding): boolean {
  return !/\bjft_/.test(`${finding.where} ${finding.what}`);
}

async function doctor(on: pg.ClientBase = client): Promise<DoctorReport> {
  const report = await runDoctor({
    db: on,
    sets: deploymentMigrationSets(),
    consumerSchemas: deploymentConsumerSchemas(),
  });
  return { ...report, findings: report.findings.filter(ours) };
}

/** Runs `drift` in a transaction, the doctor inside it, and rolls both back. */
async function findingsAfter(...drift: string[]): Promise<readonly Finding[]> {
  await client.query("BEGIN");
  try {
    for (const statement of drift) await client.query(statement);
    return (await doctor()).findings;
  } finally {
    await client.query("ROLLBACK");
  }
}

const checksOf = (findings: readonly Finding[]) => [...new Set(findings.map((f) => f.check))].sort();
const one = (findings: readonly Finding[], check: CheckId) => {
  const matching = findings.filter((f) => f.check === check);
  expect(matching, JSON.stringify(findings, null, 2)).toHaveLength(1);
  return matching[0] as Finding;
};

describe("a freshly migrated database", () => {
  it("has no finding, read as the migrator", async () => {
    const report = await doctor();
    expect(report.findings).toEqual([]);
    expect(report.skipped).toEqual([]);
  });

  it("has none read as the ops login either, which may not read the migration history only", async () => {
    const username = `jfdoc_ops_${randomBytes(4).toString("hex")}`;
    const password = randomBytes(12).toString("hex");
    created.push(username);
    await provisionLogin(client, { username, password, memberOf: "jobfence_ops" });
    const url = new URL(db.url);
    url.username = username;
    url.password = password;
    const ops = new pg.Client({ connectionString: url.toString() });
    await ops.connect();
    try {
      const report = await doctor(ops);
      expect(report.readAs).toBe(username);
      expect(report.findings).toEqual([]);
      expect(report.skipped.map((s) => s.check)).toEqual([CHECK.migrations]);
    } finally {
      await ops.end();
    }
  });

  it("reads one consistent catalog: a consumer's role made by another session mid-read is no stranger", async () => {
    // Another session creates a consumer's role, and makes it a member of jobfence_consumer, right
    // after the doctor read the roles and before it reads the memberships. Read one query at a
    // time, the membership named a role the snapshot did not have: a "foreign member" finding
    // about a role that is in fact well formed (a full-tier run met this with another file's role).
    const role = `jobfence_consumer_jfdoc_race_${randomBytes(4).toString("hex")}`;
    created.push(role);
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    let interleaved = false;
    const racing = new Proxy(client, {
      get(target, property) {
        if (property === "query") {
          return async (...args: Parameters<pg.Client["query"]>) => {
            const result = await (target.query as (...a: unknown[]) => Promise<unknown>)(...args);
            if (
              !interleaved &&
              typeof args[0] === "string" &&
              args[0].includes('rolcanlogin AS "canLogin"')
            ) {
              interleaved = true;
              await other.query(`CREATE ROLE ${role} NOLOGIN`);
              await other.query(`GRANT jobfence_consumer TO ${role}`);
            }
            return result;
          };
        }
        const value = Reflect.get(target, property, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    try {
      const report = await doctor(racing);
      expect(interleaved).toBe(true);
      expect(report.findings.filter((f) => f.where.includes(role) || f.what.includes(role))).toEqual([]);
    } finally {
      await other.query(`DROP ROLE IF EXISTS ${role}`);
      await other.end();
    }
  });

  it("has each registered consumer's schemas as its committed schema.txt describes them", async () => {
    const schemas = deploymentConsumerSchemas();
    expect(schemas.map((s) => s.consumer)).toEqual(CONSUMERS.map((c) => c.definition.name));
    for (const { file } of schemas) expect(existsSync(file), file).toBe(true);
    const report = await doctor();
    expect(report.findings.filter((f) => f.check === CHECK.consumerSchema)).toEqual([]);
  });
});

describe("a drift made by hand in a consumer's schema is reported, naming the consumer", () => {
  const ROLE = "jobfence_consumer_award_points";

  it("a column added, a table grant made and one revoked", async () => {
    const findings = await findingsAfter(
      "ALTER TABLE award_points.ledger ADD COLUMN drift_probe integer",
      `GRANT DELETE ON award_points.ledger TO ${ROLE}`,
      `REVOKE UPDATE ON award_points.balances FROM ${ROLE}`,
    );
    expect(checksOf(findings)).toEqual([CHECK.consumerSchema]);
    expect(findings.map((f) => ({ where: f.where, what: f.what, todo: f.todo.split(";")[0] }))).toEqual([
      {
        where: "consumer award-points columns",
        what: "not made by the migrations of award-points: award_points.ledger.drift_probe integer",
        todo: "undo it",
      },
      {
        where: "consumer award-points table privileges",
        what: `the migrations of award-points grant award_points.balances UPDATE TO ${ROLE}; the database does not`,
        todo: `GRANT UPDATE ON award_points.balances TO ${ROLE}`,
      },
      {
        where: "consumer award-points table privileges",
        what: `award_points.ledger DELETE TO ${ROLE}: not granted by the migrations of award-points`,
        todo: `REVOKE DELETE ON award_points.ledger FROM ${ROLE}`,
      },
    ]);
  });

  it("a column's type changed, and a privilege its role was granted outside its schema", async () => {
    const findings = await findingsAfter(
      "ALTER TABLE award_points.ledger ALTER COLUMN points TYPE bigint",
      `GRANT SELECT ON core.dead_letters TO ${ROLE}`,
    );
    const ofConsumer = findings.filter((f) => f.check === CHECK.consumerSchema);
    expect(ofConsumer.map((f) => `${f.where}: ${f.what}`)).toEqual([
      "consumer award-points columns: expected award_points.ledger.points integer NOT NULL, found award_points.ledger.points bigint NOT NULL",
      `consumer award-points role privileges elsewhere: core.dead_letters SELECT TO ${ROLE}: not granted by the migrations of award-points`,
    ]);
    expect(ofConsumer[1]?.todo).toMatch(new RegExp(`^REVOKE SELECT ON core.dead_letters FROM ${ROLE};`));
  });

  it("a consumer without a committed description: run the snapshot and commit it", async () => {
    const file = join(tmpdir(), `jfdoc-${randomBytes(4).toString("hex")}`, "schema.txt");
    const report = await runDoctor({
      db: client,
      sets: deploymentMigrationSets(),
      consumerSchemas: [{ consumer: "award-points", file }],
    });
    const f = one(report.findings.filter(ours), CHECK.consumerSchema);
    expect(f.where).toBe("consumer award-points");
    expect(f.what).toContain(file);
    expect(f.todo).toMatch(/npm run schema:snapshot.*commit it/);
  });
});

describe("a drift made by hand is reported", () => {
  it("an extra table grant: DELETE on the fences to jobfence_consumer", async () => {
    const findings = await findingsAfter("GRANT DELETE ON core.processed_jobs TO jobfence_consumer");
    const f = one(findings, CHECK.coreCatalog);
    expect(checksOf(findings)).toEqual([CHECK.coreCatalog]);
    expect(f.what).toBe("core.processed_jobs DELETE TO jobfence_consumer: not granted by the migrations");
    expect(f.todo).toMatch(/^REVOKE DELETE ON core.processed_jobs FROM jobfence_consumer;/);
  });

  it("an extra column grant: UPDATE of a fence's expiry to jobfence_ops", async () => {
    const findings = await findingsAfter("GRANT UPDATE (expires_at) ON core.processed_jobs TO jobfence_ops");
    expect(checksOf(findings)).toEqual([CHECK.coreCatalog]);
    expect(one(findings, CHECK.coreCatalog).what).toContain(
      "core.processed_jobs (expires_at) UPDATE TO jobfence_ops",
    );
  });

  it("a consumer's table granted to a shared role", async () => {
    const findings = await findingsAfter("GRANT SELECT ON award_points.ledger TO jobfence_ops");
    expect(checksOf(findings)).toEqual([CHECK.consumerSchema, CHECK.sharedRoleOutsideCore]);
    expect(one(findings, CHECK.sharedRoleOutsideCore).where).toBe("table award_points.ledger");
  });

  it("a login granted a second role", async () => {
    const findings = await findingsAfter(
      "CREATE ROLE jfdoc_two_roles LOGIN",
      "GRANT jobfence_ops, jobfence_cleanup TO jfdoc_two_roles",
    );
    expect(checksOf(findings)).toEqual([CHECK.loginMemberships]);
    const f = one(findings, CHECK.loginMemberships);
    expect(f.where).toBe("login jfdoc_two_roles");
    expect(f.what).toContain("2 roles (jobfence_cleanup, jobfence_ops)");
  });

  it("a login granted jobfence_consumer directly", async () => {
    const findings = await findingsAfter(
      "CREATE ROLE jfdoc_base LOGIN",
      "GRANT jobfence_consumer TO jfdoc_base",
    );
    expect(checksOf(findings)).toEqual([CHECK.loginMemberships]);
    expect(one(findings, CHECK.loginMemberships).what).toMatch(/^is a member of jobfence_consumer itself/);
  });

  it("a definer function in core without a search_path, executable by PUBLIC", async () => {
    const findings = await findingsAfter(
      "CREATE FUNCTION core.doctor_probe() RETURNS integer LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'",
    );
    expect(checksOf(findings)).toEqual([
      CHECK.coreCatalog,
      CHECK.definerPublicExecute,
      CHECK.definerSearchPath,
    ]);
    expect(one(findings, CHECK.definerSearchPath).where).toBe("function core.doctor_probe()");
    expect(one(findings, CHECK.definerPublicExecute).todo).toMatch(
      /^REVOKE ALL ON FUNCTION core.doctor_probe\(\) FROM PUBLIC/,
    );
  });

  it("row-level security disabled on the dead letters", async () => {
    const findings = await findingsAfter("ALTER TABLE core.dead_letters DISABLE ROW LEVEL SECURITY");
    const f = one(findings, CHECK.coreCatalog);
    expect(checksOf(findings)).toEqual([CHECK.coreCatalog]);
    expect(f.where).toBe("core row level security");
    expect(f.todo).toBe("ALTER TABLE core.dead_letters ENABLE ROW LEVEL SECURITY");
  });

  it("a policy dropped", async () => {
    const findings = await findingsAfter("DROP POLICY ops_reads_fences ON core.processed_jobs");
    const f = one(findings, CHECK.coreCatalog);
    expect(f.where).toBe("core policies");
    expect(f.what).toMatch(
      /^missing: core.processed_jobs ops_reads_fences: PERMISSIVE FOR SELECT TO jobfence_ops/,
    );
  });

  it("a shared role given BYPASSRLS", async () => {
    const findings = await findingsAfter("ALTER ROLE jobfence_ops BYPASSRLS");
    expect(one(findings, CHECK.coreCatalog).todo).toBe(
      "ALTER ROLE jobfence_ops NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS",
    );
  });

  it("a consumer's role granted another role, and a role that is no login made a member of one", async () => {
    const findings = await findingsAfter(
      "GRANT jobfence_ops TO jobfence_consumer_award_points",
      "CREATE ROLE jfdoc_group NOLOGIN",
      "GRANT jobfence_cleanup TO jfdoc_group",
    );
    expect(checksOf(findings)).toEqual([
      CHECK.consumerSchema,
      CHECK.foreignMembers,
      CHECK.groupRoleMemberships,
    ]);
    expect(one(findings, CHECK.consumerSchema).todo).toMatch(
      /^REVOKE jobfence_ops FROM jobfence_consumer_award_points;/,
    );
    expect(one(findings, CHECK.groupRoleMemberships).todo).toBe(
      "REVOKE jobfence_ops FROM jobfence_consumer_award_points",
    );
    expect(one(findings, CHECK.foreignMembers).where).toBe("role jfdoc_group");
  });

  it("a second consumer's role with a privilege in award-points' schema, and PUBLIC with one", async () => {
    const findings = await findingsAfter(
      "SELECT core.ensure_consumer_role('doctor-probe')",
      "GRANT SELECT ON award_points.balances TO jobfence_consumer_doctor_probe",
      "GRANT SELECT ON award_points.ledger TO PUBLIC",
    );
    expect(checksOf(findings)).toEqual([
      CHECK.consumerSchema,
      CHECK.publicPrivileges,
      CHECK.undeclaredPrivilege,
    ]);
    expect(one(findings, CHECK.undeclaredPrivilege).where).toBe("table award_points.balances");
    expect(one(findings, CHECK.undeclaredPrivilege).what).toContain("consumer doctor-probe does not declare");
  });

  it("CREATE on a consumer's schema for its role, and a privilege a login holds directly", async () => {
    const findings = await findingsAfter(
      "GRANT CREATE ON SCHEMA award_points TO jobfence_consumer_award_points",
      "CREATE ROLE jfdoc_direct LOGIN",
      "GRANT jobfence_ops TO jfdoc_direct",
      "GRANT SELECT ON core.dead_letter_counts TO jfdoc_direct",
    );
    expect(checksOf(findings)).toEqual([
      CHECK.consumerSchema,
      CHECK.coreCatalog,
      CHECK.createPrivileges,
      CHECK.loginPrivileges,
    ]);
    expect(one(findings, CHECK.loginPrivileges).where).toBe("table core.dead_letter_counts");
  });

  it("a consumer's table owned by its role, and a migration missing from the history", async () => {
    const findings = await findingsAfter(
      "ALTER TABLE award_points.balances OWNER TO jobfence_consumer_award_points",
      "DELETE FROM core.schema_migrations WHERE migration_set = 'award-points' AND version = 2",
    );
    expect(checksOf(findings)).toEqual([CHECK.consumerSchema, CHECK.migrations, CHECK.ownership]);
    expect(one(findings, CHECK.migrations).where).toBe("migration award-points/0002_own_role");
  });
});

describe("the consumers' queues", () => {
  const awardPoints = CONSUMERS[0] as ConsumerDeployment;
  const named = (name: string): ConsumerDeployment => ({
    ...awardPoints,
    definition: { ...awardPointsConsumer, name },
  });
  const expectations = ["doctor-right", "doctor-wrong", "doctor-absent"].map((name) =>
    expectedQueues(named(name), deployedDeliveryTimings(named(name))),
  );
  const arnOf = (name: string) => `arn:aws:sqs:eu-west-1:000000000000:${name}`;
  let emulator: SqsEmulator;
  let sqs: SQSClient;

  beforeAll(async () => {
    emulator = await startSqsEmulator();
    sqs = localSqsClient(emulator.endpoint);
    const [right, wrong] = expectations as [(typeof expectations)[0], (typeof expectations)[0]];
    // As configured: what the local stack and the CDK construct create.
    const rightBackstop = await createQueue(sqs, emulator.endpoint, right.backstop.name, {
      MessageRetentionPeriod: String(right.backstop.retentionSeconds),
    });
    const rightSource = await createQueue(sqs, emulator.endpoint, right.source.name, {
      MessageRetentionPeriod: String(right.source.retentionSeconds),
      VisibilityTimeout: String(right.source.visibilityTimeoutSeconds),
      RedrivePolicy: JSON.stringify({
        deadLetterTargetArn: rightBackstop.arn,
        maxReceiveCount: right.source.maxReceiveCount,
      }),
    });
    // Changed by hand: a short retention, visibility and redrive count, to the wrong queue.
    await createQueue(sqs, emulator.endpoint, wrong.backstop.name, { MessageRetentionPeriod: "86400" });
    const wrongSource = await createQueue(sqs, emulator.endpoint, wrong.source.name, {
      MessageRetentionPeriod: "3600",
      VisibilityTimeout: "30",
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: rightBackstop.arn, maxReceiveCount: 3 }),
    });
    // Each consumer's source queue registered for replays, as the migrate function does.
    for (const [consumer, url] of [
      [right.consumer, rightSource.url],
      [wrong.consumer, wrongSource.url],
    ] as const) {
      await ensureConsumerRole(client, consumer);
      await registerConsumerQueues(client, consumer, [url]);
    }
  });
  afterAll(async () => {
    sqs?.destroy();
    await emulator?.stop();
  });

  it("reports nothing of the queues as configured, and each difference of the others", async () => {
    const report = await runDoctor({
      db: client,
      sets: deploymentMigrationSets(),
      queues: { sqs, expected: expectations },
    });
    const [right, wrong] = expectations as [(typeof expectations)[0], (typeof expectations)[0]];
    expect(right.backstop.retentionSeconds).toBe(BACKSTOP_RETENTION_SECONDS);
    expect(report.findings.filter(ours).map((f) => `${f.check} ${f.where}: ${f.what.split(";")[0]}`)).toEqual(
      [
        `queue-retention queue doctor-wrong-backstop: the backstop keeps messages 86400 s`,
        `queue-retention queue doctor-wrong: MessageRetentionPeriod is 3600 s`,
        `queue-visibility queue doctor-wrong: VisibilityTimeout is 30 s`,
        `queue-redrive queue doctor-wrong: redrives to ${arnOf(right.backstop.name)}, not to its backstop ${arnOf(wrong.backstop.name)}`,
        `queue-redrive queue doctor-wrong: redrives after 3 receives`,
        "queue-missing queue doctor-absent-backstop: consumer doctor-absent's backstop does not exist",
        "queue-missing queue doctor-absent: consumer doctor-absent's source queue does not exist",
      ],
    );
  });

  it("reports a consumer whose source queue is not the one registered for its replays", async () => {
    const [right] = expectations as [(typeof expectations)[0]];
    await client.query("BEGIN");
    try {
      await registerConsumerQueues(client, right.consumer, ["http://127.0.0.1:1/000000000000/elsewhere"]);
      const report = await runDoctor({
        db: client,
        sets: deploymentMigrationSets(),
        queues: { sqs, expected: [right] },
      });
      expect(report.findings.filter(ours).map((f) => `${f.check} ${f.where}`)).toEqual([
        `replay-queues consumer ${right.consumer}`,
      ]);
    } finally {
      await client.query("ROLLBACK");
    }
  });

  it("the scheduled function logs each finding and emits their count as DoctorFindings", async () => {
    const metrics = new Metrics({ namespace: "jobfence", serviceName: "doctor" });
    const added: Array<[string, number]> = [];
    metrics.addMetric = ((name: string, _unit: unknown, value: number) => {
      added.push([name, value]);
    }) as Metrics["addMetric"];
    const logger = new Logger({ serviceName: "doctor", logLevel: "SILENT" });
    const warned: unknown[] = [];
    logger.warn = ((_message: string, finding: unknown) => {
      warned.push(finding);
    }) as Logger["warn"];
    const session = new pg.Client({ connectionString: db.url });
    const report = await doctorInvocation({
      connect: async () => {
        await session.connect();
        return session;
      },
      sqs,
      expectedQueues: expectations.slice(0, 2),
      sets: deploymentMigrationSets(),
      consumerSchemas: deploymentConsumerSchemas(),
      metrics,
      logger,
    });
    expect(report.findings.filter(ours).map((f) => f.check)).toEqual([
      CHECK.queueRetention,
      CHECK.queueRetention,
      CHECK.queueVisibility,
      CHECK.queueRedrive,
      CHECK.queueRedrive,
    ]);
    expect(added).toEqual([[DOCTOR_METRIC.findings, report.findings.length]]);
    expect(warned).toHaveLength(report.findings.length);
    // The session is closed after the run.
    await expect(session.query("SELECT 1")).rejects.toThrow();
  });
});
