/**
 * The doctor's checks, pure: a crafted catalog snapshot of a healthy deployment has no finding,
 * and each kind of drift, made in a copy of it, is reported as its own kind with what to do.
 */
import pg from "pg";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { doctorConfigFromEnv } from "../../functions/doctor/config.ts";
import { consumerSchemaFile, consumerNameProblem as registryNameProblem } from "../../functions/registry.ts";
import { checkServiceConsumers } from "../../shared/commands/service-consumers.ts";
import { CONSUMER_NAME, consumerNameCollision } from "../../shared/config/fields.ts";
import type {
  CatalogMembership,
  CatalogPrivilege,
  CatalogRole,
  CatalogSnapshot,
} from "../../shared/db/catalog.ts";
import {
  type CatalogDescription,
  describeCore,
  factKey,
  parseCatalogDescription,
  parsePrivilegeLine,
  privilegeLine,
  renderCatalogDescription,
} from "../../shared/db/catalog-description.ts";
import {
  type ConsumerCatalogSnapshot,
  type ConsumerSchemaDescription,
  describeConsumerSchema,
  loadConsumerSchema,
  parseConsumerSchema,
  renderConsumerSchema,
} from "../../shared/db/consumer-catalog.ts";
import { checksumOf, type MigrationSet } from "../../shared/db/migrations.ts";
import { checkConsumerSchema } from "../../shared/doctor/check-catalog.ts";
import {
  checkQueues,
  checkReplayQueues,
  type ExpectedConsumerQueues,
  type ObservedConsumerQueues,
  type ObservedQueue,
} from "../../shared/doctor/check-queues.ts";
import {
  assertDataDeclaration,
  type DeclaredConsumerData,
  dataDeclarationProblems,
  type Sharing,
} from "../../shared/doctor/declared-data.ts";
import { diagnose } from "../../shared/doctor/doctor.ts";
import {
  CHECK,
  type CheckId,
  type DoctorReport,
  type Finding,
  formatFinding,
} from "../../shared/doctor/findings.ts";
import { classifyRoles } from "../../shared/doctor/role-kinds.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { createConsumer } from "../../shared/index.ts";

const MIGRATOR = "jobfence_migrator";
const AWARD = "jobfence_consumer_award_points";
const AWARD_LOGIN = "jobfence_login_award_points";

function role(name: string, attributes: Partial<CatalogRole> = {}): CatalogRole {
  return {
    name,
    canLogin: false,
    superuser: false,
    createDb: false,
    createRole: false,
    replication: false,
    bypassRls: false,
    ...attributes,
  };
}

function member(roleName: string, memberName: string, adminOption = false): CatalogMembership {
  return { role: roleName, member: memberName, grantor: MIGRATOR, adminOption };
}

function grant(
  target: CatalogPrivilege["target"],
  object: string,
  privilege: string,
  grantee: string,
  extra: Partial<CatalogPrivilege> = {},
): CatalogPrivilege {
  const schema =
    target === "database" ? object : target === "schema" ? object : (object.split(".")[0] as string);
  return { target, schema, object, grantee, privilege, grantable: false, ...extra };
}

const SETS: MigrationSet[] = [
  {
    name: "core",
    migrations: [
      { version: 1, name: "processed_jobs", sql: "-- 1", checksum: checksumOf("-- 1") },
      { version: 2, name: "roles", sql: "-- 2", checksum: checksumOf("-- 2") },
    ],
  },
  {
    name: "award-points",
    consumer: "award-points",
    migrations: [{ version: 1, name: "ledger", sql: "-- a1", checksum: checksumOf("-- a1") }],
  },
];

/** A deployment as the migrations and the deploy leave it, on PostgreSQL 16+ with an RDS-style migrator. */
function healthy(): CatalogSnapshot {
  return {
    serverVersion: 160004,
    readAs: MIGRATOR,
    migrator: MIGRATOR,
    roles: [
      role(MIGRATOR, { canLogin: true, createRole: true, createDb: true }),
      role("jobfence_consumer"),
      role("jobfence_ops"),
      role("jobfence_cleanup"),
      role(AWARD),
      role("jobfence_ops_login", { canLogin: true }),
      role("jobfence_cleanup_login", { canLogin: true }),
      role(AWARD_LOGIN, { canLogin: true }),
      role("pg_read_all_data"),
    ],
    memberships: [
      member("jobfence_consumer", AWARD),
      member("jobfence_ops", "jobfence_ops_login"),
      member("jobfence_cleanup", "jobfence_cleanup_login"),
      member(AWARD, AWARD_LOGIN),
      // PostgreSQL 16+: a CREATEROLE creator administers the roles it created.
      { role: "jobfence_ops", member: MIGRATOR, grantor: "rdsadmin", adminOption: true },
      { role: AWARD, member: MIGRATOR, grantor: "rdsadmin", adminOption: true },
    ],
    privileges: [
      grant("database", "jobfence", "CONNECT", "PUBLIC"),
      grant("database", "jobfence", "TEMPORARY", "PUBLIC"),
      grant("schema", "public", "USAGE", "PUBLIC"),
      grant("schema", "core", "USAGE", "jobfence_consumer"),
      grant("schema", "core", "USAGE", "jobfence_ops"),
      grant("schema", "core", "USAGE", "jobfence_cleanup"),
      grant("table", "core.processed_jobs", "SELECT", "jobfence_consumer"),
      grant("table", "core.processed_jobs", "INSERT", "jobfence_consumer"),
      grant("table", "core.processed_jobs", "SELECT", "jobfence_ops"),
      grant("column", "core.dead_letters", "UPDATE", "jobfence_ops", { column: "status" }),
      grant("function", "core.hold_fence(text,text)", "EXECUTE", "jobfence_consumer"),
      grant("function", "core.delete_expired_fences(integer)", "EXECUTE", "jobfence_cleanup"),
      grant("function", "core.error_fingerprint(jsonb)", "EXECUTE", "PUBLIC"),
      grant("schema", "award_points", "USAGE", AWARD),
      grant("table", "award_points.ledger", "INSERT", AWARD),
      grant("function", "public.similarity(text,text)", "EXECUTE", "PUBLIC", { schema: "public" }),
    ],
    schemas: [
      { name: "core", owner: MIGRATOR },
      { name: "award_points", owner: MIGRATOR },
      { name: "public", owner: "pg_database_owner" },
    ],
    relations: [
      {
        schema: "core",
        name: "core.processed_jobs",
        kind: "table",
        rowSecurity: true,
        forceRowSecurity: false,
        owner: MIGRATOR,
      },
      {
        schema: "core",
        name: "core.dead_letters",
        kind: "table",
        rowSecurity: true,
        forceRowSecurity: false,
        owner: MIGRATOR,
      },
      {
        schema: "award_points",
        name: "award_points.ledger",
        kind: "table",
        rowSecurity: false,
        forceRowSecurity: false,
        owner: MIGRATOR,
      },
    ],
    functions: [
      {
        schema: "core",
        signature: "core.hold_fence(text,text)",
        securityDefiner: true,
        settings: ["search_path=pg_catalog, core, pg_temp"],
        owner: MIGRATOR,
      },
      {
        schema: "core",
        signature: "core.delete_expired_fences(integer)",
        securityDefiner: true,
        settings: ["search_path=pg_catalog, core, pg_temp"],
        owner: MIGRATOR,
      },
      {
        schema: "core",
        signature: "core.error_fingerprint(jsonb)",
        securityDefiner: false,
        settings: [],
        owner: MIGRATOR,
      },
      {
        schema: "public",
        signature: "similarity(text,text)",
        securityDefiner: false,
        settings: [],
        owner: MIGRATOR,
      },
    ],
    policies: [
      {
        table: "core.processed_jobs",
        name: "consumer_own_fences",
        command: "ALL",
        permissive: true,
        roles: ["jobfence_consumer"],
        using: "(consumer_id = ( SELECT core.session_consumer_id() AS session_consumer_id))",
        withCheck: "(consumer_id = ( SELECT core.session_consumer_id() AS session_consumer_id))",
      },
      {
        table: "core.processed_jobs",
        name: "ops_reads_fences",
        command: "SELECT",
        permissive: true,
        roles: ["jobfence_ops"],
        using: "true",
        withCheck: null,
      },
    ],
    reach: { views: [], rules: [], triggers: [], inheritance: [], foreignKeys: [], systemPrivileges: [] },
    definitions: {
      columns: ["processed_jobs.consumer_id smallint NOT NULL", "processed_jobs.job_id text NOT NULL"],
      constraints: ["core.processed_jobs processed_jobs_pkey: PRIMARY KEY (job_id, consumer_id)"],
      indexes: [
        "CREATE UNIQUE INDEX processed_jobs_pkey ON core.processed_jobs USING btree (job_id, consumer_id)",
      ],
      triggers: [
        "CREATE TRIGGER dead_letters_refuse_delete BEFORE DELETE ON core.dead_letters FOR EACH ROW EXECUTE FUNCTION core.dead_letters_refuse_delete()",
      ],
      functions: [
        "core.delete_expired_fences(integer) 4054efc3",
        "core.error_fingerprint(jsonb) 82c00288",
        "core.hold_fence(text,text) 55f0b108",
      ],
    },
    consumerRoles: [
      { consumer: "award-points", role: AWARD, queues: ["http://sqs/000000000000/award-points"] },
    ],
    migrationHistory: SETS.flatMap((set) =>
      set.migrations.map((m) => ({ set: set.name, version: m.version, name: m.name, checksum: m.checksum })),
    ),
  };
}

