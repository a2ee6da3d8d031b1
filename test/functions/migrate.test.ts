import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createMigrateHandler } from "../../functions/migrate/migrate.ts";
import { handler as referenceHandler } from "../../functions/migrate/reference-handler.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { LoginSecretError } from "../../shared/errors/database.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { type LocalSecretsManager, localSecretsManager } from "../support/secrets-manager.ts";

/**
 * The deployed entry point's handler (functions/migrate/handler.ts is `createMigrateHandler()`),
 * made here: test/functions/migrate-package.test.ts imports that module, and a warm test process
 * imports a module once (test-tiers.test.ts).
 */
const handler = createMigrateHandler();

const suffix = randomBytes(4).toString("hex");
const users = {
  consumer: `jft_c_${suffix}`,
  ops: `jft_o_${suffix}`,
  cleanup: `jft_x_${suffix}`,
  tableless: `jft_t_${suffix}`,
};
/** A consumer of no migration set: its tables (if any) are the service's own migrations'. */
const TABLELESS = `tableless-${suffix}`;
const ARN = (name: string) =>
  `arn:aws:secretsmanager:eu-west-1:123456789012:secret:jobfence/db/${name}-AbCdEf`;
const LOGIN_SECRETS = JSON.stringify([
  { secretArn: ARN("consumer"), consumer: "award-points" },
  { secretArn: ARN("ops"), memberOf: "jobfence_ops" },
  { secretArn: ARN("cleanup"), memberOf: "jobfence_cleanup" },
]);

let db: TestDatabase;
let secrets: LocalSecretsManager;
beforeAll(async () => {
  db = await createTestDatabase({ empty: true });
  secrets = await localSecretsManager({
    [ARN("consumer")]: JSON.stringify({
      username: users.consumer,
      password: "consumer-pw",
      engine: "postgres",
    }),
    [ARN("ops")]: JSON.stringify({ username: users.ops, password: "ops-pw" }),
    [ARN("cleanup")]: JSON.stringify({ username: users.cleanup, password: "cleanup-pw" }),
    [ARN("broken")]: JSON.stringify({ username: "someone" }),
    [ARN("tableless")]: JSON.stringify({ username: users.tableless, password: "tableless-pw" }),
  });
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await db?.withClient(async (client) => {
    for (const user of Object.values(users)) await client.query(`DROP ROLE IF EXISTS ${user}`);
  });
  await secrets?.close();
  await db?.drop();
});

const quiet = () => {};

