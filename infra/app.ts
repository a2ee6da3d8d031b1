/**
 * The CDK app (`cdk synth`, `cdk deploy`): the reference stack, configured through context
 * (`-c jobfence:jwtIssuer=…`, see docs/deploy.md), checked by cdk-nag's AwsSolutions pack on
 * synthesis: an unacknowledged finding fails the synth. A misconfiguration (the consumer registry,
 * the context, the timings) is printed as its list of problems and fails the synth, without a
 * stack trace.
 */
import { App, Validations } from "aws-cdk-lib";
import { AwsSolutionsChecks } from "cdk-nag";
import { registryImportProblem, verifyConsumerRegistry } from "../functions/registry.ts";
import { ConfigurationError } from "../shared/errors/configuration.ts";

try {
  // Imported here: the registry imports every consumer's module, and one that is not there (a
  // folder renamed) is a mistake to explain.
  const { CONSUMERS } = await import("../functions/consumers.ts");
  const { JobfenceStack, stackPropsFromContext } = await import("./reference-stack.ts");
  // The whole registry, files and modules: the stack itself checks only the files of what it deploys.
  await verifyConsumerRegistry(CONSUMERS, "consumer registry");

  const app = new App();
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  const stackName = (app.node.tryGetContext("jobfence:stackName") as string | undefined) ?? "Jobfence";
  new JobfenceStack(app, stackName, {
    ...stackPropsFromContext((key) => app.node.tryGetContext(key)),
    env: { account: process.env.CDK_DEFAULT_ACCOUNT, region: process.env.CDK_DEFAULT_REGION },
    description: "jobfence: SQS consumers with an idempotency fence, dead letters and their API",
  });
  app.synth();
} catch (error) {
  const problem = error instanceof ConfigurationError ? error.message : registryImportProblem(error);
  if (problem === undefined) throw error;
  console.error(problem);
  process.exit(1);
}