/** What the committed description would be for {@link healthy}. */
const EXPECTED: CatalogDescription = describeCore(healthy());

function run(snapshot: CatalogSnapshot, expected: CatalogDescription = EXPECTED): DoctorReport {
  return diagnose({ catalog: snapshot, expectedCatalog: expected, sets: SETS });
}

/** The findings of `snapshot`, each as `check where`. */
function found(snapshot: CatalogSnapshot): string[] {
  return run(snapshot).findings.map((f) => `${f.check} ${f.where}`);
}

function only(snapshot: CatalogSnapshot, check: CheckId): Finding {
  const { findings } = run(snapshot);
  expect(findings.map((f) => f.check)).toEqual([check]);
  return findings[0] as Finding;
}

function withPrivilege(p: CatalogPrivilege, from: CatalogSnapshot = healthy()): CatalogSnapshot {
  return { ...from, privileges: [...from.privileges, p] };
}

function withMembership(m: CatalogMembership, from: CatalogSnapshot = healthy()): CatalogSnapshot {
  return { ...from, memberships: [...from.memberships, m] };
}

function withRole(r: CatalogRole, from: CatalogSnapshot = healthy()): CatalogSnapshot {
  return { ...from, roles: [...from.roles.filter((x) => x.name !== r.name), r] };
}

describe("a healthy deployment", () => {
  it("has no finding and skips nothing", () => {
    expect(run(healthy())).toEqual({ findings: [], skipped: [], readAs: MIGRATOR });
  });

  it("read as the ops login, which may not read the migration history, skips the migrations check only", () => {
    const report = run({ ...healthy(), readAs: "jobfence_ops_login", migrationHistory: undefined });
    expect(report.findings).toEqual([]);
    expect(report.skipped.map((s) => s.check)).toEqual([CHECK.migrations]);
    expect(report.skipped[0]?.reason).toMatch(/jobfence_ops_login may not read core.schema_migrations/);
  });
});

