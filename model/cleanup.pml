/*
 * Time and the TTL cleanup: shared/fence/cleanup.ts (runFenceCleanup) through
 * core.delete_expired_fences (migrations 0005, 0010, 0013).
 */

#define ANY_SRC (IS_SRC(0) || IS_SRC(1) || IS_SRC(2) || IS_SRC(3) || IS_SRC(4))

/*
 * The fence TTL passes, once. The TTL is validated to exceed the source queue's retention plus a
 * delivery, and an outbox row's deadline plus a relay round, so by then no copy waits in a source
 * queue, no delivery of one runs and no relay round is under way; what can still wait is a backstop
 * copy and an outbox row, which become older than their fence's lifetime.
 */
proctype ttl() {
  d_step {
    inflight == 0 && !ANY_SRC && !o_lock[0] && !o_lock[1] ->
    ttl_passed = 1;
    for (h_i : 0 .. NJ - 1) {
      if
      :: f_fp[h_i] != 0 -> f_exp[h_i] = 1
      :: else
      fi
    };
    for (h_i : 0 .. MAXC - 1) {
      if
      :: c_where[h_i] == BACKSTOP || c_where[h_i] == BFLIGHT -> c_old[h_i] = 1
      :: else
      fi
    };
    for (h_i : 0 .. MAXO - 1) {
      if
      :: o_used[h_i] -> o_late[h_i] = 1
      :: else
      fi
    };
    h_i = 0
  }
}

#ifdef W2
/* W2, replay after the TTL: the cleanup deletes every expired fence (before migration 0010) */
#define CLEANABLE(j) (f_fp[j] != 0 && f_exp[j] && !f_clean[j])
#else
#define CLEANABLE(j) (f_fp[j] != 0 && f_exp[j] && !f_clean[j] && !PENDING_NAMES(j))
#endif

proctype cleanup() {
  byte j;
end_idle:
  do
  :: /* 1. lock the candidates FOR UPDATE SKIP LOCKED: expired, no pending dead letter names the job */
     atomic {
       if
       :: CLEANABLE(0) -> j = 0
       :: CLEANABLE(1) -> j = 1
       :: CLEANABLE(2) -> j = 2
       fi;
       f_clean[j] = 1
     };
     CRASHPOINT;
     /* 2. delete them, re-checked in a later snapshot: a dead letter committed since keeps its fence */
     d_step {
#if defined(W2) || defined(W3)
       f_fp[j] = 0;
#else
       if
       :: !PENDING_NAMES(j) -> f_fp[j] = 0
       :: else
       fi;
#endif
       if
       :: f_fp[j] == 0 -> f_exp[j] = 0
       :: else
       fi;
       f_clean[j] = 0; j = 0
     };
     goto end_idle;
crashed:
     /* the cleanup's transaction rolls back: its locks go, nothing is deleted */
     skip;
     d_step { f_clean[j] = 0; j = 0 }
  od
}
