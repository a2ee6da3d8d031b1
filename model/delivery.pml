/*
 * One SQS record through the harness: shared/record/protocol.ts (RecordProtocol: parse, fence,
 * work, commit, relay, #deadLetter) with shared/fence/fence-transaction.ts (FenceTransaction) and
 * the attempt ledger of shared/db/queries/message-attempts.ts. A worker is one Lambda's record
 * loop: it takes any visible copy, of any job, of either consumer.
 */
#define OPEN 1
#define DUP 2
#define CONFL 3

proctype worker() {
  byte c, j, b, st, kind, res, k, tries;
  bit check;
#ifdef WITH_STEPS
  byte ans, sres;   /* the step's result, and what its row said (model/step.pml) */
#endif
end_idle:
  do
  :: atomic {
       PICK5(c, IS_SRC);
       c_where[c] = FLIGHT; c_rc[c]++; inflight++; j = c_job[c]; b = c_body[c];
       /* a visibility lapse: the copy is visible again while this delivery still runs */
       if
       :: lapses < MAXLAPSE -> lapses++; c_where[c] = SRC
       :: true
       fi
     };
     CRASHPOINT;
     /* step 2a: a redelivery claims its delivery in the ledger (RecordProtocol.#claim, claimDelivery) */
     if
     :: c_rc[c] > 1 ->
        d_step {
          if
          :: c_marker[c] -> c_intr[c]++
          :: else
          fi;
          c_marker[c] = 1
        };
        CRASHPOINT
     :: else
     fi;
#ifdef WITH_STEPS
     /* step 2s: a spent message refused, then J's step, before the fence transaction
        (RecordSpine.steps; model/step.pml) */
     job_step();
#endif
     /* step 2b: BEGIN + the fence insert ON CONFLICT (FenceTransaction.open); a lock wait behind
        another delivery's uncommitted fence, or behind the cleanup holding it */
     d_step {
       !f_clean[j] && f_tx[j] == 0 ->
       if
       :: f_fp[j] == 0 -> f_tx[j] = _pid; st = OPEN
       :: f_fp[j] != 0 && f_fp[j] == b -> st = DUP
       :: f_fp[j] != 0 && f_fp[j] != b -> st = CONFL
       fi
     };
     if
     :: st == DUP -> goto ack
     :: st == CONFL -> kind = K_CONFLICT; check = 0; goto deadletter
     :: else
     fi;
#ifdef WITH_STEPS
     /* the steps found the fence and ran nothing, and it is gone: tried again (StepsFenceGoneError) */
     if
     :: sres == S_FENCED -> f_tx[j] = 0; goto transient
     :: else
     fi;
#endif
     /* RecordProtocol.#refuseSpent, holding the fence lock */
     if
     :: c_intr[c] >= MAXINTR -> f_tx[j] = 0; kind = K_INTERRUPTED; check = 1; goto deadletter
     :: c_intr[c] < MAXINTR && c_fails[c] >= MAXFAILS -> f_tx[j] = 0; kind = K_EXHAUSTED; check = 1; goto deadletter
     :: else
     fi;
     CRASHPOINT;
     /* step 3: the work, on the fence's transaction */
     if
     :: failures < MAXFAIL -> failures++; f_tx[j] = 0; goto transient   /* ROLLBACK */
     :: failures < MAXFAIL -> failures++; f_tx[j] = 0; kind = K_HARD; check = 1; goto deadletter
     :: true
     fi;
     /* step 4: COMMIT: the fence, the effect and the work's outbox rows, together */
     d_step {
       f_fp[j] = b; f_tx[j] = 0; f_exp[j] = 0;
       applied[j]++; applied_mask[j] = applied_mask[j] | BIT(b);
       assert(one_effect_per_job && applied[j] <= 1);
       assert(no_consumer_acts_for_another && j != F);
#ifdef WITH_STEPS
       if
       :: j == J ->
#ifdef W9
          /* W9, the result not checkpointed before the fence: the step's row is written here */
          if
          :: s_cp == 0 -> s_cp = ans
          :: else
          fi;
#endif
          /* the work receives the step's result: the checkpoint's, the answer of the one effect */
          assert(work_sees_the_effect && ans == FIRST_ANSWER && s_cp == ans)
       :: else
       fi;
#endif
#ifdef WITH_OUTBOX
       if
       :: j == J -> o_used[0] = 1; o_job[0] = K; o_body[0] = 1; o_sender[0] = CONS_A;
                    sent_mask[K] = sent_mask[K] | BIT(1)
       :: else
       fi
#endif
     };
     /* a lost COMMIT answer: the server committed, the client saw an error */
     if
     :: lost < MAXLOST -> lost++;
        if
        :: goto transient
        :: kind = K_HARD; check = 1; goto deadletter
        fi
     :: true
     fi;
#ifdef WITH_OUTBOX
     /* the relay after COMMIT (relayAfterCommit): send from memory, then delete what went */
     if
     :: j == J ->
        CRASHPOINT;
        if
        :: d_step { new_copy(K, 1) };
           CRASHPOINT;
           d_step { !o_lock[0] -> o_used[0] = 0; o_job[0] = 0; o_body[0] = 0; o_sender[0] = 0; o_late[0] = 0 }
        :: true   /* the send failed: the row waits for the scheduled relay */
        fi
     :: else
     fi;
#endif
     CRASHPOINT;
     goto ack;
transient:
skip;     /* step 5: a transient failure is counted in its own statement (recordAttempt) */
     CRASHPOINT;
     d_step { c_fails[c]++; c_marker[c] = 0 };
     if
     :: c_fails[c] >= MAXFAILS -> kind = K_EXHAUSTED; check = 1; goto deadletter
     :: else -> goto requeue
     fi;
deadletter:
skip;     /* step 5: the dead letter, in its own transaction after the work rolled back */
     CRASHPOINT;
     dl_write(j, b, check, 0, 0);
     if
     :: res == R_FAILED -> goto requeue
     :: else
     fi;
     CRASHPOINT;
ack:
skip;     skip;
     d_step {
       if
       :: c_where[c] == FLIGHT || c_where[c] == SRC -> c_where[c] = GONE
       :: else
       fi;
       inflight--; c = 0; j = 0; b = 0; st = 0; kind = 0; res = 0; check = 0; STEP_RESET
     };
     goto end_idle;
crashed:
     /* the connection is gone: the server rolls back the open transaction */
     skip;
     d_step {
       if
       :: f_tx[j] == _pid -> f_tx[j] = 0
       :: else
       fi
     };
requeue:
skip;     /* back in the queue after its visibility timeout; past maxReceiveCount, to the backstop */
     d_step {
       if
       :: c_where[c] == FLIGHT -> c_where[c] = (c_rc[c] >= MAXRC -> BACKSTOP : SRC)
       :: else
       fi;
       inflight--; c = 0; j = 0; b = 0; st = 0; kind = 0; res = 0; check = 0; STEP_RESET
     }
  od
}