describe("core against the committed description (core-catalog)", () => {
  it("reports a table grant the migrations do not make, with the REVOKE", () => {
    const f = only(
      withPrivilege(grant("table", "core.processed_jobs", "DELETE", "jobfence_consumer")),
      CHECK.coreCatalog,
    );
    expect(f.where).toBe("core table privileges");
    expect(f.what).toContain("core.processed_jobs DELETE TO jobfence_consumer");
    expect(f.todo).toMatch(/^REVOKE DELETE ON core.processed_jobs FROM jobfence_consumer;/);
  });

  it("reports a column grant the migrations do not make, and one they make that is gone", () => {
    const extra = only(
      withPrivilege(grant("column", "core.dead_letters", "UPDATE", "jobfence_ops", { column: "payload" })),
      CHECK.coreCatalog,
    );
    expect(extra.todo).toMatch(/^REVOKE UPDATE \(payload\) ON core.dead_letters FROM jobfence_ops;/);
    const s = healthy();
    const lost = only(
      { ...s, privileges: s.privileges.filter((p) => p.target !== "column") },
      CHECK.coreCatalog,
    );
    expect(lost.what).toContain("the migrations grant core.dead_letters (status) UPDATE TO jobfence_ops");
    expect(lost.todo).toBe("GRANT UPDATE (status) ON core.dead_letters TO jobfence_ops");
  });

  it("reports a privilege in core held by a consumer's own role (it has what it inherits only)", () => {
    const f = only(
      withPrivilege(grant("function", "core.delete_expired_fences(integer)", "EXECUTE", AWARD)),
      CHECK.coreCatalog,
    );
    expect(f.todo).toMatch(
      /^REVOKE EXECUTE ON FUNCTION core.delete_expired_fences\(integer\) FROM jobfence_consumer_award_points;/,
    );
  });

  it("reports row-level security turned off, with the ALTER TABLE that turns it on", () => {
    const s = healthy();
    const f = only(
      {
        ...s,
        relations: s.relations.map((r) =>
          r.name === "core.dead_letters" ? { ...r, rowSecurity: false } : r,
        ),
      },
      CHECK.coreCatalog,
    );
    expect(f.where).toBe("core row level security");
    expect(f.todo).toBe("ALTER TABLE core.dead_letters ENABLE ROW LEVEL SECURITY");
  });

  it("reports a dropped policy, and a changed one as changed", () => {
    const s = healthy();
    const dropped = only(
      { ...s, policies: s.policies.filter((p) => p.name !== "ops_reads_fences") },
      CHECK.coreCatalog,
    );
    expect(dropped.where).toBe("core policies");
    expect(dropped.what).toMatch(
      /^missing: core.processed_jobs ops_reads_fences: PERMISSIVE FOR SELECT TO jobfence_ops/,
    );
    const widened = only(
      {
        ...s,
        policies: s.policies.map((p) => (p.name === "ops_reads_fences" ? { ...p, roles: ["PUBLIC"] } : p)),
      },
      CHECK.coreCatalog,
    );
    expect(widened.what).toMatch(
      /^expected core.processed_jobs ops_reads_fences: .* TO jobfence_ops .*, found .* TO PUBLIC/,
    );
  });

  it("reports a shared role given an attribute, with the ALTER ROLE that takes it back", () => {
    const f = only(withRole(role("jobfence_ops", { canLogin: true, bypassRls: true })), CHECK.coreCatalog);
    expect(f.where).toBe("core roles");
    expect(f.todo).toBe(
      "ALTER ROLE jobfence_ops NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS",
    );
  });

  it("reports a function replaced by hand, and a definer function's search_path changed", () => {
    const s = healthy();
    const replaced = only(
      {
        ...s,
        definitions: {
          ...s.definitions,
          functions: s.definitions.functions.map((l) => l.replace("55f0b108", "00000000")),
        },
      },
      CHECK.coreCatalog,
    );
    expect(replaced.what).toBe(
      "expected core.hold_fence(text,text) 55f0b108, found core.hold_fence(text,text) 00000000",
    );
    const path = only(
      {
        ...s,
        functions: s.functions.map((f) =>
          f.signature === "core.hold_fence(text,text)"
            ? { ...f, settings: ["search_path=public, core, pg_temp"] }
            : f,
        ),
      },
      CHECK.coreCatalog,
    );
    expect(path.todo).toBe(
      "ALTER FUNCTION core.hold_fence(text,text) SET search_path=pg_catalog, core, pg_temp",
    );
  });

  it("reports a trigger switched off", () => {
    const s = healthy();
    const f = only(
      {
        ...s,
        definitions: { ...s.definitions, triggers: s.definitions.triggers.map((t) => `${t} [DISABLED]`) },
      },
      CHECK.coreCatalog,
    );
    expect(f.what).toMatch(/^expected CREATE TRIGGER dead_letters_refuse_delete .*, found .* \[DISABLED\]$/);
  });
});

