/*
 * jobfence's protocol, checked exhaustively by SPIN at small bounds (docs/reliability.md,
 * "The model"). Compile-time switches:
 *   -DSCENARIO=n   which world to build (below); every scenario must hold
 *   -DW1 … -DW10   a defect put back (a regression witness): must be caught
 * Run everything with `npm run model`.
 */
#ifndef SCENARIO
#define SCENARIO 1
#endif

/* ---- bounds of each scenario ------------------------------------------------------------- */
#if SCENARIO == 1
/* deliveries of a conflict: a copy of J and a different job sent under J's id, two workers,
   a crash, a lost COMMIT answer, transient and hard failures, the ledger */
#define MAXCRASH 1
#define MAXLAPSE 0
#define MAXLOST 1
#define MAXFAIL 2
#define MAXOPS 0
#define MAXLOSTSEND 0
#define NWORKERS 2
#elif SCENARIO == 2
/* replays: a failing job, its dead letter replayed (single or bulk), discarded, and failing again;
   a replay's send whose answer is lost, and the replay tried again */
#define MAXCRASH 1
#define MAXLAPSE 0
#define MAXLOST 0
#define MAXFAIL 2
#define MAXOPS 2
#define MAXLOSTSEND 1
#define NWORKERS 1
#elif SCENARIO == 3
/* the TTL: an applied job, a copy of it in the backstop, the TTL passing, the cleanup, the drain,
   replays */
#define MAXCRASH 1
#define MAXLAPSE 0
#define MAXLOST 1
#define MAXFAIL 1
#define MAXOPS 1
#define MAXLOSTSEND 0
#define NWORKERS 1
#elif SCENARIO == 4
/* the outbox: J's follow-up K for consumer B, the relay after COMMIT, the scheduled relay and its
   sweep, the TTL, the cleanup, a forger, replays */
#define MAXCRASH 1
#define MAXLAPSE 0
#define MAXLOST 0
#define MAXFAIL 0
#define MAXOPS 1
#define MAXLOSTSEND 0
#define NWORKERS 1
#define WITH_OUTBOX
#elif SCENARIO == 5
/* deliveries of duplicates: two copies of J (the producer sent it twice), two workers, a crash,
   a visibility lapse (two deliveries of one message at once), a lost COMMIT answer, a failure */
#define MAXCRASH 1
#define MAXLAPSE 1
#define MAXLOST 1
#define MAXFAIL 1
#define MAXOPS 0
#define MAXLOSTSEND 0
#define NWORKERS 2
#elif SCENARIO == 6
/* a step: J's external call before the fence, two workers, a visibility lapse (two deliveries of
   one message at once), a crash, the call's failures (refused, refused for good, or acting and
   then answered late or with an answer its schema refuses) and the work's, a dead letter replayed
   (singly), the provider's idempotency window passing */
#define MAXCRASH 1
#define MAXLAPSE 1
#define MAXLOST 0
#define MAXFAIL 1
#define MAXOPS 1
#define MAXLOSTSEND 0
#define NWORKERS 2
#define WITH_STEPS
#define ONLY_REPLAY   /* a bulk replay or a discard does to a step's job what a replay does */
#endif

/* the attempt ledger: transient failures allowed, interruptions allowed, SQS's maxReceiveCount */
#define MAXFAILS 2
#define MAXINTR 1
#define MAXRC 5   /* maxAttempts + maxInterruptions + 2 (defaultMaxReceiveCount) */

#include "state.pml"
#include "deadletter.pml"
#ifdef WITH_STEPS
#include "step.pml"
#endif
#include "delivery.pml"
#include "drain.pml"
#include "operator.pml"
#include "cleanup.pml"
#include "outbox.pml"

inline copy_of(c, job, body, where) {
  c_where[c] = where; c_job[c] = job; c_body[c] = body; sent_mask[job] = sent_mask[job] | BIT(body)
}

/* Reachability probes (-DPROBE=P_…): end states the runner expects to reach, so that a change
   which makes a path unreachable cannot pass for a model that holds. */
