/**
 * Function logins created on deploy (migrations 0006, 0014): the SCRAM verifier the client computes
 * is the one PostgreSQL would, the login gets exactly its group role (a consumer's own, or a shared
 * one) and loses every other membership, and everything else is refused.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { provisionLogins } from "../../functions/migrate/logins.ts";
import {
  consumerRoleName,
  ensureConsumerRole,
  provisionLogin,
  SHARED_ROLES,
} from "../../shared/db/queries/provision-login.ts";
import { parseScramVerifier, scramSha256Verifier } from "../../shared/db/scram.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { expectRefused, SQLSTATE } from "../support/expect-pg.ts";

const INVALID_PARAMETER = "22023";
const AWARD = consumerRoleName("award-points");
/** Every group role a login may be granted in the test database. */
const GROUP_ROLES = [AWARD, ...SHARED_ROLES];
let db: TestDatabase;
/** Roles are cluster-wide: every name is unique to this run and dropped afterwards. */
const created: string[] = [];
const loginName = (label: string) => {
  const name = `jft_${label}_${randomBytes(4).toString("hex")}`;
  created.push(name);
  return name;
};

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.withClient(async (client) => {
    // In creation order: a login goes before the roles that granted it something.
    for (const name of created) {
      const exists = await client.query("SELECT 1 FROM pg_roles WHERE rolname = $1", [name]);
      if (exists.rowCount === 0) continue;
      await client.query(`DROP OWNED BY ${name}`);
      await client.query(`DROP ROLE ${name}`);
    }
  });
  await db?.drop();
});

async function storedVerifier(client: pg.ClientBase, role: string): Promise<string> {
  const { rows } = await client.query<{ rolpassword: string }>(
    "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
    [role],
  );
  return rows[0]?.rolpassword ?? "";
}

async function memberships(client: pg.ClientBase, role: string): Promise<string[]> {
  const { rows } = await client.query<{ rolname: string }>(
    `SELECT g.rolname FROM pg_auth_members m
       JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member
      WHERE u.rolname = $1 ORDER BY 1`,
    [role],
  );
  return rows.map((r) => r.rolname);
}

/** Whether `password` is the one the stored verifier was made from. */
function verifies(stored: string, password: string): boolean {
  return scramSha256Verifier(password, parseScramVerifier(stored)) === stored;
}

describe("SCRAM-SHA-256 verifier", () => {
  it("is exactly what PostgreSQL stores for the same password, salt and iterations", async () => {
    await db.withClient(async (client) => {
      await client.query("SET password_encryption = 'scram-sha-256'");
      for (const password of ["s3cret", "A-long_password.with~every/URL+safe=char", "päss wörd", "x"]) {
        const role = loginName("pgref");
        await client.query(`CREATE ROLE ${role} PASSWORD ${pg.escapeLiteral(password)}`);
        const stored = await storedVerifier(client, role);
        expect(stored).toMatch(/^SCRAM-SHA-256\$/);
        expect(scramSha256Verifier(password, parseScramVerifier(stored))).toBe(stored);
        expect(verifies(stored, `${password}!`)).toBe(false);
      }
    });
  });

  it("uses a fresh salt each time and refuses empty input", () => {
    expect(scramSha256Verifier("p")).not.toBe(scramSha256Verifier("p"));
    expect(() => scramSha256Verifier("")).toThrow(RangeError);
    expect(() => scramSha256Verifier("p", { iterations: 0 })).toThrow(RangeError);
    expect(() => parseScramVerifier("md5abc")).toThrow(/SCRAM/);
  });
});