describe("a consumer's schemas against its committed description (consumer-schema)", () => {
  /** award-points as {@link healthy} has it. */
  function awardSnapshot(catalog: CatalogSnapshot = healthy()): ConsumerCatalogSnapshot {
    return {
      consumer: "award-points",
      role: AWARD,
      schemas: ["award_points"],
      catalog,
      definitions: {
        columns: ["award_points.ledger.job_id text NOT NULL", "award_points.ledger.points integer NOT NULL"],
        constraints: ["award_points.ledger ledger_points_check: CHECK (points > 0)"],
        indexes: ["CREATE INDEX ledger_job_id_idx ON award_points.ledger USING btree (job_id)"],
        triggers: [],
        functions: [],
        types: [],
        views: [],
      },
    };
  }
  const COMMITTED = describeConsumerSchema(awardSnapshot());
  const FILE = "/repo/functions/award-points/schema.txt";
  const awardFindings = (live: ConsumerSchemaDescription) =>
    checkConsumerSchema(COMMITTED, live).map((f) => ({ where: f.where, what: f.what, todo: f.todo }));

  it("finds nothing in a consumer's schemas as committed, and diagnose passes its findings through", () => {
    expect(checkConsumerSchema(COMMITTED, describeConsumerSchema(awardSnapshot()))).toEqual([]);
    const drifted = withPrivilege(grant("table", "award_points.ledger", "DELETE", AWARD));
    const report = diagnose({
      catalog: drifted,
      expectedCatalog: EXPECTED,
      sets: SETS,
      consumerSchemas: [
        {
          consumer: "award-points",
          file: FILE,
          expected: COMMITTED,
          actual: describeConsumerSchema(awardSnapshot(drifted)),
        },
      ],
    });
    expect(report.findings.map((f) => `${f.check} ${f.where}`)).toEqual([
      "consumer-schema consumer award-points table privileges",
    ]);
  });

  it("reports a grant by hand with the REVOKE, a grant gone with the GRANT, and a column added, naming the consumer", () => {
    const s = healthy();
    const catalog = withPrivilege(grant("table", "award_points.ledger", "DELETE", AWARD), {
      ...s,
      privileges: s.privileges.filter(
        (p) => !(p.object === "award_points.ledger" && p.privilege === "INSERT"),
      ),
    });
    const live = awardSnapshot(catalog);
    const added = {
      ...live,
      definitions: {
        ...live.definitions,
        columns: [...live.definitions.columns, "award_points.ledger.note text"],
      },
    };
    const newMigration =
      "if it is wanted, make it a migration of award-points and refresh its description (npm run schema:snapshot)";
    expect(awardFindings(describeConsumerSchema(added))).toEqual([
      {
        where: "consumer award-points columns",
        what: "not made by the migrations of award-points: award_points.ledger.note text",
        todo: `undo it; ${newMigration}`,
      },
      {
        where: "consumer award-points table privileges",
        what: `the migrations of award-points grant award_points.ledger INSERT TO ${AWARD}; the database does not`,
        todo: `GRANT INSERT ON award_points.ledger TO ${AWARD}`,
      },
      {
        where: "consumer award-points table privileges",
        what: `award_points.ledger DELETE TO ${AWARD}: not granted by the migrations of award-points`,
        todo: `REVOKE DELETE ON award_points.ledger FROM ${AWARD}; ${newMigration}`,
      },
    ]);
  });

  it("reports a changed definition as changed, and its role's privileges elsewhere with the REVOKE of their kind", () => {
    const live = awardSnapshot(
      withPrivilege(
        grant("function", "core.hold_fence(text,text)", "EXECUTE", AWARD),
        withPrivilege(grant("schema", "core", "CREATE", AWARD)),
      ),
    );
    const changed = {
      ...live,
      definitions: {
        ...live.definitions,
        constraints: ["award_points.ledger ledger_points_check: CHECK (points >= 0)"],
      },
    };
    expect(awardFindings(describeConsumerSchema(changed)).map((f) => [f.what, f.todo.split(";")[0]])).toEqual(
      [
        [
          "expected award_points.ledger ledger_points_check: CHECK (points > 0), found award_points.ledger ledger_points_check: CHECK (points >= 0)",
          "restore it as the migrations of award-points made it (see its migrations/ folder)",
        ],
        [
          `core CREATE TO ${AWARD}: not granted by the migrations of award-points`,
          `REVOKE CREATE ON SCHEMA core FROM ${AWARD}`,
        ],
        [
          `core.hold_fence(text,text) EXECUTE TO ${AWARD}: not granted by the migrations of award-points`,
          `REVOKE EXECUTE ON FUNCTION core.hold_fence(text,text) FROM ${AWARD}`,
        ],
      ],
    );
  });

  it("reports its role's membership of another role, a changed attribute, and its registration gone", () => {
    const drifted = withMembership(member("jobfence_ops", AWARD), withRole(role(AWARD, { bypassRls: true })));
    const found = awardFindings(describeConsumerSchema(awardSnapshot({ ...drifted, consumerRoles: [] })));
    expect(found.map((f) => [f.where, f.todo.split(";")[0]])).toEqual([
      [
        "consumer award-points role",
        `ALTER ROLE ${AWARD} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS`,
      ],
      [
        "consumer award-points role",
        "run the migrations: a deploy runs them, by hand `jobfence migrate` (`npm run migrate` in the jobfence repository)",
      ],
      ["consumer award-points role", `REVOKE jobfence_ops FROM ${AWARD}`],
    ]);
    expect(found[1]?.what).toBe(
      `expected ${AWARD} registered for consumer award-points, found ${AWARD} not registered`,
    );
    // A role that may not read core.consumer_roles sees no registration: that is not compared.
    const unreadable = describeConsumerSchema(awardSnapshot({ ...healthy(), consumerRoles: undefined }));
    expect(checkConsumerSchema(COMMITTED, unreadable, { registryReadable: false })).toEqual([]);
  });

  it("reports a consumer with no committed description, to snapshot and commit", () => {
    const report = diagnose({
      catalog: healthy(),
      expectedCatalog: EXPECTED,
      sets: SETS,
      consumerSchemas: [{ consumer: "award-points", file: FILE, expected: undefined }],
    });
    expect(report.findings).toEqual([
      {
        check: CHECK.consumerSchema,
        where: "consumer award-points",
        what: `has no committed description of its schema (${FILE}): its schemas are not compared`,
        todo: "run `npm run schema:snapshot`, which writes it, review it and commit it",
      },
    ]);
  });

  it("reads back the text it renders, the committed award-points schema.txt included", () => {
    expect(parseConsumerSchema(renderConsumerSchema(COMMITTED))).toEqual(COMMITTED);
    const committed = loadConsumerSchema(consumerSchemaFile("award-points"));
    expect(committed?.consumer).toBe("award-points");
    expect(committed?.sections["schema privileges"]).toEqual([`award_points USAGE TO ${AWARD}`]);
    expect(loadConsumerSchema("/nonexistent/functions/x/schema.txt")).toBeUndefined();
    expect(() => parseConsumerSchema("## schemas\nx")).toThrow(/first line must be "# consumer <name>"/);
    expect(() => parseConsumerSchema("# consumer x\n\n## grants\ny")).toThrow(
      /consumer x's schema description: unknown section "grants"/,
    );
  });
});

describe("migrations", () => {
  const history = healthy().migrationHistory ?? [];
  it("reports one not applied, one edited after it ran, one the code does not know and a set the deployment lacks", () => {
    const report = run({
      ...healthy(),
      migrationHistory: [
        ...history
          .filter((h) => !(h.set === "core" && h.version === 2))
          .map((h) => (h.set === "award-points" ? { ...h, checksum: "0".repeat(64) } : h)),
        { set: "core", version: 3, name: "from_the_future", checksum: "f".repeat(64) },
        { set: "old-consumer", version: 1, name: "tables", checksum: "e".repeat(64) },
      ],
    });
    expect(report.findings.map((f) => `${f.where}: ${f.what.split(":")[0]}`)).toEqual([
      "migration core/0002_roles: is not applied",
      "migration core/0003_from_the_future: is applied but this code does not have it",
      "migration award-points/0001_ledger: was applied from another text (checksum 000000000000…, the file's is " +
        `${checksumOf("-- a1").slice(0, 12)}…)`,
      "migration set old-consumer: is applied but the deployment has no such set (functions/migrate/sets.ts)",
    ]);
    expect(report.findings.every((f) => f.check === CHECK.migrations)).toBe(true);
  });

  it("reports a database without core as never migrated, and checks nothing else of it", () => {
    const report = run({ ...healthy(), migrator: undefined });
    expect(report.findings.map((f) => `${f.check} ${f.where}`)).toEqual(["migrations schema core"]);
  });
});