#define ANY_ROW(P) (P(0) || P(1) || P(2) || P(3) || P(4))
#define IS_KIND(i, k) (d_status[i] != D_NONE && d_kind[i] == (k))
#define IS_CONFLICT(i) IS_KIND(i, K_CONFLICT)
#define IS_HARD(i) (d_status[i] == PENDING && d_kind[i] == K_HARD)
#define IS_EXHAUSTED(i) IS_KIND(i, K_EXHAUSTED)
#define IS_INTERRUPTED(i) IS_KIND(i, K_INTERRUPTED)
#define IS_UNRECORDED(i) IS_KIND(i, K_UNRECORDED)
#define IS_OUTLIVED(i) IS_KIND(i, K_OUTLIVED)
#define IS_UNDELIVERED(i) IS_KIND(i, K_UNDELIVERED)
#define IS_REPLAYED(i) (d_status[i] == REPLAYED)
#define IS_SUPERSEDED(i) (d_status[i] == SUPERSEDED)
#define IS_DISCARDED(i) (d_status[i] == DISCARDED)
#define P_conflict ANY_ROW(IS_CONFLICT)
#define P_exhausted ANY_ROW(IS_EXHAUSTED)
#define P_interrupted ANY_ROW(IS_INTERRUPTED)
#define P_lost_commit_applied (lost > 0 && applied[J] == 1 && !ANY_ROW(IS_EXHAUSTED))
#define P_replayed_applied (ANY_ROW(IS_REPLAYED) && applied[J] == 1)
#define P_failed_again_after_replay (ANY_ROW(IS_REPLAYED) && applied[J] == 0)
#define P_discarded ANY_ROW(IS_DISCARDED)
#define P_bulk_replayed_applied (bulk_replayed && applied[J] == 1)
#define P_replay_retried_after_lost_answer (lost_sends > 0 && resent && ANY_ROW(IS_REPLAYED))
#define P_unrecorded_superseded_after_ttl (ttl_passed && f_fp[J] == 0 && ANY_ROW(IS_SUPERSEDED))
#define P_outlived_backstop_copy (ttl_passed && ANY_ROW(IS_OUTLIVED) && applied[J] == 1)
#define P_fence_deleted (ttl_passed && f_fp[J] == 0 && applied[J] == 1)
#define P_outlived_outbox_row (ANY_ROW(IS_OUTLIVED) && applied[K] == 1)
#ifdef WITH_STEPS
#define P_step_replayed_by_provider (p_replayed && applied[J] == 1)
#define P_step_result_reused_after_window (p_forgot && s_reused && ANY_ROW(IS_REPLAYED) && applied[J] == 1)
#define P_step_interrupted_unrecorded (p_effects == 1 && s_cp == 0 && ANY_ROW(IS_INTERRUPTED))
#define P_step_outcome_unknown \
  (p_forgot && s_cp == 0 && p_effects == 1 && ANY_ROW(IS_REPLAYED) && ANY_ROW(IS_HARD) && applied[J] == 0)
#endif
#define P_undelivered_replayed (ANY_ROW(IS_UNDELIVERED) && ANY_ROW(IS_REPLAYED) && applied[K] == 1)

/* Once nothing can move: every message ended applied, or with one pending dead letter, or discarded. */
hidden byte h_p;
hidden byte h_d;
hidden byte h_b;
proctype checker() {
  timeout ->
  d_step {
    for (h_i : 0 .. MAXC - 1) {
      assert(every_message_ends && (c_where[h_i] == UNUSED || c_where[h_i] == GONE))
    };
    for (h_i : 0 .. MAXO - 1) { assert(every_message_ends && !o_used[h_i]) };
    for (h_i : 0 .. NJ - 1) {
      for (h_b : 1 .. 2) {
        if
        :: sent_mask[h_i] & BIT(h_b) ->
           h_p = 0; h_d = 0;
           for (h_n : 0 .. MAXD - 1) {
             if
             :: d_job[h_n] == h_i && d_body[h_n] == h_b && d_status[h_n] == PENDING -> h_p++
             :: d_job[h_n] == h_i && d_body[h_n] == h_b && d_status[h_n] == DISCARDED -> h_d++
             :: else
             fi
           };
           assert(every_message_ends && h_p <= 1);
           assert(every_message_ends && ((applied_mask[h_i] & BIT(h_b)) || h_p == 1 || h_d > 0))
        :: else
        fi
      }
    };
    h_i = 0; h_b = 0; h_n = 0; h_p = 0; h_d = 0;
#ifdef WITH_STEPS
    /* a job applied implies exactly one effect of its step */
    assert(work_sees_the_effect && (applied[J] == 0 || p_effects == 1));
#endif
#ifdef PROBE
    /* a reachability probe (the runner's vacuity check): this end state must be reachable */
    assert(model_probe && !(PROBE))
#else
    skip
#endif
  }
}

init {
  atomic {
#if SCENARIO == 1
    copy_of(0, J, 1, SRC); copy_of(1, J, 2, SRC);
#elif SCENARIO == 5
    copy_of(0, J, 1, SRC); copy_of(1, J, 1, SRC);
#elif SCENARIO == 2
    copy_of(0, J, 1, SRC);
#elif SCENARIO == 3
    /* a copy redriven to the backstop while the database was unreachable, and one delivered */
    copy_of(0, J, 1, SRC); copy_of(1, J, 1, BACKSTOP);
    run ttl(); run cleanup();
#elif SCENARIO == 6
    copy_of(0, J, 1, SRC);
    run provider_window();
#elif SCENARIO == 4
    copy_of(0, J, 1, SRC);
    run sweep(); run ttl(); run cleanup(); run forger();
#endif
#if NWORKERS >= 1
    run worker();
#endif
#if NWORKERS >= 2
    run worker();
#endif
#if MAXOPS > 0
    run operator();
#endif
    run drain();
    run checker()
  }
}