describe("core.provision_login", () => {
  it("creates a login with exactly its role, which then connects with its password", async () => {
    const username = loginName("consumer");
    const password = randomBytes(18).toString("base64url");
    await db.withClient(async (client) => {
      expect(await provisionLogin(client, { username, password, consumer: "award-points" })).toBe("created");
      const { rows } = await client.query(
        "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = $1",
        [username],
      );
      expect(rows).toEqual([
        {
          rolcanlogin: true,
          rolsuper: false,
          rolcreatedb: false,
          rolcreaterole: false,
          rolreplication: false,
          rolbypassrls: false,
        },
      ]);
      expect(await memberships(client, username)).toEqual([AWARD]);
      expect(verifies(await storedVerifier(client, username), password)).toBe(true);
    });
    const url = new URL(db.url);
    url.username = username;
    url.password = password;
    const login = new pg.Client({ connectionString: url.toString() });
    await login.connect();
    try {
      const { rows } = await login.query<{ user: string; consumer: boolean; ops: boolean }>(
        `SELECT current_user AS user, pg_has_role('${AWARD}', 'USAGE') AS consumer,
                pg_has_role('jobfence_ops', 'USAGE') AS ops`,
      );
      expect(rows).toEqual([{ user: username, consumer: true, ops: false }]);
      // The consumer's privileges, and no more: it may read and write its own fences, not another
      // consumer's, and not resolve dead letters.
      await login.query("SELECT count(*) FROM core.processed_jobs");
      await login.query(
        "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('login:1', core.consumer_id('award-points'), 't', now() + interval '1 day')",
      );
      await expectRefused(
        login.query(
          "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('login:1', core.consumer_id('notify-user'), 't', now() + interval '1 day')",
        ),
        SQLSTATE.insufficientPrivilege,
      );
      await expectRefused(
        login.query("UPDATE core.dead_letters SET status = 'discarded'"),
        SQLSTATE.insufficientPrivilege,
      );
    } finally {
      await login.end();
    }
  });

  it("updates the password of an existing login and moves it to its new role only", async () => {
    const username = loginName("moved");
    await db.withClient(async (client) => {
      await provisionLogin(client, { username, password: "first-password", consumer: "award-points" });
      expect(
        await provisionLogin(client, { username, password: "second-password", memberOf: "jobfence_ops" }),
      ).toBe("updated");
      const stored = await storedVerifier(client, username);
      expect(verifies(stored, "second-password")).toBe(true);
      expect(verifies(stored, "first-password")).toBe(false);
      expect(await memberships(client, username)).toEqual(["jobfence_ops"]);
    });
  });

  it("refuses a role that is not a jobfence group role, reserved names, and plaintext passwords", async () => {
    const verifier = scramSha256Verifier("pw");
    await db.withClient(async (client) => {
      const call = (login: string, password: string, memberOf: string) =>
        client.query("SELECT core.provision_login($1, $2, $3)", [login, password, memberOf]);
      const username = loginName("refused");
      await expectRefused(call(username, verifier, "pg_read_all_data"), INVALID_PARAMETER);
      await expectRefused(call(username, verifier, "jobfence_migrator"), INVALID_PARAMETER);
      // The base role acts for no consumer, and a consumer's role must be registered (by migrating).
      await expectRefused(call(username, verifier, "jobfence_consumer"), INVALID_PARAMETER);
      await expectRefused(call(username, verifier, consumerRoleName("never-migrated")), INVALID_PARAMETER);
      for (const reserved of [
        ...GROUP_ROLES,
        "jobfence_consumer",
        "pg_monitor",
        "rds_superuser",
        "rdsadmin",
      ]) {
        await expectRefused(call(reserved, verifier, "jobfence_ops"), INVALID_PARAMETER);
      }
      const { rows } = await client.query<{ me: string }>("SELECT current_user AS me");
      await expectRefused(call(rows[0]?.me ?? "", verifier, "jobfence_ops"), INVALID_PARAMETER);
      await expectRefused(call(username, "plaintext-password", "jobfence_ops"), INVALID_PARAMETER);
      const exists = await client.query("SELECT 1 FROM pg_roles WHERE rolname = $1", [username]);
      expect(exists.rowCount).toBe(0);
    });
  });

  it("refuses to take over an existing role with more privileges than a login", async () => {
    const username = loginName("powerful");
    await db.withClient(async (client) => {
      await client.query(`CREATE ROLE ${username} LOGIN CREATEDB`);
      await expectRefused(
        provisionLogin(client, { username, password: "pw", consumer: "award-points" }),
        SQLSTATE.insufficientPrivilege,
      );
      expect(await memberships(client, username)).toEqual([]);
    });
  });

  it("strips an adopted role of every membership but its group role (pg_write_all_data, another consumer's role)", async () => {
    const username = loginName("adopted");
    await db.withClient(async (client) => {
      const payments = await ensureConsumerRole(client, "record-payment");
      await client.query(`CREATE ROLE ${username} LOGIN`);
      await client.query(
        `GRANT pg_write_all_data, pg_read_all_data, jobfence_ops, ${payments} TO ${username}`,
      );
      expect(await provisionLogin(client, { username, password: "pw", consumer: "award-points" })).toBe(
        "updated",
      );
      expect(await memberships(client, username)).toEqual([AWARD]);
    });
  });

  it("never leaves a login with a membership granted by another role: revoked where the migrator may, refused where not", async () => {
    const username = loginName("granted_elsewhere");
    const grantor = loginName("grantor");
    const migrator = loginName("migrator");
    await db.withClient(async (client) => {
      // A migrator that is not a superuser (as on RDS), and a membership another role granted.
      await client.query(`CREATE ROLE ${migrator} CREATEROLE`);
      await client.query(`GRANT ${AWARD} TO ${migrator} WITH ADMIN OPTION`);
      await client.query(`GRANT CREATE, USAGE ON SCHEMA core TO ${migrator}`);
      await client.query(`GRANT SELECT ON core.consumer_roles TO ${migrator}`);
      await client.query(`GRANT EXECUTE ON FUNCTION core.provision_login(name, text, name) TO ${migrator}`);
      await client.query(`CREATE ROLE ${grantor}`);
      await client.query(`CREATE ROLE ${username} LOGIN`);
      await client.query(`GRANT pg_read_all_data TO ${grantor} WITH ADMIN OPTION`);
      await client.query(`GRANT ${username} TO ${migrator} WITH ADMIN OPTION`);
      await client.query(`SET ROLE ${grantor}`);
      await client.query(`GRANT pg_read_all_data TO ${username}`);
      await client.query(`SET ROLE ${migrator}`);
      // PostgreSQL 15 lets a CREATEROLE migrator revoke it; 16 and later keep a membership to its
      // grantor, and the function then refuses. Never: success with the membership still there.
      const outcome = await provisionLogin(client, {
        username,
        password: "pw",
        consumer: "award-points",
      }).then(
        () => "provisioned",
        (error: unknown) => error,
      );
      await client.query("RESET ROLE");
      const left = await memberships(client, username);
      if (outcome === "provisioned") expect(left).toEqual([AWARD]);
      else {
        expect(outcome).toMatchObject({ code: SQLSTATE.insufficientPrivilege });
        expect(left).toEqual(["pg_read_all_data"]);
      }
    });
  });

  it("may be called by the migrator only", async () => {
    await db.withClient(async (client) => {
      for (const role of [...GROUP_ROLES, "jobfence_consumer"]) {
        await client.query(`SET ROLE ${role}`);
        await expectRefused(
          client.query("SELECT core.provision_login($1, $2, 'jobfence_ops')", [
            loginName("escalate"),
            scramSha256Verifier("pw"),
          ]),
          SQLSTATE.insufficientPrivilege,
        );
        await client.query("RESET ROLE");
      }
    });
  });
});

