/**
 * The database user of each consumer's login: derived from the consumer's name, a valid
 * PostgreSQL identifier of at most 63 characters, one per consumer, and never the name of a group
 * role or of a shared login (which `core.provision_login` would refuse, or which would merge two
 * kinds of function into one user).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { consumerLoginName, DATABASE_LOGINS } from "../../infra/constructs/database.ts";
import { CONSUMER_NAME } from "../../shared/config/fields.ts";
import {
  CONSUMER_BASE_ROLE,
  consumerRoleName,
  SHARED_ROLES,
} from "../../shared/db/queries/provision-login.ts";

/**
 * Consumer names as the constructs accept them: a letter, then up to 62 letters, digits or dashes,
 * but for the reserved ones (whose schema would be public, core, information_schema or pg_*).
 */
const consumerName = fc
  .tuple(
    fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz"),
    fc.string({ unit: fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz0123456789-"), maxLength: 62 }),
  )
  .map(([first, rest]) => first + rest)
  .filter((name) => CONSUMER_NAME.test(name));

describe("consumerLoginName", () => {
  it("is jobfence_login_ and the name with - as _", () => {
    expect(consumerLoginName("award-points")).toBe("jobfence_login_award_points");
    expect(consumerLoginName("a")).toBe("jobfence_login_a");
  });

  it("keeps a name of up to 35 characters whole, and shortens a longer one to 63 with a digest of the whole name", () => {
    const fits = "a".repeat(35);
    expect(consumerLoginName(fits)).toBe(`jobfence_login_${fits}`);
    const long = `${"b".repeat(40)}-${"c".repeat(22)}`;
    expect(long).toMatch(CONSUMER_NAME);
    expect(consumerLoginName(long)).toMatch(/^jobfence_login_b{35}_[0-9a-f]{12}$/);
    expect(consumerLoginName(long)).toHaveLength(63);
    // Two long names that agree on the characters kept still get different users.
    expect(consumerLoginName(`${long.slice(0, 62)}d`)).not.toBe(consumerLoginName(long));
  });

  it("never gives a short name a long name's user (the forms differ in length)", () => {
    const long = "e".repeat(50);
    const taken = consumerLoginName(long);
    // The name that would spell it in the short form: 35 characters, '-', the 12-digit digest.
    const impostor = `${"e".repeat(35)}-${taken.slice(-12)}`;
    expect(impostor).toMatch(CONSUMER_NAME);
    expect(consumerLoginName(impostor)).not.toBe(taken);
  });

  it("is a plain PostgreSQL identifier of at most 63 characters for every consumer name", () => {
    fc.assert(
      fc.property(consumerName, (name) => {
        expect(name).toMatch(CONSUMER_NAME);
        expect(consumerLoginName(name)).toMatch(/^[a-z_][a-z0-9_]{0,62}$/);
      }),
    );
  });

  it("gives different consumers different users", () => {
    fc.assert(
      fc.property(fc.uniqueArray(consumerName, { minLength: 2, maxLength: 50 }), (names) => {
        expect(new Set(names.map(consumerLoginName)).size).toBe(names.length);
      }),
    );
  });

  it("is never a group role or a shared login, whatever the consumer is called", () => {
    const reserved = new Set<string>([
      CONSUMER_BASE_ROLE,
      ...SHARED_ROLES,
      ...Object.values(DATABASE_LOGINS),
    ]);
    for (const name of ["ops", "cleanup", "migrator", "consumer", "login-award-points"]) {
      expect(reserved.has(consumerLoginName(name)), name).toBe(false);
    }
    fc.assert(
      fc.property(consumerName, consumerName, (name, other) => {
        const login = consumerLoginName(name);
        expect(reserved.has(login)).toBe(false);
        expect(login).not.toBe(consumerRoleName(other));
        expect(login.startsWith("jobfence_consumer")).toBe(false);
      }),
    );
  });
});
