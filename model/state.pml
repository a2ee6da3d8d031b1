/*
 * The database, the queues and the bounds: every variable the protocol's steps share.
 * Mapped to the code in docs/reliability.md, "The model".
 */

/* ---- jobs and consumers ------------------------------------------------------------------- */
#define NJ 3            /* jobs */
#define J 0             /* consumer A's job: the one every scenario delivers */
#define K 1             /* consumer B's follow-up of J: its id is derived from J's (deriveJobId) */
#define F 2             /* a job id consumer B's queue never legitimately carries: only a forger names it */
/* J belongs to consumer A, K and F to consumer B: a dead letter's or fence's job names its consumer */
#define CONS_A 1
#define CONS_B 2
/* the follow-up pairs the deployment declares: A sends B the job K that deriveJobId gives J's */
#define DECLARED(s, j) ((s) == CONS_A && (j) == K)

/* Bodies: a job id carries body 1; body 2 is a different job sent under the same id (a conflict). */
#define BIT(b) (1 << (b))

/* ---- SQS copies (one slot per SQS message id) ----------------------------------------------- */
#define MAXC 5
#define UNUSED 0
#define SRC 1           /* visible in its consumer's source queue */
#define FLIGHT 2        /* received, invisible while its delivery runs */
#define BACKSTOP 3      /* redriven to the backstop queue */
#define BFLIGHT 4       /* received by the backstop drain */
#define GONE 5          /* deleted (acked) */
byte c_where[MAXC];
byte c_job[MAXC];
byte c_body[MAXC];
byte c_rc[MAXC];        /* ApproximateReceiveCount */
byte c_fails[MAXC];     /* attempt ledger: recorded failures of this message */
byte c_intr[MAXC];      /* attempt ledger: interruptions */
bit  c_marker[MAXC];    /* attempt ledger: a claim whose delivery has not reported back */
bit  c_old[MAXC];       /* older than its fence's lifetime (set when the TTL passes) */
byte inflight;          /* deliveries running on source copies */

/* ---- fences (core.processed_jobs), one per job ---------------------------------------------- */
byte f_fp[NJ];          /* 0: no fence; else the fingerprint (body) of the job applied */
byte f_tx[NJ];          /* the delivery (_pid) whose open transaction inserted the uncommitted fence */
bit  f_exp[NJ];         /* expired: the TTL has passed since it was written */
bit  f_clean[NJ];       /* the TTL cleanup holds it FOR UPDATE */
byte applied[NJ];       /* effects committed for the job */
byte applied_mask[NJ];  /* bodies whose effect committed */
byte sent_mask[NJ];     /* bodies some legitimate sender put in a queue or the outbox */

/* ---- dead letters (core.dead_letters) ------------------------------------------------------- */
#define MAXD 5
#define D_NONE 0
#define PENDING 1
#define REPLAYED 2
#define DISCARDED 3
#define SUPERSEDED 4
#define K_HARD 1
#define K_CONFLICT 2
#define K_EXHAUSTED 3
#define K_INTERRUPTED 4
#define K_UNRECORDED 5
#define K_OUTLIVED 6
#define K_UNDELIVERED 7
byte d_status[MAXD];
byte d_job[MAXD];
byte d_body[MAXD];
byte d_kind[MAXD];
byte d_sender[MAXD];    /* undelivered rows: the consumer whose outbox row it was */
bit  d_lock[MAXD];      /* held FOR UPDATE by a replay, a bulk chunk or a discard */

/* ---- the outbox (core.outbox) --------------------------------------------------------------- */
#define MAXO 2
bit  o_used[MAXO];
byte o_job[MAXO];
byte o_body[MAXO];
byte o_sender[MAXO];
bit  o_lock[MAXO];      /* held FOR UPDATE SKIP LOCKED by the scheduled relay */
bit  o_late[MAXO];      /* past its deadline: the target's fence may have expired */

/* ---- J's step (core.job_steps) and the provider's record of its key (model/step.pml) -------- */
#ifdef WITH_STEPS
byte s_cp;              /* the checkpointed result: 0 none, else the provider's answer */
bit  s_started;         /* the step's row records a call as started (before the call) */
bit  s_old;             /* that row is older than the provider's window */
bit  s_reused;          /* a delivery took the checkpoint's result without calling (for a probe) */
byte p_effects;         /* effects the provider performed for J's step (charges, e-mails sent) */
byte p_ans;             /* the provider's record of the step's key: 0 none, else the first answer */
bit  p_replayed;        /* the provider answered a repeat of the key from its record (for a probe) */
bit  p_forgot;          /* the provider's window has passed (for a probe) */
#else
#define STEP_RESET skip
#endif

