/*
 * A step: an external call made before the fence transaction: RecordSpine.steps
 * (shared/record/spine.ts) → runSteps (shared/steps/run-steps.ts), its row in core.job_steps
 * (shared/db/queries/job-steps.ts, migration 0027), keyed by stepKey(consumer, jobId, step).
 * Consumer A's job J has one step; the other jobs have none. Only the scenarios that define
 * WITH_STEPS include this file; the others keep the worker without step 2s.
 *
 * One rule here is not in the code yet: the row recorded as started before the call, and a step
 * whose row started before the provider's window, with no checkpoint, refused (OUTCOME_UNKNOWN;
 * W10 is the code as it is). docs/reliability.md, "The model", says why.
 *
 * The provider (a payment or e-mail API, the fake provider of testing/fake-provider.ts) honours an
 * idempotency key for a window (Stripe keeps a key at least 24 hours): a repeat of a key it holds
 * gets the first answer and has no new effect. Once the window passes it has forgotten the key.
 */

/* A provider's answer is the number of its effect (the first effect answers 1), so a result
   that is not the first effect's answer is one of a second effect. */
#define FIRST_ANSWER 1

#define STEP_RESET ans = 0; sres = 0

/* what the step decided from the job's step row (sres) */
#define S_DONE 1     /* a checkpoint: its result, no call */
#define S_CALL 2     /* no checkpoint: call the provider with the step's key */
#define S_UNKNOWN 3  /* started long ago, no checkpoint: the call may have acted, its key is gone */
#define S_FENCED 4   /* the job's fence exists: no step runs, the fence decides (kept until step 2b) */

#ifdef W8
/* W8, a key not derived from the job: a fresh key per attempt, which the provider never holds */
#define KEY_HELD false
#else
/* the key is stepKey(consumer, J, step): every attempt, delivery and replay sends the same one */
#define KEY_HELD (p_ans != 0)
#endif

#ifdef W10
/* W10, a call's outcome taken as known: a step started before the provider's window, with no
   checkpoint, is called again although its key is gone */
#define OUTCOME_UNKNOWN false
#else
/* a step row started before the provider's window, with no checkpoint: its call may have acted
   (crashed or timed out after the request), and a repeat of its key would be a new request */
#define OUTCOME_UNKNOWN (s_started && s_old)
#endif

/*
 * Step 2s, after the claim and before the fence transaction (steps 2b to 4). Sets `ans` to the
 * step's result, or leaves the delivery at `transient` or `deadletter` like a failed work. The
 * row's read, the call and its crash points are one atomic step (what another process does between
 * them changes nothing the search needs: the provider answers a repeat alike before or after, and
 * the window passes only between deliveries); the checkpoint is a step of its own.
 */
inline job_step() {
  atomic {
    /* a message interrupted too often or exhausted runs no step (RecordSpine.steps, #refuseSpent) */
    if
    :: j == J && c_intr[c] >= MAXINTR -> kind = K_INTERRUPTED; check = 1; goto deadletter
    :: j == J && c_intr[c] < MAXINTR && c_fails[c] >= MAXFAILS -> kind = K_EXHAUSTED; check = 1; goto deadletter
    :: else
    fi;
    /* the job's fence and its step's row, in one round trip (readJobSteps); without a checkpoint,
       the row recorded as started (OUTCOME_UNKNOWN) */
    if
    :: j != J -> sres = 0   /* the other jobs' consumers have no steps */
    :: j == J && f_fp[j] != 0 -> sres = S_FENCED
    :: j == J && f_fp[j] == 0 && s_cp != 0 -> ans = s_cp; sres = S_DONE; s_reused = 1
    :: j == J && f_fp[j] == 0 && s_cp == 0 && OUTCOME_UNKNOWN -> sres = S_UNKNOWN
    :: j == J && f_fp[j] == 0 && s_cp == 0 && !OUTCOME_UNKNOWN -> sres = S_CALL
#ifndef W9
       ; s_started = 1   /* (W9 writes the whole row in the fence transaction) */
#endif
    fi;
    if
    :: sres == S_UNKNOWN ->
       /* a permanent failure: a dead letter, which an operator resolves after asking the provider */
       kind = K_HARD; check = 1; goto deadletter
    :: sres == S_CALL ->
       CRASHPOINT;   /* fault point step:before-call */
       /* the request under the step's key: refused before acting (a 5xx, a 409 while a request
          of the key is in flight, a 429), refused for good (a 4xx the step declares permanent:
          PermanentStepError), answered, or acted but answered too late for the call's signal */
       if
       :: failures < MAXFAIL -> failures++; goto transient
       :: failures < MAXFAIL -> failures++; kind = K_HARD; check = 1; goto deadletter
       :: true
       fi;
       if
       :: KEY_HELD -> ans = p_ans; p_replayed = 1   /* Idempotent-Replayed: no new effect */
       :: else ->
          p_effects++; p_ans = p_effects; ans = p_effects;
          assert(one_external_effect_per_job && p_effects <= 1)
       fi;
       if
       :: failures < MAXFAIL -> failures++; ans = 0; goto transient   /* answered too late */
       :: failures < MAXFAIL -> failures++; ans = 0; kind = K_HARD; check = 1; goto deadletter
          /* an answer its schema refuses (StepResultError): the provider acted, nothing is recorded */
       :: true
       fi;
       CRASHPOINT   /* fault point step:after-call: the provider answered, no checkpoint yet */
    :: else
    fi
  };
#ifndef W9
  atomic {
    if
    :: sres == S_CALL ->
       /* the checkpoint, in its own short transaction as soon as the call returns: insert if
          absent, then read the winner's result (a concurrent delivery may have written it first) */
       if
       :: s_cp == 0 -> s_cp = ans
       :: else
       fi;
       ans = s_cp;
       CRASHPOINT   /* fault point step:after-checkpoint */
    :: else
    fi;
    if
    :: sres != S_FENCED -> sres = 0
    :: else
    fi
  }
#else
  if
  :: sres != S_FENCED -> sres = 0
  :: else
  fi
#endif
}

/*
 * The provider's idempotency window passes, once, between deliveries: nothing ties it to the
 * source queue's retention (Stripe keeps a key for 24 hours, SQS a message for up to 14 days), so
 * a copy may still wait in the queue, or a dead letter for its replay. The provider forgets the
 * key; a step row started before it is older than the window. The model takes a step's row read
 * and its call as one step, so the window never passes between the two: the code's "older than
 * the window" must leave a margin of a call's timeout.
 */
proctype provider_window() {
  d_step {
    inflight == 0 ->
    p_ans = 0; p_forgot = 1;
    s_old = s_started
  }
}