describe("roles and memberships", () => {
  it("reports a consumer's role that may log in, and a login with CREATEROLE (role-attributes)", () => {
    const canLogin = only(withRole(role(AWARD, { canLogin: true })), CHECK.roleAttributes);
    expect(canLogin.todo).toBe(`ALTER ROLE ${AWARD} NOLOGIN`);
    const powerful = only(
      withRole(role(AWARD_LOGIN, { canLogin: true, createRole: true })),
      CHECK.roleAttributes,
    );
    expect(powerful.todo).toBe(`ALTER ROLE ${AWARD_LOGIN} NOCREATEROLE`);
  });

  it("reports a login granted a second role (login-memberships)", () => {
    const f = only(withMembership(member("jobfence_cleanup", "jobfence_ops_login")), CHECK.loginMemberships);
    expect(f.where).toBe("login jobfence_ops_login");
    expect(f.what).toContain("2 roles (jobfence_cleanup, jobfence_ops)");
  });

  it("reports a login granted jobfence_consumer itself, and one holding its role WITH ADMIN OPTION", () => {
    const snapshot = withRole(
      role("someone_login", { canLogin: true }),
      withMembership(member("jobfence_consumer", "someone_login")),
    );
    const f = only(snapshot, CHECK.loginMemberships);
    expect(f.todo).toMatch(/^REVOKE jobfence_consumer FROM someone_login;/);
    const admin = only(
      {
        ...healthy(),
        memberships: healthy().memberships.map((m) =>
          m.member === AWARD_LOGIN ? { ...m, adminOption: true } : m,
        ),
      },
      CHECK.loginMemberships,
    );
    expect(admin.todo).toBe(`REVOKE ADMIN OPTION FOR ${AWARD} FROM ${AWARD_LOGIN}`);
  });

  it("reports a group role that is a member of another role (group-role-memberships)", () => {
    expect(found(withMembership(member("jobfence_ops", AWARD)))).toEqual([
      `${CHECK.groupRoleMemberships} role ${AWARD}`,
    ]);
    const shared = only(
      withMembership(member("pg_read_all_data", "jobfence_ops")),
      CHECK.groupRoleMemberships,
    );
    expect(shared.todo).toBe("REVOKE pg_read_all_data FROM jobfence_ops");
  });

  it("reports a registered consumer whose role is missing, or is not a member of jobfence_consumer", () => {
    const s = healthy();
    const missing = only(
      {
        ...s,
        consumerRoles: [
          ...(s.consumerRoles ?? []),
          { consumer: "gone", role: "jobfence_consumer_gone", queues: [] },
        ],
      },
      CHECK.groupRoleMemberships,
    );
    expect(missing.what).toMatch(/consumer gone is registered .* which does not exist/);
    const detached = only(
      { ...s, memberships: s.memberships.filter((m) => m.member !== AWARD) },
      CHECK.groupRoleMemberships,
    );
    expect(detached.todo).toMatch(/^GRANT jobfence_consumer TO jobfence_consumer_award_points/);
  });

  it("reports any other member of a group role, but not the migrator's administration (foreign-members)", () => {
    const f = only(withMembership(member("jobfence_ops", "analysts")), CHECK.foreignMembers);
    expect(f.where).toBe("role analysts");
    expect(f.todo).toBe("REVOKE jobfence_ops FROM analysts");
    // The migrator as a plain member (no ADMIN OPTION) is one too.
    expect(found(withMembership(member("jobfence_cleanup", MIGRATOR)))).toEqual([
      `${CHECK.foreignMembers} role ${MIGRATOR}`,
    ]);
  });

  it("treats a role named like a consumer's that is a member of jobfence_consumer as another database's consumer", () => {
    const s = withRole(
      role("jobfence_consumer_record_payment"),
      withMembership(member("jobfence_consumer", "jobfence_consumer_record_payment")),
    );
    expect(classifyRoles(s).consumerRoles.has("jobfence_consumer_record_payment")).toBe(true);
    expect(found(s)).toEqual([]);
  });
});

describe("privileges outside core", () => {
  it("reports a shared role's privilege on a consumer's table (shared-role-outside-core)", () => {
    const f = only(
      withPrivilege(grant("table", "award_points.ledger", "SELECT", "jobfence_ops")),
      CHECK.sharedRoleOutsideCore,
    );
    expect(f.where).toBe("table award_points.ledger");
    expect(f.todo).toMatch(/^REVOKE SELECT ON award_points.ledger FROM jobfence_ops;/);
  });

  it("reports a second consumer's role with a privilege in award-points' schema, undeclared (undeclared-privilege)", () => {
    const s = withRole(
      role("jobfence_consumer_record_payment"),
      withMembership(member("jobfence_consumer", "jobfence_consumer_record_payment")),
    );
    const f = only(
      withPrivilege(grant("table", "award_points.ledger", "SELECT", "jobfence_consumer_record_payment"), s),
      CHECK.undeclaredPrivilege,
    );
    expect(f.where).toBe("table award_points.ledger");
    expect(f.what).toContain("jobfence_consumer_record_payment holds SELECT");
    expect(f.todo).toMatch(/REVOKE SELECT ON award_points.ledger FROM jobfence_consumer_record_payment$/);
  });

  it("reports a privilege a login holds directly (login-privileges)", () => {
    const f = only(
      withPrivilege(grant("table", "award_points.ledger", "UPDATE", AWARD_LOGIN)),
      CHECK.loginPrivileges,
    );
    expect(f.todo).toMatch(/^REVOKE UPDATE ON award_points.ledger FROM jobfence_login_award_points;/);
  });

  it("reports PUBLIC's privileges in a consumer's schema (public-privileges)", () => {
    expect(
      only(withPrivilege(grant("table", "award_points.ledger", "SELECT", "PUBLIC")), CHECK.publicPrivileges)
        .todo,
    ).toMatch(/^REVOKE SELECT ON award_points.ledger FROM PUBLIC;/);
    expect(
      only(withPrivilege(grant("schema", "award_points", "USAGE", "PUBLIC")), CHECK.publicPrivileges).todo,
    ).toMatch(/^REVOKE USAGE ON SCHEMA award_points FROM PUBLIC;/);
  });

  it("reports CREATE for anyone but the migrator (create-privileges)", () => {
    expect(
      only(withPrivilege(grant("schema", "award_points", "CREATE", AWARD)), CHECK.createPrivileges).todo,
    ).toBe(`REVOKE CREATE ON SCHEMA award_points FROM ${AWARD}`);
    expect(
      only(withPrivilege(grant("schema", "public", "CREATE", "PUBLIC")), CHECK.createPrivileges).where,
    ).toBe("schema public");
    expect(
      only(withPrivilege(grant("database", "jobfence", "CREATE", "jobfence_ops")), CHECK.createPrivileges)
        .todo,
    ).toBe("REVOKE CREATE ON DATABASE jobfence FROM jobfence_ops");
  });
});

describe("definer functions and ownership", () => {
  const definer = {
    schema: "award_points",
    signature: "award_points.credit(text)",
    securityDefiner: true,
    settings: [] as string[],
    owner: MIGRATOR,
  };

  it("reports a SECURITY DEFINER function that does not pin its search_path (definer-search-path)", () => {
    const s = healthy();
    const f = only({ ...s, functions: [...s.functions, definer] }, CHECK.definerSearchPath);
    expect(f.todo).toMatch(
      /^ALTER FUNCTION award_points.credit\(text\) SET search_path = pg_catalog, award_points/,
    );
  });

  it("reports a SECURITY DEFINER function whose search_path leaves pg_temp first (definer-search-path)", () => {
    const s = healthy();
    for (const path of ["search_path=pg_catalog, award_points", "search_path=pg_temp, pg_catalog"]) {
      const f = only(
        { ...s, functions: [...s.functions, { ...definer, settings: [path] }] },
        CHECK.definerSearchPath,
      );
      expect(f.what).toContain("does not name pg_temp last");
    }
  });

  it("reports a SECURITY DEFINER function PUBLIC may execute (definer-public-execute)", () => {
    const s = healthy();
    const f = only(
      withPrivilege(grant("function", "award_points.credit(text)", "EXECUTE", "PUBLIC"), {
        ...s,
        functions: [...s.functions, { ...definer, settings: ["search_path=pg_catalog, pg_temp"] }],
      }),
      CHECK.definerPublicExecute,
    );
    expect(f.todo).toMatch(/^REVOKE ALL ON FUNCTION award_points.credit\(text\) FROM PUBLIC/);
  });

  it("reports an object of core not the migrator's, and one a jobfence role owns (ownership)", () => {
    const s = healthy();
    const core = only(
      {
        ...s,
        relations: s.relations.map((r) =>
          r.name === "core.processed_jobs" ? { ...r, owner: "someone" } : r,
        ),
      },
      CHECK.ownership,
    );
    expect(core.todo).toBe(`ALTER TABLE core.processed_jobs OWNER TO ${MIGRATOR}`);
    const owned = only(
      {
        ...s,
        relations: s.relations.map((r) => (r.name === "award_points.ledger" ? { ...r, owner: AWARD } : r)),
      },
      CHECK.ownership,
    );
    expect(owned.what).toMatch(/owned by jobfence_consumer_award_points, a jobfence role or login/);
  });
});

