/**
 * The networks the variants run on: loopback, or latency proxies (bench/lib/latency-proxy.ts)
 * adding the same round-trip time to every service, one proxy per upstream (PostgreSQL, dynalite's
 * HTTP port, Redis), optionally holding each PostgreSQL COMMIT as well (the stores' proxies never
 * hold anything: only PostgreSQL commits).
 */

import { startLatencyProxy } from "../lib/latency-proxy.ts";
import type { Cleanups } from "../lib/support.ts";
import type { Network } from "./throughput.ts";

export const NETWORK_KINDS = ["loopback", "rtt", "commit"] as const;
export type NetworkKind = (typeof NETWORK_KINDS)[number];

/** The services as they answer on loopback. */
export interface Upstreams {
  readonly databaseUrl: string;
  readonly dynamoEndpoint: string;
  /** Absent when no Redis answered. */
  readonly redisUrl?: string;
}

export async function startNetworks(
  kinds: readonly NetworkKind[],
  upstreams: Upstreams,
  latency: { readonly rttMs: number; readonly commitMs: number },
  cleanups: Cleanups,
): Promise<Network[]> {
  const { databaseUrl, dynamoEndpoint, redisUrl } = upstreams;
  const proxy = async (url: URL, defaultPort: number, commitDelayMs = 0) => {
    const started = await startLatencyProxy({
      target: { host: url.hostname, port: Number(url.port || defaultPort) },
      oneWayDelayMs: latency.rttMs / 2,
      commitDelayMs,
    });
    cleanups.push(() => started.stop());
    return started;
  };
  const proxied = async (name: string, commitDelayMs: number): Promise<Network> => {
    const toPg = await proxy(new URL(databaseUrl), 5432, commitDelayMs);
    const toDynamo = await proxy(new URL(dynamoEndpoint), 80);
    const toRedis = redisUrl ? await proxy(new URL(redisUrl), 6379) : undefined;
    return {
      name,
      pgUrl: toPg.url(databaseUrl),
      dynamoEndpoint: `http://127.0.0.1:${toDynamo.port}`,
      ...(toRedis && redisUrl ? { redisUrl: toRedis.url(redisUrl) } : {}),
    };
  };
  const networks: Network[] = [];
  for (const kind of kinds) {
    if (kind === "loopback") {
      networks.push({
        name: "loopback",
        pgUrl: databaseUrl,
        dynamoEndpoint,
        ...(redisUrl ? { redisUrl } : {}),
      });
    } else if (kind === "rtt") {
      networks.push(await proxied(rttNetworkName(latency.rttMs), 0));
    } else {
      networks.push(
        await proxied(`+${latency.rttMs} ms RTT, ${latency.commitMs} ms commit`, latency.commitMs),
      );
    }
  }
  return networks;
}

/** The name of the network the targets are read on. */
export function rttNetworkName(rttMs: number): string {
  return `+${rttMs} ms RTT`;
}
