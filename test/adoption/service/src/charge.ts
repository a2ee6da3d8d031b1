/**
 * charge-invoice: charges an invoice through the payment provider in a step, then marks it paid.
 * The charge is called with the idempotency key jobfence derives from the job and recorded before
 * the invoice is touched: however often SQS delivers the job, the card is charged once.
 */
import { type ConsumerDefinition, PermanentJobError } from "jobfence";
import { z } from "zod";

export const chargePayload = z.object({
  invoice_id: z.string().min(1).max(64),
  amount_cents: z.number().int().positive(),
  customer: z.string().min(1).max(64),
});

const Charge = z.object({ id: z.string(), amount: z.number().int() });

/** A provider's answer that retrying cannot change (a declined card): not 409, not 429, not 5xx. */
export class PaymentRefused extends Error {
  override name = "PaymentRefused";
}

export const chargeInvoice = {
  name: "charge-invoice",
  payload: chargePayload,
  data: { tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"] } } },
  steps: async (job) => ({
    charge: await job.step(
      "charge",
      Charge,
      async (key, { signal }) => {
        const response = await fetch(`${process.env.PAYMENTS_URL}/v1/charges`, {
          method: "POST",
          headers: { "content-type": "application/json", "idempotency-key": key },
          body: JSON.stringify({
            amount: job.payload.amount_cents,
            currency: "eur",
            customer: job.payload.customer,
          }),
          signal,
        });
        const answer: unknown = await response.json();
        if (response.ok) return answer;
        const status = response.status;
        const failure = `payments answered ${status}: ${JSON.stringify(answer)}`;
        throw status >= 400 && status < 500 && status !== 409 && status !== 429
          ? new PaymentRefused(failure)
          : new Error(failure);
      },
      { permanent: (error) => error instanceof PaymentRefused },
    ),
  }),
  work: async (job, tx) => {
    const { rowCount } = await tx.query(
      "UPDATE billing.invoices SET paid_cents = paid_cents + $2 WHERE id = $1",
      [job.payload.invoice_id, job.steps.charge.amount],
    );
    if (rowCount === 0) throw new PermanentJobError(`no invoice ${job.payload.invoice_id}`);
  },
} satisfies ConsumerDefinition<
  typeof chargePayload,
  Record<never, never>,
  { charge: z.output<typeof Charge> }
>;
