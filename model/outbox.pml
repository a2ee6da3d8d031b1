/*
 * The scheduled relay and the sweep to `undelivered`: shared/outbox/sweep.ts (sweepOutbox) through
 * shared/db/queries/outbox-rows.ts (claimDueFollowUps, deleteSentFollowUps, moveToUndelivered).
 * The relay after COMMIT is in delivery.pml. Consumer A's outbox only: A declares B as its one
 * follow-up target, and K is the job id deriveJobId gives J's follow-up.
 */
#define SWEEPABLE(r) (o_used[r] && !o_lock[r])

#ifdef W5_RELAY
/* W5, copies outliving the fence: the relay sends a row whatever its age */
#define PAST_DEADLINE(r) false
#else
#define PAST_DEADLINE(r) o_late[r]
#endif

/* kind := 0 to send the row, else the dead letter it becomes */
#define SWEEP_DECIDE \
  if \
  :: PAST_DEADLINE(r) -> kind = K_UNDELIVERED   /* past its deadline (send_by): never sent */ \
  :: !PAST_DEADLINE(r) && !DECLARED(snd, j) -> kind = K_UNDELIVERED   /* no queue for that target */ \
  :: !PAST_DEADLINE(r) && DECLARED(snd, j) -> kind = 0 \
  fi

proctype sweep() {
  byte r, kind, res, k, tries, j, b, snd;
end_idle:
  do
  :: atomic { PICK2(r, SWEEPABLE); o_lock[r] = 1; j = o_job[r]; b = o_body[r]; snd = o_sender[r] };
     CRASHPOINT;
     /* the deadline is checked as the row is sent: the validated margin covers a round */
     if
     :: d_step { SWEEP_DECIDE; if :: kind == 0 -> new_copy(j, b) :: else fi }
     :: d_step { SWEEP_DECIDE; if :: kind == 0 -> kind = K_UNDELIVERED :: else fi }  /* SQS refused it, or its attempts ran out */
     fi;
     CRASHPOINT;
     if
     :: kind != 0 -> dl_write(j, b, 0, o_late[r], snd)
     :: else
     fi;
     d_step {
       o_used[r] = 0; o_job[r] = 0; o_body[r] = 0; o_sender[r] = 0; o_late[r] = 0; o_lock[r] = 0;
       r = 0; kind = 0; res = 0; j = 0; b = 0; snd = 0
     };
     goto end_idle;
crashed:
     skip;
     d_step { o_lock[r] = 0; r = 0; kind = 0; res = 0; j = 0; b = 0; snd = 0 }
  od
}

#ifdef W6
/* W6, the forged undelivered row: the database takes any target and any job id */
#define OUTBOX_ACCEPTS(s, j) true
#else
/* the row policy and core.outbox's check: declared targets, derived job ids only */
#define OUTBOX_ACCEPTS(s, j) DECLARED(s, j)
#endif

/* Consumer A's login inserts an outbox row for a job id of B's that no parent derives. */
proctype forger() {
  d_step {
    if
    :: OUTBOX_ACCEPTS(CONS_A, F) -> o_used[1] = 1; o_job[1] = F; o_body[1] = 1; o_sender[1] = CONS_A
    :: else   /* refused by the database */
    fi
  }
}
