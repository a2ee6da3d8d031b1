/**
 * One way to read configuration, for every function and the local stack: validate with a zod
 * schema, report every problem at once in a ConfigurationError, and — when the values come from
 * the environment — name each problem by its environment variable.
 */
import type { z } from "zod";
import { ConfigurationError } from "../errors/configuration.ts";

/** Validates `input` against `schema`; problems are named by key. */
export function parseConfig<S extends z.ZodType>(schema: S, input: unknown, subject: string): z.output<S> {
  const result = schema.safeParse(input);
  if (!result.success) {
    throw new ConfigurationError(
      subject,
      result.error.issues.map((issue) => `${issue.path.join(".") || "(root)"}: ${issue.message}`),
    );
  }
  return result.data;
}

/**
 * Reads the variables `variables` maps configuration keys to, validates them with `schema` (keyed
 * by configuration key), and names each problem by its variable. An empty variable counts as unset.
 */
export function configFromEnv<S extends z.ZodType>(
  schema: S,
  variables: Readonly<Record<string, string>>,
  env: NodeJS.ProcessEnv,
  subject: string,
): z.output<S> {
  const input: Record<string, string> = {};
  for (const [key, variable] of Object.entries(variables)) {
    const value = env[variable];
    if (value !== undefined && value !== "") input[key] = value;
  }
  const result = schema.safeParse(input);
  if (!result.success) {
    throw new ConfigurationError(
      subject,
      result.error.issues.map((issue) => {
        const key = issue.path[0];
        const name = typeof key === "string" ? (variables[key] ?? key) : "configuration";
        return `${name}: ${issue.message}`;
      }),
    );
  }
  return result.data;
}
