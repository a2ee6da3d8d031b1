/**
 * A local Secrets Manager endpoint for the one call jobfence makes (GetSecretValue), speaking the
 * service's JSON protocol so tests drive the real AWS SDK client. No emulator for Secrets Manager
 * is available offline; this serves fixed secrets and records each request.
 */
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { SecretsManagerClient } from "@aws-sdk/client-secrets-manager";

export interface LocalSecretsManager {
  readonly client: SecretsManagerClient;
  /** SecretIds asked for, in order. */
  readonly requests: string[];
  close(): Promise<void>;
}

/** Serves `secrets` (SecretId → SecretString); any other id is ResourceNotFoundException. */
export async function localSecretsManager(
  secrets: Readonly<Record<string, string>>,
): Promise<LocalSecretsManager> {
  const requests: string[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const reply = (status: number, body: unknown) => {
        res.writeHead(status, { "content-type": "application/x-amz-json-1.1" });
        res.end(JSON.stringify(body));
      };
      if (req.headers["x-amz-target"] !== "secretsmanager.GetSecretValue") {
        reply(400, { __type: "InvalidRequestException", message: "only GetSecretValue is served here" });
        return;
      }
      const { SecretId } = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { SecretId: string };
      requests.push(SecretId);
      const value = secrets[SecretId];
      if (value === undefined) {
        reply(400, {
          __type: "ResourceNotFoundException",
          message: `Secrets Manager can't find ${SecretId}`,
        });
        return;
      }
      reply(200, { ARN: SecretId, Name: SecretId, SecretString: value, VersionId: "v1" });
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  const client = new SecretsManagerClient({
    endpoint: `http://127.0.0.1:${port}`,
    region: "eu-west-1",
    credentials: { accessKeyId: "local", secretAccessKey: "local" },
    maxAttempts: 1,
  });
  return {
    client,
    requests,
    close: async () => {
      client.destroy();
      server.close();
      await once(server, "close");
    },
  };
}
