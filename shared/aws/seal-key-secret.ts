/**
 * The API's signing key (cursors, plan tokens) from Secrets Manager, read once at init. The secret
 * is a string the deployment generates (infra/constructs/dead-letter-api.ts); a rotation takes
 * effect as functions start, and outstanding cursors and tokens then simply stop verifying.
 */
import { GetSecretValueCommand, type SecretsManagerClient } from "@aws-sdk/client-secrets-manager";
import { type SealKey, sealKey } from "../dead-letters/seal.ts";
import { ConfigurationError } from "../errors/configuration.ts";

export async function readSealKey(client: SecretsManagerClient, secretArn: string): Promise<SealKey> {
  const { SecretString } = await client.send(new GetSecretValueCommand({ SecretId: secretArn }));
  if (!SecretString) {
    throw new ConfigurationError("dead-letter API", [`the signing key secret ${secretArn} holds no string`]);
  }
  return sealKey(SecretString);
}
