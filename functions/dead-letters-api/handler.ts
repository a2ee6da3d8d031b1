/** Lambda entry point of the dead-letter API; configured from the environment at init. */
import type { JWK } from "jose";
import { createSecretsManagerClient, createSqsClient } from "../../shared/aws/clients.ts";
import { readSealKey } from "../../shared/aws/seal-key-secret.ts";
import { databaseConnection } from "../../shared/config/fields.ts";
import { createPool } from "../../shared/db/pool.ts";
import { createTokenVerifier } from "../../shared/http/auth.ts";
import { createDeadLetterApi } from "./api.ts";
import { apiConfigFromEnv } from "./config.ts";

const config = apiConfigFromEnv();

export const handler = createDeadLetterApi({
  pool: createPool({
    ...databaseConnection(config),
    max: config.poolMax,
    lockTimeoutMs: config.lockTimeoutMs,
    applicationName: "jobfence:dead-letters-api",
    ...(config.dbRole ? { role: config.dbRole } : {}),
  }),
  sqs: createSqsClient(),
  sealKey: () => readSealKey(createSecretsManagerClient(), config.signingKeySecretArn),
  bulk: { confirmAbove: config.bulkConfirmAbove },
  verifier: createTokenVerifier({
    issuer: config.issuer,
    audience: config.audience,
    maxTokenAgeSeconds: config.jwtMaxAgeSeconds,
    ...(config.jwksUrl ? { jwksUrl: config.jwksUrl } : { jwks: config.jwks as { keys: JWK[] } }),
  }),
});