describe("queues", () => {
  const expected: ExpectedConsumerQueues[] = [
    {
      consumer: "award-points",
      source: {
        name: "award-points",
        retentionSeconds: 345_600,
        visibilityTimeoutSeconds: 180,
        maxReceiveCount: 19,
      },
      backstop: { name: "award-points-backstop", retentionSeconds: 1_209_600 },
    },
  ];
  const backstop: ObservedQueue = {
    name: "award-points-backstop",
    exists: true,
    url: "http://sqs/000000000000/award-points-backstop",
    arn: "arn:aws:sqs:eu-west-1:000000000000:award-points-backstop",
    retentionSeconds: 1_209_600,
    visibilityTimeoutSeconds: 360,
    redrive: undefined,
  };
  const source: ObservedQueue = {
    name: "award-points",
    exists: true,
    url: "http://sqs/000000000000/award-points",
    arn: "arn:aws:sqs:eu-west-1:000000000000:award-points",
    retentionSeconds: 345_600,
    visibilityTimeoutSeconds: 180,
    redrive: { targetArn: backstop.exists ? backstop.arn : "", maxReceiveCount: 19 },
  };
  const observe = (
    s: Partial<typeof source> | ObservedQueue,
    b: Partial<typeof backstop> | ObservedQueue = {},
  ) =>
    [
      { consumer: "award-points", source: { ...source, ...s }, backstop: { ...backstop, ...b } },
    ] as ObservedConsumerQueues[];
  const checks = (observed: ObservedConsumerQueues[]) =>
    checkQueues(expected, observed).map((f) => `${f.check} ${f.where}`);

  it("finds nothing when the queues are as configured", () => {
    expect(checkQueues(expected, observe({}))).toEqual([]);
  });

  it("reports a missing source queue or backstop", () => {
    expect(checks(observe({ name: "award-points", exists: false }))).toEqual([
      "queue-missing queue award-points",
    ]);
    expect(checks(observe({}, { name: "award-points-backstop", exists: false }))).toEqual([
      "queue-missing queue award-points-backstop",
    ]);
  });

  it("reports the source's retention and the backstop's, and the visibility timeout", () => {
    expect(checks(observe({ retentionSeconds: 60 }, { retentionSeconds: 86_400 }))).toEqual([
      "queue-retention queue award-points-backstop",
      "queue-retention queue award-points",
    ]);
    const [visibility] = checkQueues(expected, observe({ visibilityTimeoutSeconds: 30 }));
    expect(visibility?.check).toBe(CHECK.queueVisibility);
    expect(visibility?.todo).toBe(
      "aws sqs set-queue-attributes --queue-url http://sqs/000000000000/award-points --attributes VisibilityTimeout=180",
    );
  });

  it("reports no redrive, a redrive to another queue, and another redrive count", () => {
    expect(checks(observe({ redrive: undefined }))).toEqual(["queue-redrive queue award-points"]);
    const wrong = checkQueues(
      expected,
      observe({ redrive: { targetArn: "arn:aws:sqs:eu-west-1:000000000000:elsewhere", maxReceiveCount: 3 } }),
    );
    expect(wrong.map((f) => f.what)).toEqual([
      expect.stringContaining(
        "redrives to arn:aws:sqs:eu-west-1:000000000000:elsewhere, not to its backstop",
      ),
      expect.stringContaining("redrives after 3 receives;"),
    ]);
    expect(wrong[0]?.todo).toContain(
      `RedrivePolicy='{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:000000000000:award-points-backstop","maxReceiveCount":19}'`,
    );
  });

  it("reports a consumer whose source queue is not the one registered for replays", () => {
    const registry = (queues: string[]) => [{ consumer: "award-points", queues }];
    expect(checkReplayQueues(registry([source.exists ? source.url : ""]), observe({}))).toEqual([]);
    const none = checkReplayQueues(registry([]), observe({}));
    expect(none.map((f) => `${f.check} ${f.where}`)).toEqual(["replay-queues consumer award-points"]);
    expect(none[0]?.what).toContain("has no queue registered");
    const other = checkReplayQueues(registry(["http://sqs/000000000000/elsewhere"]), observe({}));
    expect(other[0]?.what).toContain("not its source queue");
    // Not registered at all (the consumer has no role in this database): reported too.
    expect(checkReplayQueues([], observe({}))).toHaveLength(1);
  });
});

describe("the description's text", () => {
  it("reads back what it renders", () => {
    const description = describeCore(healthy());
    expect(parseCatalogDescription(renderCatalogDescription(description))).toEqual(description);
  });

  it("refuses a section it does not know", () => {
    expect(() => parseCatalogDescription("## grants\nx")).toThrow(/unknown section "grants"/);
  });

  it("writes privileges as lines it can read back, quoting a grantee that needs it", () => {
    const p = grant("column", "core.dead_letters", "UPDATE", "Odd Role", {
      column: "status",
      grantable: true,
    });
    expect(privilegeLine(p)).toBe('core.dead_letters (status) UPDATE TO "Odd Role" WITH GRANT OPTION');
    expect(parsePrivilegeLine(privilegeLine(p))).toEqual({
      object: "core.dead_letters",
      column: "status",
      privilege: "UPDATE",
      grantee: '"Odd Role"',
      grantable: true,
    });
    expect(factKey("policies", "core.x p: PERMISSIVE FOR ALL TO r")).toBe("core.x p");
    expect(factKey("table privileges", "core.x SELECT TO r")).toBeUndefined();
  });

  it("prints a finding as where, what and what to do", () => {
    expect(
      formatFinding({
        check: CHECK.ownership,
        where: "table core.x",
        what: "is owned by y",
        todo: "ALTER TABLE",
      }),
    ).toBe("table core.x [ownership]\n  is owned by y\n  → ALTER TABLE");
  });
});

