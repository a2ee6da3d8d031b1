/**
 * The consumers a service's `jobfence migrate` and `jobfence doctor` are told about: each one's
 * name and what its definition declares it works on. A `ConsumerDefinition` is one, so a command
 * can be given the service's definitions as they are. Pure.
 */
import { consumerNameProblem } from "../config/fields.ts";
import {
  type DataDeclaration,
  type DeclaredConsumerData,
  dataDeclarationProblems,
} from "../doctor/declared-data.ts";
import { ConfigurationError } from "../errors/configuration.ts";

/** A consumer of the service: its name and, when it works on the service's tables, its `data`. */
export interface ServiceConsumer {
  readonly name: string;
  /** @default none: it works on its own schema, or on core only */
  readonly data?: DataDeclaration;
}

/** Checks every consumer (names, repeats, declarations); throws one ConfigurationError listing every problem. */
export function checkServiceConsumers(
  subject: string,
  consumers: readonly ServiceConsumer[],
): DeclaredConsumerData[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const c of consumers) {
    const nameProblem = consumerNameProblem(c?.name);
    if (nameProblem !== undefined) {
      problems.push(nameProblem);
      continue;
    }
    if (seen.has(c.name)) problems.push(`consumer ${c.name} is given twice`);
    seen.add(c.name);
    if (c.data !== undefined) problems.push(...dataDeclarationProblems(c.name, c.data));
  }
  if (problems.length > 0) throw new ConfigurationError(subject, problems);
  return consumers.map((c) => ({ consumer: c.name, data: c.data ?? {} }));
}
