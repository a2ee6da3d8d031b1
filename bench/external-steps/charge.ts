/**
 * The external call every variant makes: charge the job's customer through the fake provider
 * (POST /v1/charges, Stripe's shape with a JSON body), with an Idempotency-Key when the variant has
 * one. The request says which job it is for (its description), so the provider's ledger can be
 * read per job (./attribution.ts).
 */
import { z } from "zod";

/** The charge's body for a job: its points in cents, charged to its user. */
export interface ChargeRequest {
  readonly amount: number;
  readonly currency: string;
  readonly customer: string;
  readonly description: string;
}

const DESCRIPTION_PREFIX = "job ";

export function chargeRequestOf(job: { jobId: string; userId: string; points: number }): ChargeRequest {
  return {
    amount: job.points * 100,
    currency: "eur",
    customer: `cus_${job.userId}`,
    description: `${DESCRIPTION_PREFIX}${job.jobId}`,
  };
}

/** The job a charge request was made for; undefined for a body that names none. */
export function jobIdOfRequest(request: unknown): string | undefined {
  const description = (request as { description?: unknown } | null)?.description;
  return typeof description === "string" && description.startsWith(DESCRIPTION_PREFIX)
    ? description.slice(DESCRIPTION_PREFIX.length)
    : undefined;
}

/** What the provider answers for a charge, as the step checkpoints it. */
export const Charge = z.object({
  id: z.string().startsWith("ch_"),
  object: z.literal("charge"),
  amount: z.number().int(),
  currency: z.string(),
  customer: z.string(),
  status: z.literal("succeeded"),
});
export type Charge = z.output<typeof Charge>;

/** The provider answered something other than 2xx. */
export class ProviderCallError extends Error {
  readonly status: number;
  readonly body: string;
  constructor(status: number, body: string) {
    super(`the provider answered ${status}: ${body.slice(0, 200)}`);
    this.name = "ProviderCallError";
    this.status = status;
    this.body = body;
  }
}

/** POSTs the charge; answers the provider's JSON, or throws {@link ProviderCallError}. */
export async function charge(
  providerUrl: string,
  request: ChargeRequest,
  key: string | undefined,
  signal?: AbortSignal,
): Promise<unknown> {
  const response = await fetch(`${providerUrl}/v1/charges`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key === undefined ? {} : { "idempotency-key": key }) },
    body: JSON.stringify(request),
    ...(signal ? { signal } : {}),
  });
  const text = await response.text();
  if (!response.ok) throw new ProviderCallError(response.status, text);
  return JSON.parse(text) as unknown;
}