describe("the doctor function's configuration", () => {
  const DATABASE_URL = "postgres://jobfence@127.0.0.1:5432/jobfence";
  it("reads the expected queues the construct writes, and refuses anything else naming the variable", () => {
    const queues = [
      {
        consumer: "award-points",
        source: {
          name: "award-points",
          retentionSeconds: 345_600,
          visibilityTimeoutSeconds: 180,
          maxReceiveCount: 19,
        },
        backstop: { name: "award-points-backstop", retentionSeconds: 1_209_600 },
      },
    ];
    expect(
      doctorConfigFromEnv({ DATABASE_URL, JOBFENCE_DOCTOR_QUEUES: JSON.stringify(queues) }).expectedQueues,
    ).toEqual(queues);
    expect(() => doctorConfigFromEnv({ DATABASE_URL, JOBFENCE_DOCTOR_QUEUES: "not json" })).toThrow(
      /JOBFENCE_DOCTOR_QUEUES: must be JSON/,
    );
    expect(() =>
      doctorConfigFromEnv({
        DATABASE_URL,
        JOBFENCE_DOCTOR_QUEUES: JSON.stringify([{ ...queues[0], source: { name: "award-points" } }]),
      }),
    ).toThrow(/JOBFENCE_DOCTOR_QUEUES/);
  });
});

