/**
 * The CDK app (`cdk synth`, `cdk deploy`). The constructs and the reference stack are built by the
 * CDK issue; until then the app synthesizes no stacks.
 */
import { App } from "aws-cdk-lib";

const app = new App();
app.synth();