describe("provisionLogins", () => {
  it("changes no login when one of them is refused", async () => {
    const good = loginName("atomic");
    await db.withClient(async (client) => {
      await expectRefused(
        provisionLogins(client, [
          { username: good, password: "pw", memberOf: "jobfence_cleanup" },
          { username: "jobfence_ops", password: "pw", memberOf: "jobfence_ops" },
        ]),
        INVALID_PARAMETER,
      );
      const exists = await client.query("SELECT 1 FROM pg_roles WHERE rolname = $1", [good]);
      expect(exists.rowCount).toBe(0);
    });
  });

  it("refuses one user name for two kinds of function", async () => {
    const shared = loginName("shared");
    await db.withClient(async (client) => {
      await expect(
        provisionLogins(client, [
          { username: shared, password: "pw", consumer: "award-points" },
          { username: shared, password: "pw", memberOf: "jobfence_ops" },
        ]),
      ).rejects.toThrow(/appears twice/);
    });
  });
});

describe("core.provision_login refuses a user that would reach past its role", () => {
  it("reserves every consumer group role's name, this database's or another's", async () => {
    await db.withClient(async (client) => {
      await expectRefused(
        client.query("SELECT core.provision_login($1, $2, 'jobfence_ops')", [
          "jobfence_consumer_of_another_database",
          scramSha256Verifier("pw"),
        ]),
        INVALID_PARAMETER,
      );
    });
  });

  it("refuses a user another role is a member of, or one holding privileges of its own", async () => {
    const withMember = loginName("with_member");
    const member = loginName("member");
    const privileged = loginName("privileged");
    await db.withClient(async (client) => {
      await client.query(`CREATE ROLE ${withMember} LOGIN`);
      await client.query(`CREATE ROLE ${member} LOGIN`);
      await client.query(`GRANT ${withMember} TO ${member}`);
      await expectRefused(
        provisionLogin(client, { username: withMember, password: "pw", consumer: "award-points" }),
        SQLSTATE.insufficientPrivilege,
      );
      await client.query(`CREATE ROLE ${privileged} LOGIN`);
      await client.query(`GRANT INSERT, UPDATE ON core.dead_letters TO ${privileged}`);
      await expectRefused(
        provisionLogin(client, { username: privileged, password: "pw", consumer: "award-points" }),
        SQLSTATE.insufficientPrivilege,
      );
      expect(await memberships(client, privileged)).toEqual([]);
      await client.query(`REVOKE ALL ON core.dead_letters FROM ${privileged}`);
      expect(
        await provisionLogin(client, { username: privileged, password: "pw", consumer: "award-points" }),
      ).toBe("updated");
    });
  });
});