describe("migrate function", () => {
  it("refuses to run without DATABASE_URL", async () => {
    vi.stubEnv("DATABASE_URL", "");
    await expect(handler()).rejects.toThrow(/DATABASE_URL/);
  });

  it("refuses login secrets that are not a JSON list of {secretArn, memberOf}", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    for (const bad of [
      "not json",
      '{"secretArn":"x"}',
      '[{"secretArn":"x","memberOf":"postgres"}]',
      // The base role acts for no consumer: a consumer's login names its consumer.
      '[{"secretArn":"x","memberOf":"jobfence_consumer"}]',
      '[{"secretArn":"x","consumer":"Not A Name"}]',
      '[{"secretArn":"x","consumer":"award-points","memberOf":"jobfence_ops"}]',
    ]) {
      vi.stubEnv("JOBFENCE_LOGIN_SECRETS", bad);
      await expect(createMigrateHandler({ log: quiet })()).rejects.toThrow(ConfigurationError);
    }
    vi.stubEnv("JOBFENCE_LOGIN_SECRETS", "");
  });

  it("with a secret lacking its password, fails before touching the database", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    vi.stubEnv(
      "JOBFENCE_LOGIN_SECRETS",
      JSON.stringify([{ secretArn: ARN("broken"), memberOf: "jobfence_ops" }]),
    );
    const error = await createMigrateHandler({ secretsManager: secrets.client, log: quiet })().catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LoginSecretError);
    expect(String(error)).toMatch(/password/);
    const tables = await db.withClient((c) => c.query("SELECT 1 FROM pg_namespace WHERE nspname = 'core'"));
    expect(tables.rowCount).toBe(0);
    vi.stubEnv("JOBFENCE_LOGIN_SECRETS", "");
  });

  it("as the reference deployment's, migrates the database DATABASE_URL names with its registry's sets, and a second invocation is a no-op", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    const expected = deploymentMigrationSets().flatMap((set) =>
      set.migrations.map((m) => ({ set: set.name, version: m.version, name: m.name })),
    );
    expect(expected.map((m) => m.set)).toEqual(expect.arrayContaining(["core", "award-points"]));
    expect(await referenceHandler()).toEqual({
      applied: expected,
      alreadyApplied: 0,
      consumerRoles: ["jobfence_consumer_award_points", "jobfence_consumer_notify_user"],
      logins: [],
      queuesRegistered: [],
      followUpTargetsRegistered: ["award-points", "notify-user"],
      fenceTtlsRegistered: [],
    });
    expect(await referenceHandler()).toEqual({
      applied: [],
      alreadyApplied: expected.length,
      consumerRoles: ["jobfence_consumer_award_points", "jobfence_consumer_notify_user"],
      logins: [],
      queuesRegistered: [],
      followUpTargetsRegistered: ["award-points", "notify-user"],
      fenceTtlsRegistered: [],
    });
    // Every consumer of the registry declares what its definition's `sends` names, and nothing else.
    const declared = await db.withClient(
      async (c) =>
        (await c.query("SELECT sender, target FROM core.follow_up_targets ORDER BY sender, target")).rows,
    );
    expect(declared).toEqual([{ sender: "award-points", target: "notify-user" }]);
  });

  it("creates each function's login from its secret, and updates them on the next deploy", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    vi.stubEnv("JOBFENCE_LOGIN_SECRETS", LOGIN_SECRETS);
    const lines: string[] = [];
    const migrate = createMigrateHandler({ secretsManager: secrets.client, log: (line) => lines.push(line) });
    const first = await migrate();
    expect(first.logins).toEqual([
      { username: users.consumer, memberOf: "jobfence_consumer_award_points", outcome: "created" },
      { username: users.ops, memberOf: "jobfence_ops", outcome: "created" },
      { username: users.cleanup, memberOf: "jobfence_cleanup", outcome: "created" },
    ]);
    expect(secrets.requests).toEqual(expect.arrayContaining([ARN("consumer"), ARN("ops"), ARN("cleanup")]));
    expect(lines.join("\n")).not.toMatch(/-pw/);
    const second = await migrate();
    expect(second.logins.map((l) => l.outcome)).toEqual(["updated", "updated", "updated"]);
    const { rows } = await db.withClient((c) =>
      c.query<{ rolname: string; role: string }>(
        `SELECT u.rolname, g.rolname AS role FROM pg_auth_members m
           JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member
          WHERE u.rolname = ANY ($1) ORDER BY 1`,
        [Object.values(users)],
      ),
    );
    expect(rows).toEqual(
      [
        { rolname: users.consumer, role: "jobfence_consumer_award_points" },
        { rolname: users.ops, role: "jobfence_ops" },
        { rolname: users.cleanup, role: "jobfence_cleanup" },
      ].sort((a, b) => a.rolname.localeCompare(b.rolname)),
    );
  });

  it("creates the role of a consumer without migrations its login names, then its login", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    vi.stubEnv(
      "JOBFENCE_LOGIN_SECRETS",
      JSON.stringify([{ secretArn: ARN("tableless"), consumer: TABLELESS }]),
    );
    const result = await createMigrateHandler({ secretsManager: secrets.client, log: quiet })();
    expect(result.logins).toEqual([
      { username: users.tableless, memberOf: consumerRoleName(TABLELESS), outcome: "created" },
    ]);
    const { rows } = await db.withClient((c) =>
      c.query("SELECT role_name FROM core.consumer_roles WHERE consumer = $1", [TABLELESS]),
    );
    expect(rows).toEqual([{ role_name: consumerRoleName(TABLELESS) }]);
    vi.stubEnv("JOBFENCE_LOGIN_SECRETS", "");
  });

  it("registers each consumer's replay queues, and refuses a malformed list before touching anything", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    vi.stubEnv("JOBFENCE_LOGIN_SECRETS", "");
    for (const bad of [
      "[]",
      '{"award-points": []}',
      '{"award-points": ["not a url"]}',
      '{"Bad": ["https://q"]}',
    ]) {
      vi.stubEnv("JOBFENCE_CONSUMER_QUEUES", bad);
      await expect(createMigrateHandler({ log: quiet })()).rejects.toThrow(ConfigurationError);
    }
    const url = "https://sqs.eu-west-1.amazonaws.com/123456789012/award-points";
    vi.stubEnv("JOBFENCE_CONSUMER_QUEUES", JSON.stringify({ "award-points": [url] }));
    const result = await createMigrateHandler({ log: quiet })();
    expect(result.queuesRegistered).toEqual(["award-points"]);
    const { rows } = await db.withClient((c) =>
      c.query<{ queues: string[] }>("SELECT queues FROM core.consumer_roles WHERE consumer = 'award-points'"),
    );
    expect(rows).toEqual([{ queues: [url] }]);
    vi.stubEnv("JOBFENCE_CONSUMER_QUEUES", "");
  });

  it("registers each consumer's fence TTL, and refuses one of a day or less before touching anything", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    vi.stubEnv("JOBFENCE_LOGIN_SECRETS", "");
    for (const bad of ['{"award-points": 86400}', '{"award-points": "21d"}', '{"Bad": 1814400}']) {
      vi.stubEnv("JOBFENCE_CONSUMER_FENCE_TTLS", bad);
      await expect(createMigrateHandler({ log: quiet })()).rejects.toThrow(ConfigurationError);
    }
    vi.stubEnv("JOBFENCE_CONSUMER_FENCE_TTLS", JSON.stringify({ "award-points": 1_900_000 }));
    const result = await createMigrateHandler({ log: quiet })();
    expect(result.fenceTtlsRegistered).toEqual(["award-points"]);
    const { rows } = await db.withClient((c) =>
      c.query("SELECT fence_ttl_seconds FROM core.consumer_roles WHERE consumer = 'award-points'"),
    );
    expect(rows).toEqual([{ fence_ttl_seconds: 1_900_000 }]);
    // The database refuses what the configuration would have: no path registers a TTL of a day or less.
    await expect(
      db.withClient((c) => c.query("SELECT core.register_fence_ttl('award-points', 86400)")),
    ).rejects.toMatchObject({ code: "22023" });
    vi.stubEnv("JOBFENCE_CONSUMER_FENCE_TTLS", "");
  });
});
