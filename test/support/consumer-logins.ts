/**
 * Real logins of consumers, made by core.provision_login as the migrate function makes them, for
 * tests that act as a consumer would: each login's name carries a random part (roles are the
 * cluster's, shared with the tests beside this one), and `close` ends the sessions and drops the
 * logins.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { provisionLogin } from "../../shared/db/queries/provision-login.ts";

export class ConsumerLogins {
  readonly #admin: pg.ClientBase;
  readonly #databaseUrl: string;
  readonly #prefix: string;
  readonly #logins: string[] = [];
  readonly #sessions: pg.Client[] = [];

  /** `admin`: a migrator session of the database at `databaseUrl`; `prefix`: the logins' names start with it. */
  constructor(admin: pg.ClientBase, databaseUrl: string, prefix: string) {
    this.#admin = admin;
    this.#databaseUrl = databaseUrl;
    this.#prefix = prefix;
  }

  /** A new login of `consumer`'s, and a session of it. */
  async connect(consumer: string, options: { applicationName?: string } = {}): Promise<pg.Client> {
    const username = `${this.#prefix}_${randomBytes(4).toString("hex")}`;
    const password = randomBytes(18).toString("base64url");
    this.#logins.push(username);
    await provisionLogin(this.#admin, { username, password, consumer });
    const url = new URL(this.#databaseUrl);
    url.username = username;
    url.password = password;
    const session = new pg.Client({
      connectionString: url.toString(),
      ...(options.applicationName === undefined ? {} : { application_name: options.applicationName }),
    });
    await session.connect();
    this.#sessions.push(session);
    return session;
  }

  /** Ends every session and drops every login made here. */
  async close(): Promise<void> {
    for (const session of this.#sessions.splice(0)) await session.end().catch(() => {});
    for (const login of this.#logins.splice(0)) await this.#admin.query(`DROP ROLE IF EXISTS ${login}`);
  }
}
