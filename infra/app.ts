/**
 * The CDK app (`cdk synth`, `cdk deploy`): the reference stack, configured through context
 * (`-c jobfence:jwtIssuer=…`, see docs/deploy.md), checked by cdk-nag's AwsSolutions pack on
 * synthesis: an unacknowledged finding fails the synth.
 */
import { App, Validations } from "aws-cdk-lib";
import { AwsSolutionsChecks } from "cdk-nag";
import { CONSUMERS } from "../functions/consumers.ts";
import { verifyConsumerRegistry } from "../functions/registry.ts";
import { JobfenceStack, stackPropsFromContext } from "./reference-stack.ts";

// The stack checks the consumers' files; this checks what only importing them shows: that each
// registered definition is the one its folder's entry point builds.
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
