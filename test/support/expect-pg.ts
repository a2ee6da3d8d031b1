/** Assertions on PostgreSQL errors by SQLSTATE and constraint name, never by message text. */
import { expect } from "vitest";

/** SQLSTATE codes the schema tests expect. */
export const SQLSTATE = {
  checkViolation: "23514",
  uniqueViolation: "23505",
  notNullViolation: "23502",
  insufficientPrivilege: "42501",
  generatedAlways: "428C9",
} as const;

/** Awaits `work` and asserts it failed with `code` (and, when given, the named constraint). */
export async function expectRefused(
  work: Promise<unknown>,
  code: string,
  constraint?: string,
): Promise<void> {
  const error = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, "the database accepted what it must refuse").toBeDefined();
  expect(error).toMatchObject(constraint ? { code, constraint } : { code });
}
