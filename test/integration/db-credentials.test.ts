/**
 * Database credentials from Secrets Manager, against a real PostgreSQL login (password
 * authentication) and a local Secrets Manager endpoint: the secret is read when the pool is
 * created and then cached; after a rotation (a new password in the database and in the secret) a
 * new connection is refused once, the secret is read again, and the connection succeeds; a
 * rotation to another username is followed the same way; a refusal the secret cannot fix fails
 * after one re-read, not in a loop. The migrate function's single client behaves the same.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { connectClient, SecretCredentials, type SecretEndpoint } from "../../shared/db/credentials.ts";
import { createPool } from "../../shared/db/pool.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { type LocalSecretsManager, localSecretsManager } from "../support/secrets-manager.ts";

const ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:jobfence/db/consumer/test-AbCdEf";
/** Long enough that no read in these tests comes from the cache's expiry. */
const CACHE_SECONDS = 3600;

let db: TestDatabase;
let admin: pg.Client;
/** What the local Secrets Manager serves; tests change it as a rotation would. */
const served: Record<string, string> = {};
let secretsManager: LocalSecretsManager;
/** Whether the server checks passwords (the embedded PostgreSQL does; a trust-auth server does not). */
let checksPasswords = false;
/** Roles are cluster-wide: every name is unique to this run and dropped afterwards. */
const created: string[] = [];
const pools: pg.Pool[] = [];

function newRole(label: string): string {
  const name = `jft_cred_${label}_${randomBytes(4).toString("hex")}`;
  created.push(name);
  return name;
}

async function setPassword(role: string, password: string, create = false): Promise<void> {
  await admin.query(
    `${create ? "CREATE" : "ALTER"} ROLE ${role} LOGIN PASSWORD ${pg.escapeLiteral(password)}`,
  );
}

function putSecret(username: string, password: string): void {
  served[ARN] = JSON.stringify({ username, password, engine: "postgres" });
}

function endpoint(): SecretEndpoint {
  const url = new URL(db.url);
  return {
    secretArn: ARN,
    host: url.hostname,
    port: Number(url.port || 5432),
    database: db.name,
    sslMode: "disable",
  };
}

function credentials(maxAgeSeconds = CACHE_SECONDS): SecretCredentials {
  return new SecretCredentials(ARN, { secretsManager: secretsManager.client, maxAgeSeconds });
}

function secretPool(source: SecretCredentials): pg.Pool {
  const pool = createPool({ secret: endpoint(), credentials: source, max: 2, connectionCheckIntervalMs: 0 });
  pools.push(pool);
  return pool;
}

/** Runs `SELECT current_user` on a new connection of `pool`, then closes that connection. */
async function whoOnNewConnection(pool: pg.Pool): Promise<string> {
  const client = await pool.connect();
  try {
    const { rows } = await client.query<{ user: string }>("SELECT current_user AS user");
    return rows[0]?.user as string;
  } finally {
    // Destroyed, not returned: the next checkout must log in again.
    client.release(true);
  }
}

beforeAll(async () => {
  db = await createTestDatabase({ empty: true });
  admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  secretsManager = await localSecretsManager(served);
  const probe = newRole("probe");
  await setPassword(probe, "right", true);
  const url = new URL(db.url);
  url.username = probe;
  url.password = "wrong";
  const wrong = new pg.Client({ connectionString: url.toString() });
  checksPasswords = await wrong.connect().then(
    () => false,
    () => true,
  );
  await wrong.end().catch(() => {});
  if (!checksPasswords) {
    console.warn("db-credentials: the server does not check passwords (trust auth); these tests are skipped");
  }
});

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end().catch(() => {})));
  for (const name of created) {
    const exists = await admin.query("SELECT 1 FROM pg_roles WHERE rolname = $1", [name]);
    if (exists.rowCount !== 0) await admin.query(`DROP ROLE ${name}`);
  }
  await admin?.end();
  await secretsManager?.close();
  await db?.drop();
});

beforeEach((context) => {
  if (!checksPasswords) context.skip();
  secretsManager.requests.length = 0;
});