/* ---- time and faults ------------------------------------------------------------------------ */
bit  ttl_passed;
byte crashes;           /* crashes so far (every step of every process may crash while budget lasts) */
byte lapses;            /* visibility lapses: a copy visible again while its delivery still runs */
byte lost;              /* COMMITs whose answer was lost */
byte failures;          /* failed runs of the work (transient or hard) */
bit  bulk_replayed;      /* a bulk chunk committed a replayed row (for a probe) */
byte lost_sends;        /* replay sends SQS took whose answer was lost */
byte r_sent;            /* dead letters (a bit per row) a replay attempt has sent, all within SQS's
                           five-minute deduplication window (the model's replays are that close) */
bit  resent;            /* a replay attempt sent a row an earlier attempt had sent (for a probe) */

/* ---- invariants: each assert names its invariant, so pan's report says which one broke ----- */
hidden byte one_effect_per_job = 1;
hidden byte every_message_ends = 1;
hidden byte no_consumer_acts_for_another = 1;
hidden byte one_external_effect_per_job = 1;
hidden byte work_sees_the_effect = 1;
hidden byte model_bound = 1;     /* a bound of the model itself, not the protocol: never a witness */
hidden byte model_probe = 1;     /* a reachability probe: the runner expects it reached */

/* scratch for d_steps (never live across steps, so outside the state vector) */
hidden byte h_i;
hidden byte h_n;

/* ---- nondeterministic choice of a slot ------------------------------------------------------ */
#define PICK5(v, COND) \
  if \
  :: COND(0) -> v = 0 \
  :: COND(1) -> v = 1 \
  :: COND(2) -> v = 2 \
  :: COND(3) -> v = 3 \
  :: COND(4) -> v = 4 \
  fi
#define PICK2(v, COND) \
  if \
  :: COND(0) -> v = 0 \
  :: COND(1) -> v = 1 \
  fi

#define IS_SRC(c) (c_where[c] == SRC)
#define IS_BACKSTOP(c) (c_where[c] == BACKSTOP)
#define REPLAYABLE(i) (d_status[i] == PENDING && !d_lock[i])
#define ANY_REPLAYABLE (REPLAYABLE(0) || REPLAYABLE(1) || REPLAYABLE(2) || REPLAYABLE(3) || REPLAYABLE(4))

/* a pending dead letter names job j (what the cleanup looks for) */
#define PEND(i, j) (d_status[i] == PENDING && d_job[i] == (j))
#define PENDING_NAMES(j) (PEND(0, j) || PEND(1, j) || PEND(2, j) || PEND(3, j) || PEND(4, j))

/* A crash of the running process, while the budget lasts: what it held rolls back at `crashed`. */
#define CRASHPOINT \
  if \
  :: crashes < MAXCRASH -> crashes++; goto crashed \
  :: true \
  fi

/* A new SQS message (a replay's or a relay's send) in job j's source queue. */
inline new_copy(job, body) {
  h_i = 0;
  do
  :: h_i < MAXC && c_where[h_i] != UNUSED -> h_i++
  :: h_i < MAXC && c_where[h_i] == UNUSED -> break
  :: h_i >= MAXC -> assert(model_bound && false)
  od;
  c_where[h_i] = SRC; c_job[h_i] = job; c_body[h_i] = body;
  h_i = 0
}

/* A new dead-letter row; the caller has checked that no pending row has its key. */
inline new_row(job, body, kind, sender) {
  h_n = 0;
  do
  :: h_n < MAXD && d_status[h_n] != D_NONE -> h_n++
  :: h_n < MAXD && d_status[h_n] == D_NONE -> break
  :: h_n >= MAXD -> assert(model_bound && false)
  od;
  d_status[h_n] = PENDING; d_job[h_n] = job; d_body[h_n] = body; d_kind[h_n] = kind;
  d_sender[h_n] = sender;
  h_n = 0
}

/* The key of the unique partial index on pending dead letters: (consumer, job_id, body fingerprint). */
#ifdef W1
/* W1, the folded second failure: one pending row per (consumer, job_id), whatever the body. */
#define SAME_KEY(i, job, body) (d_job[i] == (job))
#else
#define SAME_KEY(i, job, body) (d_job[i] == (job) && d_body[i] == (body))
#endif