describe("privileges outside core against what consumers declare (their definitions' data)", () => {
  const PAY = "jobfence_consumer_record_payment";
  const RECEIPT = "jobfence_consumer_send_receipt";
  /** Two consumers whose roles the service's own migrations granted its billing.invoices table. */
  function sharing(): CatalogSnapshot {
    const base = healthy();
    return {
      ...base,
      roles: [...base.roles, role(PAY), role(RECEIPT)],
      memberships: [
        ...base.memberships,
        member("jobfence_consumer", PAY),
        member("jobfence_consumer", RECEIPT),
      ],
      schemas: [...base.schemas, { name: "billing", owner: MIGRATOR }],
      relations: [
        ...base.relations,
        {
          schema: "billing",
          name: "billing.invoices",
          kind: "table",
          rowSecurity: false,
          forceRowSecurity: false,
          owner: MIGRATOR,
        },
      ],
      privileges: [
        ...base.privileges,
        ...[PAY, RECEIPT].flatMap((r) => [
          grant("schema", "billing", "USAGE", r),
          grant("table", "billing.invoices", "SELECT", r),
          grant("table", "billing.invoices", "UPDATE", r),
        ]),
      ],
      consumerRoles: [
        ...(base.consumerRoles ?? []),
        { consumer: "record-payment", role: PAY, queues: [] },
        { consumer: "send-receipt", role: RECEIPT, queues: [] },
      ],
    };
  }
  const declared = (payShared?: Sharing, receiptShared?: Sharing): DeclaredConsumerData[] => [
    {
      consumer: "record-payment",
      data: {
        tables: {
          "billing.invoices": {
            privileges: ["SELECT", "UPDATE"],
            ...(payShared ? { shared: payShared } : {}),
          },
        },
      },
    },
    {
      consumer: "send-receipt",
      data: {
        tables: {
          "billing.invoices": {
            privileges: ["SELECT", "UPDATE"],
            ...(receiptShared ? { shared: receiptShared } : {}),
          },
        },
      },
    },
  ];
  const findingsOf = (snapshot: CatalogSnapshot, declarations: readonly DeclaredConsumerData[]) =>
    diagnose({ catalog: snapshot, expectedCatalog: EXPECTED, sets: SETS, declarations }).findings;

  it("a table two consumers declare sharing, by name or as shared with any, is no finding", () => {
    expect(findingsOf(sharing(), declared(["send-receipt"], ["record-payment"]))).toEqual([]);
    expect(findingsOf(sharing(), declared(true, ["record-payment"]))).toEqual([]);
  });

  it("the same grants undeclared are a finding per privilege, naming the consumer and what to declare", () => {
    const findings = findingsOf(sharing(), []);
    expect(findings.map((f) => `${f.check} ${f.where}`)).toEqual(
      [PAY, RECEIPT].flatMap(() => [
        "undeclared-privilege schema billing",
        "undeclared-privilege table billing.invoices",
        "undeclared-privilege table billing.invoices",
      ]),
    );
    expect(findings[1]?.what).toContain("consumer record-payment does not declare");
    expect(findings[1]?.todo).toContain(`tables: { "billing.invoices": { privileges: ["SELECT"] } }`);
  });

  it("a table declared but not shared, that another consumer holds privileges on, is undeclared sharing", () => {
    const findings = findingsOf(sharing(), declared(undefined, ["record-payment"]));
    expect(findings.map((f) => `${f.check} ${f.where}`)).toEqual([
      "undeclared-sharing table billing.invoices",
    ]);
    expect(findings[0]?.what).toContain(`${RECEIPT} holds privileges on it too`);
    expect(findings[0]?.what).toContain(
      "consumer record-payment does not declare sharing it with send-receipt",
    );
  });

  it("sharing with another consumer than the one that holds privileges is undeclared sharing", () => {
    const findings = findingsOf(sharing(), declared(["audit"], true));
    expect(findings.map((f) => f.check)).toEqual([CHECK.undeclaredSharing]);
  });

  it("a declared table that is missing, a declared privilege and USAGE the role lacks", () => {
    const declarations: DeclaredConsumerData[] = [
      {
        consumer: "record-payment",
        data: {
          tables: {
            "billing.invoices": { privileges: ["SELECT", "UPDATE", "INSERT"], shared: true },
            "billing.refunds": { privileges: ["INSERT"] },
            "ledger.entries": { privileges: ["INSERT"] },
          },
        },
      },
      {
        consumer: "send-receipt",
        data: { tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"], shared: true } } },
      },
    ];
    const s = sharing();
    const snapshot = {
      ...s,
      schemas: [...s.schemas, { name: "ledger", owner: MIGRATOR }],
      relations: [
        ...s.relations,
        {
          schema: "ledger",
          name: "ledger.entries",
          kind: "table" as const,
          rowSecurity: false,
          forceRowSecurity: false,
          owner: MIGRATOR,
        },
      ],
      privileges: [...s.privileges, grant("table", "ledger.entries", "INSERT", PAY)],
    };
    const findings = findingsOf(snapshot, declarations);
    expect(findings.map((f) => `${f.check} ${f.where}`)).toEqual([
      "declared-privilege-missing table billing.invoices",
      "declared-data-missing table billing.refunds",
      "declared-privilege-missing schema ledger",
    ]);
    expect(findings[0]?.todo).toMatch(
      /^GRANT INSERT ON billing.invoices TO jobfence_consumer_record_payment,/,
    );
    expect(findings[2]?.todo).toMatch(/^GRANT USAGE ON SCHEMA ledger TO jobfence_consumer_record_payment,/);
  });

  it("a declaring consumer whose role does not exist is one finding", () => {
    const findings = findingsOf(healthy(), [
      { consumer: "record-payment", data: { tables: { "billing.invoices": { privileges: ["SELECT"] } } } },
    ]);
    expect(findings.map((f) => `${f.check} ${f.where}`)).toEqual([`declared-privilege-missing role ${PAY}`]);
  });

  it("a whole schema declared covers every privilege in it, functions included", () => {
    const snapshot = withPrivilege(grant("function", "billing.total(text)", "EXECUTE", PAY), sharing());
    const declarations: DeclaredConsumerData[] = [
      { consumer: "record-payment", data: { schemas: { billing: { shared: ["send-receipt"] } } } },
      {
        consumer: "send-receipt",
        data: { tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"], shared: true } } },
      },
    ];
    expect(findingsOf(snapshot, declarations)).toEqual([]);
  });

  it("a definition's data is validated: every problem in one clear line", () => {
    expect(
      dataDeclarationProblems("record-payment", { tables: { invoices: { privileges: ["SELECT"] } } }),
    ).toEqual(["consumer record-payment's data.tables.invoices: must be schema-qualified: schema.table"]);
    expect(
      dataDeclarationProblems("record-payment", {
        tables: { "billing.invoices": { privileges: ["SELEKT"], shared: [] } },
        schemas: { core: {} },
        owner: "me",
      }),
    ).toEqual([
      expect.stringContaining("consumer record-payment's data.tables.billing.invoices.privileges[0]:"),
      "consumer record-payment's data.tables.billing.invoices.shared: name at least one consumer, or give true",
      expect.stringContaining("consumer record-payment's data: Unrecognized key"),
      "consumer record-payment's data.schemas.core: core is jobfence's own: its privileges are not declared",
    ]);
    expect(
      dataDeclarationProblems("record-payment", {
        tables: { "billing.invoices": { privileges: ["SELECT", "SELECT"], shared: ["record-payment"] } },
        schemas: { billing: {} },
      }),
    ).toEqual(["consumer record-payment's data.tables.billing.invoices.privileges: names a privilege twice"]);
    expect(() =>
      assertDataDeclaration("record-payment", {
        tables: { "a.b": { privileges: ["SELECT"] } },
        schemas: { a: {} },
      }),
    ).toThrow(/declares table a.b and its whole schema/);
    expect(
      dataDeclarationProblems("record-payment", {
        tables: { "billing.invoices": { privileges: ["INSERT"], shared: ["send-receipt"] } },
      }),
    ).toEqual([]);
  });

  it("createConsumer refuses a malformed declaration at start-up, before it receives anything", () => {
    const definition = {
      name: "record-payment",
      payload: z.object({}),
      work: async () => {},
      data: { tables: { "Billing.Invoices": { privileges: ["SELECT"] } } },
    } as unknown as Parameters<typeof createConsumer>[0];
    const pool = new pg.Pool({ connectionString: "postgres://nobody@127.0.0.1:1/none" });
    const start = () =>
      createConsumer(definition, {
        config: { databaseUrl: "postgres://x@127.0.0.1/y", opsBusName: "ops" },
        pool,
      });
    expect(start).toThrow(ConfigurationError);
    expect(start).toThrow(
      /data.tables.Billing.Invoices: must be lowercase unquoted identifiers: schema.table/,
    );
  });

  it("the doctor function reads the declarations from JOBFENCE_DOCTOR_DECLARATIONS, and refuses a malformed one", () => {
    const DATABASE_URL = "postgres://ops@localhost:5432/jobfence";
    const declarations = [
      {
        consumer: "record-payment",
        data: { tables: { "billing.invoices": { privileges: ["SELECT"], shared: true } } },
      },
    ];
    const env = (value: string) => ({
      DATABASE_URL,
      JOBFENCE_DOCTOR_QUEUES: "[]",
      JOBFENCE_DOCTOR_DECLARATIONS: value,
    });
    expect(doctorConfigFromEnv(env(JSON.stringify(declarations))).declarations).toEqual(declarations);
    expect(doctorConfigFromEnv({ DATABASE_URL, JOBFENCE_DOCTOR_QUEUES: "[]" }).declarations).toBeUndefined();
    expect(() =>
      doctorConfigFromEnv(
        env(JSON.stringify([{ consumer: "record-payment", data: { tables: { invoices: {} } } }])),
      ),
    ).toThrow(/JOBFENCE_DOCTOR_DECLARATIONS/);
  });
});

describe("consumer names whose schema would be PostgreSQL's or jobfence's", () => {
  const colliding = ["public", "core", "information-schema", "pg-catalog", "pg-anything"];

  it("are refused wherever a consumer's name is checked, saying why", () => {
    for (const name of colliding) {
      expect(CONSUMER_NAME.test(name), name).toBe(false);
      expect(consumerNameCollision(name), name).toMatch(/is refused: its schema would be/);
      expect(() => checkServiceConsumers("migrate", [{ name }]), name).toThrow(
        new RegExp(`consumer name "${name}" is refused: its schema would be`),
      );
      expect(registryNameProblem(name), name).toBeDefined();
    }
    expect(() => checkServiceConsumers("migrate", [{ name: "public" }])).toThrow(
      /its schema would be public, which PostgreSQL or jobfence already uses \(PostgreSQL's own\)/,
    );
    expect(consumerNameCollision("core")).toMatch(/its schema would be core, .*\(jobfence's own\)/);
    // Names that merely contain them are fine.
    for (const name of ["publication", "core-ledger", "pgx", "my-pg-sync", "public-api"]) {
      expect(CONSUMER_NAME.test(name), name).toBe(true);
      expect(registryNameProblem(name), name).toBeUndefined();
    }
  });

  it("createConsumer refuses one at start-up", () => {
    const definition = { name: "public", payload: z.object({}), work: async () => {} };
    const pool = new pg.Pool({ connectionString: "postgres://nobody@127.0.0.1:1/none" });
    const start = () =>
      createConsumer(definition, {
        config: { databaseUrl: "postgres://x@127.0.0.1/y", opsBusName: "ops" },
        pool,
      });
    expect(start).toThrow(ConfigurationError);
    expect(start).toThrow(/consumer name "public" is refused: its schema would be public/);
  });
});