describe("a pool whose login is in Secrets Manager", () => {
  it("reads the secret when the pool is created, and serves every new connection from the cache", async () => {
    const role = newRole("cached");
    await setPassword(role, "first-password", true);
    putSecret(role, "first-password");
    const pool = secretPool(credentials());
    // Read at init, before anything asks for a connection.
    await expect.poll(() => secretsManager.requests).toEqual([ARN]);
    for (let i = 0; i < 3; i++) expect(await whoOnNewConnection(pool)).toBe(role);
    const both = await Promise.all([pool.connect(), pool.connect()]);
    for (const client of both) client.release(true);
    expect(secretsManager.requests).toEqual([ARN]);
  });

  it("reads the secret again once its max age has passed", async () => {
    const role = newRole("aged");
    await setPassword(role, "aged-password", true);
    putSecret(role, "aged-password");
    const pool = secretPool(credentials(1));
    expect(await whoOnNewConnection(pool)).toBe(role);
    expect(secretsManager.requests).toEqual([ARN]);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    expect(await whoOnNewConnection(pool)).toBe(role);
    expect(secretsManager.requests).toEqual([ARN, ARN]);
  });

  it("after a rotation (new password in the database and the secret), a new connection succeeds after one refused login", async () => {
    const role = newRole("rotated");
    await setPassword(role, "before-rotation", true);
    putSecret(role, "before-rotation");
    const source = credentials();
    const pool = secretPool(source);
    const open = await pool.connect();
    expect(secretsManager.requests).toEqual([ARN]);

    await setPassword(role, "after-rotation");
    putSecret(role, "after-rotation");
    // The cache still holds the old password (max age an hour): the login is refused, the
    // secret re-read, and the connection tried again.
    expect(await whoOnNewConnection(pool)).toBe(role);
    expect(secretsManager.requests).toEqual([ARN, ARN]);
    expect(source.latest?.password).toBe("after-rotation");
    // A connection opened before the rotation keeps its session.
    expect((await open.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    open.release();
    // The new password is cached now: no further read.
    expect(await whoOnNewConnection(pool)).toBe(role);
    expect(secretsManager.requests).toEqual([ARN, ARN]);
  });

  it("through pool.query too (pg-pool checks out through the same connect)", async () => {
    const role = newRole("query");
    await setPassword(role, "query-one", true);
    putSecret(role, "query-one");
    const pool = secretPool(credentials());
    expect((await pool.query("SELECT current_user AS user")).rows).toEqual([{ user: role }]);
    // Drop the idle connection so the next query has to log in.
    const idle = await pool.connect();
    idle.release(true);
    await setPassword(role, "query-two");
    putSecret(role, "query-two");
    expect((await pool.query("SELECT current_user AS user")).rows).toEqual([{ user: role }]);
    expect(secretsManager.requests).toEqual([ARN, ARN]);
  });

  it("follows a rotation to another username: new connections log in as the secret's new user", async () => {
    const first = newRole("user_a");
    const second = newRole("user_b");
    await setPassword(first, "a-password", true);
    await setPassword(second, "b-password", true);
    putSecret(first, "a-password");
    const pool = secretPool(credentials());
    expect(await whoOnNewConnection(pool)).toBe(first);

    // Alternating users: the secret now names the other user, and the old one's password changed.
    putSecret(second, "b-password");
    await setPassword(first, "retired");
    expect(await whoOnNewConnection(pool)).toBe(second);
    expect(await whoOnNewConnection(pool)).toBe(second);
    expect(secretsManager.requests).toEqual([ARN, ARN]);
  });

  it("fails after one re-read when the secret does not match the database (a rotation half done)", async () => {
    const role = newRole("half");
    await setPassword(role, "in-the-secret", true);
    putSecret(role, "in-the-secret");
    const pool = secretPool(credentials());
    expect(await whoOnNewConnection(pool)).toBe(role);
    await setPassword(role, "only-in-the-database");
    await expect(pool.connect()).rejects.toMatchObject({ code: "28P01" });
    expect(secretsManager.requests).toEqual([ARN, ARN]);
  });

  it("a password that stays wrong re-reads the secret once per interval, not once per connection", async () => {
    const role = newRole("stuck");
    await setPassword(role, "in-the-secret", true);
    putSecret(role, "in-the-secret");
    let now = 1_000_000;
    const source = new SecretCredentials(ARN, {
      secretsManager: secretsManager.client,
      maxAgeSeconds: CACHE_SECONDS,
      minRefreshIntervalMs: 5000,
      now: () => now,
    });
    const pool = secretPool(source);
    expect(await whoOnNewConnection(pool)).toBe(role);
    await setPassword(role, "only-in-the-database");
    for (let i = 0; i < 5; i++) await expect(pool.connect()).rejects.toMatchObject({ code: "28P01" });
    // The first refusal re-read the secret; the next four, within the interval, did not.
    expect(secretsManager.requests).toEqual([ARN, ARN]);
    now += 5001;
    await expect(pool.connect()).rejects.toMatchObject({ code: "28P01" });
    expect(secretsManager.requests).toEqual([ARN, ARN, ARN]);
  });

  it("shares one read among refreshes asked for while it is in flight", async () => {
    const role = newRole("burst");
    putSecret(role, "burst-password");
    const source = credentials();
    await Promise.all([source.refresh(), source.refresh(), source.refresh(), source.get()]);
    expect(secretsManager.requests).toEqual([ARN]);
  });

  it("refuses a secret without username and password, naming the fields and never the value", async () => {
    served[ARN] = JSON.stringify({ username: "someone", passwd: "do-not-print-me" });
    const error = await credentials()
      .get()
      .then(
        () => undefined,
        (e: unknown) => e as Error,
      );
    expect(error).toMatchObject({ name: "LoginSecretError" });
    expect(error?.message).toContain("password");
    expect(error?.message).not.toContain("do-not-print-me");
  });
});

describe("the migrate function's client", () => {
  it("logs in with the secret, and after a rotation re-reads it once and connects", async () => {
    const role = newRole("migrator");
    await setPassword(role, "migrator-one", true);
    putSecret(role, "migrator-one");
    const source = credentials();
    const first = await connectClient({ secret: endpoint(), credentials: source });
    expect((await first.query("SELECT current_user AS user")).rows).toEqual([{ user: role }]);
    await first.end();

    await setPassword(role, "migrator-two");
    putSecret(role, "migrator-two");
    const second = await connectClient({ secret: endpoint(), credentials: source });
    expect((await second.query("SELECT current_user AS user")).rows).toEqual([{ user: role }]);
    await second.end();
    expect(secretsManager.requests).toEqual([ARN, ARN]);
  });
});
