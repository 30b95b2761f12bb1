/*
 * tenure's protocol, model-checked (invariant 18; issue 41).
 *
 * Leases, fencing tokens, the receiver's FenceGuard, runs that wait, replication, and a
 * database that may lose any suffix of its recent commits, as the code implements them.
 * model/README.md maps every process, variable and action to the code (file and SQL block)
 * and every assertion to the invariant of the same name in the docs; model/check runs the
 * configurations and says what spin found.
 *
 * One database statement (or one transaction: SQLite's BEGIN IMMEDIATE, a PostgreSQL row
 * lock held to commit) is one atomic step. Lease times are abstract: a lease is NOLEASE
 * (NULL), LIVE (it ends after the database's now) or PAST, and the database clock may end any
 * lease at any moment. Tokens are microseconds of that clock: `clk` is the one clock every
 * server reads (the assumption of invariant 16), and a token write takes at least one tick.
 */

/* ------------------------------------------------------------------ configuration ----- */
/* A configuration is a list of switches and budgets in the environment variable
   TENURE_MODEL (e.g. "SYNC_STANDBY,NO_GUARD_FAIL,EXPIRES=2"), read once by init: one compiled
   verifier serves every configuration. A switch removes one guard (NO_...), picks the
   replication mode (SYNC_STANDBY; async otherwise), breaks the clock assumption (CLOCK_BEHIND),
   models a proposed fix (FIX_..., STABLE_IDS) or turns a check on (CHECK_...). */
hidden byte SYNC_STANDBY, CLOCK_BEHIND, FIX_CHILDREN, STABLE_IDS;
hidden byte CHECK_WRITES, CHECK_TOKENS, CHECK_EFFECTS, CHECK_CHILDREN;
hidden byte NO_STATE_CHECK, NO_OWNER_CHECK, NO_TOKEN_CHECK, NO_LEASE_CHECK;
hidden byte NO_GUARD_COMPLETE, NO_GUARD_EXTEND, NO_GUARD_RECORD, NO_GUARD_FAIL;
hidden byte NO_GUARD_RELEASE, NO_GUARD_WAIT, NO_WAIT_LOCK;
hidden byte NO_TOKEN_FLOOR, NO_RECEIVER_FLOOR, NO_BELOW_CHECK, NO_BINDING, VOLATILE_GUARD;
hidden byte NO_COMMIT_CONFIRM, NO_SIGNAL_ONCE;
hidden byte MAXATT;  /* the job class's max_attempts */
hidden byte NW;      /* workers: W0, W1, and W2, a restart of W1 that reuses its name */
hidden byte GAP;     /* CLOCK_BEHIND: the ticks a lease's end takes (the clock moves on) */
hidden byte LAG;     /* async: the most recent commits the standby may lack */
/* Budgets: how many of each event one run may contain (state: they count down). */
byte expires;        /* leases the clock ends while their holder still runs (a pause) */
byte exits;          /* workers that crash or stop (the last worker never does) */
byte losses;         /* failovers or restores */
byte cancels;        /* the operator's cancels, of the parent (with its child) or the child */
byte requeues;       /* the operator's requeues of the parent (and its cancelled child) */
byte errors;         /* handler errors (retryable) */
byte rcrashes;       /* receiver crashes */
byte waitcancels;    /* SYNC_STANDBY: commits whose wait for the standby is cancelled */

#define W 3             /* worker slots */
#define NONE 7
#define P 0             /* the parent job */
#define C 1             /* its child */

/* The handlers: each stage is a position of the job's cursor (`step`). */
#define P_APPROVAL 0    /* parent: ctx.wait_for("approval") */
#define P_SPAWN    1    /*         ctx.spawn(child) */
#define P_CHILD    2    /*         ctx.wait_job(child) */
#define P_EFFECT   3    /*         ctx.effect("a"), at receiver R0 */
#define P_END      4    /*         return: the result goes to the committer */
#define C_END      2    /* child:  ctx.effect("x"), ctx.effect("y") at receiver R1; return */

#define FOR(stage) ((stage) + 1)   /* a wait document: the stage that waits */

/* tenure.types.JobState, and ABSENT: the child's row does not exist (yet, or any more) */
#define ABSENT    0
#define QUEUED    1
#define RUNNING   2
#define WAITING   3
#define SUCCEEDED 4
#define FAILED    5
#define CANCELLED 6
#define TERMINAL(s) ((s) >= SUCCEEDED)
#define ACTIVE(s) ((s) >= QUEUED && (s) <= WAITING)

/* lease_until, compared with the database's now */
#define NOLEASE 0
#define LIVE    1
#define PAST    2

/* owner_id: a worker's name; the restarted W2 reuses W1's */
#define NAME(w) ((w) == 0 -> 1 : 2)

/* --------------------------------------------------------------------- the ledger ----- */
typedef Row {
  byte st;      /* state */
  byte own;     /* owner_id (0: NULL) */
  byte tok;     /* fencing_token */
  byte lease;   /* lease_until vs now */
  byte att;     /* attempt */
  byte step;    /* the cursor: the next stage */
  byte wfor;    /* wait: what the suspended handler waits for (FOR(its stage); 0: nothing) */
  bit  woke;    /* waiting, and run_after has come (a signal, the child's end, a timeout) */
  byte gen;     /* the child's id: which insert of it this row is (1, 2) */
  byte fl;      /* ghost: the highest a receiver's refusal floored the token at */
  byte cid;     /* ghost: the claim (its identity) that took the row last */
}
Row db[2];      /* the primary's tenure_jobs rows: db[P], db[C] */
byte sig;       /* tenure_signals (P, "approval"): 0 none, else its payload (1 or 2) */
Row sb[2];      /* the standby's copy (async: also "the last backup") */
byte sbsig;
byte sbclk;     /* the clock when the standby's copy was taken */
byte lag;       /* async: commits since the standby's copy was taken */
byte clk;       /* the database clock, in token ticks: one clock for every server */

/* ------------------------------------------------------------------ the receivers ----- */
/* FenceGuard state per scope (the job id): the parent's at receiver R0; the child's at R1,
   under the id of its first insert (scope 1) or of a second one after a lost history (2). */
byte high[3];   /* tenure_fence_scopes.highest */
byte holder[3]; /* tenure_fence_scopes.holder: the claim bound to `highest` (0: none) */
bit  done[5];   /* tenure_fence_keys, done: the parent's a; the child's x and y per id */
#define KEY(s, e) ((s) == 0 -> 0 : (s) * 2 - 1 + (e))
#define EFFECT(s, e) ((s) == 0 -> 0 : 1 + (e))   /* the effect, whatever the child's id */
#define RUN      0
#define REPLAY   1
#define STALE    2
#define CONFLICT 3

/* -------------------------------------------------------------------- the workers ----- */
byte wj[W];     /* the job a worker's handler runs (NONE: idle) */
byte wtk[W];    /* its claim's token (Lease.token) */
byte wcd[W];    /* its claim's identity (Lease.claim) */
byte wpc[W];    /* the stage its handler is at */
byte wph[W];    /* where in that stage (below) */
byte wgen[W];   /* the child's id it holds */
byte wfl[W];    /* the highest a refusal named */
byte pcd[W*2];  /* the committer's pending results, per worker and job: the claim ... */
byte ptk[W*2];  /* ... and its token (0: none) */
byte ncl;       /* claims so far: a claim's identity is its number */
byte ngen;      /* inserts of the child so far */
#define PH_START   0   /* the stage begins: the effect is sent, the child inserted, a wait */
#define PH_DONE    1   /* stage_done: the result recorded, the cursor moved on */
#define PH_REFUSED 2   /* a receiver refused: fail, the token floored at its highest */
#define PH_GIVEUP  3   /* fail for good (the child failed, the wait timed out) */
#define PH_CASCADE 4   /* failed for good: now cancel the unfinished children */

bit  sent[2];   /* the two approvals sent (a double click, or a webhook's retry) */
bit  tmo;       /* the approval wait's timeout has passed */

/* ---------------------------------------------------- ghosts: what the properties see ----- */
byte maxtok[2];   /* the highest token handed out per job, in any history */
byte acchi[3];    /* per scope: the highest fence a receiver accepted (ran or replayed) ... */
byte acccd[3];    /* ... and the claim that sent it */
bit  ran[3];      /* the effects a, x, y have run */
bit  npub[2];     /* SYNC_STANDBY: an acknowledged result was published */
byte canctok[2];  /* SYNC_STANDBY: the token the job's last acknowledged cancel set */
hidden byte cpend[2];
byte acksig;      /* SYNC_STANDBY: the payload of the first acknowledged approval */
bit  unrep;       /* SYNC_STANDBY: an acknowledged commit the standby lacks */
/* Each assertion names the invariant it checks (pan prints the expression). */
hidden byte tokens_unique = 1, conditional_writes = 1, terminal_final = 1, one_result = 1;
hidden byte cancelled_silent = 1, receiver_monotonic = 1, receiver_one_holder = 1;
hidden byte effect_once = 1, unstuck = 1, sync_no_loss = 1, approval_once = 1;
hidden byte children_first = 1;

/* -------------------------------------------------------------------- narration ----- */
/* A counterexample's story: pan prints these when it replays a trail (model/check --trail),
   never while it searches. */
#define JOB(j) ((j) == P -> 80 : 67)   /* 'P', 'C' */
#define RECEIVER(s) ((s) == 0 -> 0 : 1)   /* R0 serves the parent's scope, R1 the child's */

/* --------------------------------------------------------------- guard predicates ----- */
/* The actions the SQL's lease-guarded blocks name, as `-- guard: lease (model: NAME)`, one per
   line below (tests/integration/test_model.py reads them; model/check refutes each without
   its guard):
   action complete: the committer's batched complete (complete_one, in publish)
   action extend: the lease keeper's renewal (the Worker's extend_many step)
   action record: a write that records progress under the lease (record)
   action fail: a run's failure, its token floored at a refusal's highest (fail_run)
   action release: a graceful stop gives the lease back (the Worker's stop step)
   action wait: a wait settled, or suspended, under the job's row lock (wait_on) */
/* The fence predicate of every `-- guard: lease` block (invariant 4), part by part. */
#define IS_RUNNING(j) (NO_STATE_CHECK || db[j].st == RUNNING)
#define IS_OWNER(j, w) (NO_OWNER_CHECK || db[j].own == NAME(w))
#define IS_TOKEN(j, t) (NO_TOKEN_CHECK || db[j].tok == (t))
#define IS_LIVE(j) (NO_LEASE_CHECK || db[j].lease == LIVE)
#define LEASED(j, w, t) (IS_RUNNING(j) && IS_OWNER(j, w) && IS_TOKEN(j, t) && IS_LIVE(j))
/* Each action's guard; NO_GUARD_<ACTION> leaves only `WHERE id = :job_id`. */
#define GUARD(off, j, w, t) (EXISTS(j) && (off || LEASED(j, w, t)))

/* Invariant 4 on the ghost claim identity: a lease write lands only for the claim that holds
   the running job (the predicate is how the SQL says it). */
#define LANDS(j, c) assert(!CHECK_WRITES || conditional_writes && db[j].st == RUNNING && \
  db[j].cid == (c))
#define TREE assert(!CHECK_CHILDREN || children_first && \
  !(TERMINAL(db[P].st) && ACTIVE(db[C].st)))

/* -------------------------------------------------------------------- replication ----- */
/* The whole table at once (the rows are plain bytes of pan's state vector). */
inline to_standby() {
  c_code { memcpy(now.sb, now.db, sizeof(now.db)); now.sbsig = now.sig; now.sbclk = now.clk; }
}
inline from_standby() { c_code { memcpy(now.db, now.sb, sizeof(now.db)); now.sig = now.sbsig; } }
inline forget_standby() {   /* nothing more can be lost: one standby value, fewer states */
  c_code { memset(now.sb, 0, sizeof(now.sb)); now.sbsig = 0; now.sbclk = 0; }
}
/* A commit. SYNC_STANDBY: acknowledged once the standby has it (the WAL is one stream: the
   standby gets every earlier commit with it). Async: the standby lags at most LAG commits. */
inline commit() {
  TREE;
  if
  :: SYNC_STANDBY -> to_standby(); unrep = 0
  :: !SYNC_STANDBY && losses > 0 -> lag++;
     if :: lag > LAG -> to_standby(); lag = 0 :: else fi
  :: else
  fi
}
/* The commit of what is acknowledged to someone (a result, a cancel, a signal, a submit).
   SYNC_STANDBY: its wait for the standby may be cancelled (the standby lacks it); tenure then
   says CommitUnconfirmed (`acked` = 0), unless NO_COMMIT_CONFIRM. */
hidden byte on_standby;
inline ack(acked) {
  if
  :: !SYNC_STANDBY -> acked = 1
  :: SYNC_STANDBY -> acked = 1; on_standby = 1
  :: SYNC_STANDBY && waitcancels > 0 -> waitcancels--; on_standby = 0;
     printf("~ DB: the commit's wait for the standby is cancelled\n");
     if
     :: NO_COMMIT_CONFIRM -> acked = 1; unrep = 1; printf("~ DB: acknowledged all the same\n")
     :: else -> acked = 0; printf("~ DB: CommitUnconfirmed, not acknowledged\n")
     fi
  fi
}
inline replicate() {   /* after ack(): the commit, on the standby or not */
  if
  :: SYNC_STANDBY && on_standby -> TREE; to_standby(); unrep = 0
  :: SYNC_STANDBY && !on_standby -> TREE
  :: else -> commit()
  fi
}
inline commit_fact(acked) { ack(acked); replicate() }

/* ------------------------------------------------------------------------- tokens ----- */
/* A claim or a cancel: GREATEST(token + 1, clock_us + 1) (migration 0013); the clock ticks
   (a write takes at least a microsecond). */
inline new_token(j, t) {
  if
  :: NO_TOKEN_FLOOR -> t = db[j].tok + 1
  :: else -> t = (db[j].tok + 1 > clk + 1 -> db[j].tok + 1 : clk + 1)
  fi;
  clk++
}
inline handed_out(j, t) {   /* invariant 16, on the ghost of every token handed out */
  assert(!CHECK_TOKENS || tokens_unique && t > maxtok[j]);
  maxtok[j] = (t > maxtok[j] -> t : maxtok[j])
}

#define WAKE_PARENT \
  if :: db[P].st == WAITING && db[P].wfor == FOR(P_CHILD) -> db[P].woke = 1 :: else fi

/* cancel (leases.sql cancel__lock, cancel): the job and its unfinished descendants, each
   token bumped, in one transaction */
inline cancel_one(j, t) {
  new_token(j, t);
  db[j].st = CANCELLED; db[j].tok = t; db[j].lease = NOLEASE;
  cpend[j] = t;
  printf("~ DB: %c cancelled, token %d\n", JOB(j), t);
  handed_out(j, t)
}
inline cancel_children(t) {
  if :: ACTIVE(db[C].st) -> cancel_one(C, t) :: else fi
}
inline cancel_acked(acked) {   /* the ghost remembers an acknowledged cancel's token */
  if :: acked && cpend[P] -> canctok[P] = cpend[P] :: else fi;
  if :: acked && cpend[C] -> canctok[C] = cpend[C] :: else fi;
  cpend[P] = 0; cpend[C] = 0
}

/* fail (leases.sql fail): queued again while attempts are left, else failed; the token
   floored at what a receiver named (GREATEST(token, token_floor)) */
inline fail_write(j, floor, retry, t) {
  if :: !NO_RECEIVER_FLOOR && floor > db[j].tok -> db[j].tok = floor :: else fi;
  if :: floor > db[j].fl -> db[j].fl = floor :: else fi;
  db[j].lease = NOLEASE;
  if
  :: retry && db[j].att < MAXATT -> db[j].st = QUEUED; db[j].own = 0
  :: else -> db[j].st = FAILED;
     if :: j == C -> WAKE_PARENT :: else fi;
     if :: FIX_CHILDREN && j == P -> cancel_children(t) :: else fi
  fi
}

/* -------------------------------------------------------------------- the receiver ----- */
/* FenceGuard._decide (src/tenure/fence/guard.py): one transaction per command. */
inline raise_highest(s, f, c) {
  if
  :: f > high[s] -> high[s] = f; holder[s] = c
  :: f == high[s] && holder[s] == 0 -> holder[s] = c
  :: else
  fi
}
inline apply(s, e, f, c, res) {
  if
  :: done[KEY(s, e)] -> res = REPLAY;   /* the stored result: accepted, not run again */
     if :: f > acchi[s] -> acchi[s] = f; acccd[s] = c :: else fi;
     raise_highest(s, f, c)
  :: else ->
     if
     :: !NO_BELOW_CHECK && f < high[s] -> res = STALE
     :: !NO_BINDING && f == high[s] && holder[s] != 0 && holder[s] != c -> res = CONFLICT
     :: else ->
        res = RUN;
        /* invariant 17 (and 9), on ghosts that no configuration touches */
        assert(receiver_monotonic && f >= acchi[s]);
        assert(receiver_one_holder && (f > acchi[s] || acccd[s] == c));
        assert(!CHECK_EFFECTS || effect_once && !ran[EFFECT(s, e)]);
        acchi[s] = f; acccd[s] = c; ran[EFFECT(s, e)] = 1;
        done[KEY(s, e)] = 1; raise_highest(s, f, c)
     fi
  fi
}

/* ------------------------------------------------------------------ worker actions ----- */
#define HOLDER(w, j) (db[j].cid != 0 && \
  ((wj[w] == (j) && wcd[w] == db[j].cid) || pcd[(w)*2 + (j)] == db[j].cid))
#define HELD(j) (HOLDER(0, j) || HOLDER(1, j) || HOLDER(2, j))
#define CLAIMABLE(j) (db[j].st == QUEUED || (db[j].st == WAITING && DUE(j)) || \
  (db[j].st == RUNNING && db[j].lease == PAST && db[j].att < MAXATT))
/* a waiting job's run_after has come: woken, or the approval wait's deadline passed */
#define DUE(j) (db[j].woke || (tmo && db[j].wfor == FOR(P_APPROVAL)))
#define PENDING(w) (pcd[(w)*2] != 0 || pcd[(w)*2 + 1] != 0)
#define UNGUARDED_NEXT(w) ((wj[w] == P && (wpc[w] == P_SPAWN || wpc[w] == P_EFFECT)) || \
  (wj[w] == C && wpc[w] < C_END))
#define EXISTS(j) (db[j].st != ABSENT)

inline lost(w) {   /* the run stops (LeaseLost, Suspended, or its end was written) */
  printf("~ W%d: the run of %c (token %d) stops\n", w, JOB(wj[w]), wtk[w]);
  wj[w] = NONE; wph[w] = 0; wpc[w] = 0; wtk[w] = 0; wcd[w] = 0; wgen[w] = 0; wfl[w] = 0
}

/* exchange, the claim half: SKIP LOCKED, a new token, attempt + 1 */
inline take(w, j, t) {
  new_token(j, t);
  printf("~ W%d -> DB: claim %c: token %d, claim c%d, at stage %d\n",
    w, JOB(j), t, ncl + 1, db[j].step);
  handed_out(j, t);
  assert(unstuck && t > db[j].fl);   /* invariant 17: the next claim is above the refusal */
  ncl++;
  db[j].st = RUNNING; db[j].own = NAME(w); db[j].tok = t; db[j].lease = LIVE;
  db[j].att++; db[j].woke = 0; db[j].cid = ncl;
  wj[w] = j; wtk[w] = t; wcd[w] = ncl; wpc[w] = db[j].step; wgen[w] = db[j].gen;
  wph[w] = PH_START;
  commit()
}

/* exchange, the publish half (the group committer's batch): each result under its lease */
inline complete_one(w, j, acked) {
  if
  :: pcd[w*2 + j] != 0 ->
     printf("~ W%d -> DB: complete %c with token %d\n", w, JOB(j), ptk[w*2 + j]);
     if
     :: GUARD(NO_GUARD_COMPLETE, j, w, ptk[w*2 + j]) ->
        LANDS(j, pcd[w*2 + j]);
        assert(terminal_final && !TERMINAL(db[j].st));
        assert(!SYNC_STANDBY || cancelled_silent && ptk[w*2 + j] > canctok[j]);
        if :: SYNC_STANDBY && acked -> assert(one_result && !npub[j]); npub[j] = 1 :: else fi;
        db[j].st = SUCCEEDED; db[j].lease = NOLEASE;
        printf("~ DB -> W%d: published\n", w);
        if :: j == C -> WAKE_PARENT :: else fi
     :: else   /* LeaseLost: result_rejected */
        printf("~ DB -> W%d: LeaseLost (result_rejected)\n", w)
     fi;
     pcd[w*2 + j] = 0; ptk[w*2 + j] = 0
  :: else
  fi
}
inline publish(w, acked) {
  if
  :: PENDING(w) ->
     ack(acked);   /* decided first: the ghosts count acknowledged results only */
     complete_one(w, P, acked); complete_one(w, C, acked);
     replicate()
  :: else
  fi
}

/* stage_done (and every guarded write that records progress): the cursor moves on */
inline record(w, j) {
  if
  :: GUARD(NO_GUARD_RECORD, j, w, wtk[w]) ->
     printf("~ W%d -> DB: stage_done %c (token %d): cursor %d\n", w, JOB(j), wtk[w], wpc[w] + 1);
     LANDS(j, wcd[w]);
     db[j].step = wpc[w] + 1; wpc[w]++; wph[w] = PH_START;
     commit()
  :: else -> printf("~ W%d -> DB: stage_done %c (token %d): LeaseLost\n", w, JOB(j), wtk[w]);
     lost(w)
  fi
}

/* ctx.effect: the command goes to the receiver (fence, key, claim), then stage_done. Its
   stage_start (a lease check before the send) is left out: a run may send after losing its
   lease anyway (a pause between the check and the send), so leaving it out adds behaviours
   and takes none away. */
inline effect(w, s, e, r) {
  if
  :: wph[w] == PH_START ->
     printf("~ W%d -> R%d: effect %c of %c (id %d), fence %d, claim c%d\n", w, RECEIVER(s),
       (s == 0 -> 97 : 120 + e), JOB(wj[w]), (s == 0 -> 1 : s), wtk[w], wcd[w]);
     apply(s, e, wtk[w], wcd[w], r);
     if
     :: r == RUN -> printf("~ R%d -> W%d: runs it; highest %d\n", RECEIVER(s), w, high[s])
     :: r == REPLAY -> printf("~ R%d -> W%d: replays it; highest %d\n", RECEIVER(s), w, high[s])
     :: r == STALE -> printf("~ R%d -> W%d: StaleFence, highest %d\n", RECEIVER(s), w, high[s])
     :: r == CONFLICT ->
        printf("~ R%d -> W%d: FenceConflict, highest %d\n", RECEIVER(s), w, high[s])
     fi;
     if
     :: r == RUN || r == REPLAY -> wph[w] = PH_DONE
     :: else -> wfl[w] = high[s]; wph[w] = PH_REFUSED   /* StaleFence, FenceConflict */
     fi
  :: wph[w] == PH_DONE -> record(w, wj[w])
  fi
}

/* ctx.spawn: a step whose function submits the child under its stable key, then stage_done
   (its stage_start is left out, as an effect's is) */
inline spawn(w, acked) {
  if
  :: wph[w] == PH_START ->
     if
     :: FIX_CHILDREN && !LEASED(P, w, wtk[w]) -> lost(w)   /* the fix: a guarded insert */
     :: else ->   /* as implemented: ledger.spawn submits the child with no lease check */
        if
        :: db[C].st == ABSENT -> ngen++;
           db[C].gen = (STABLE_IDS -> 1 : ngen);  /* STABLE_IDS: the code (uuid5) */
           db[C].st = QUEUED; db[C].own = 0; db[C].tok = 0; db[C].lease = NOLEASE;
           db[C].att = 0; db[C].step = 0; db[C].woke = 0; db[C].fl = 0; db[C].cid = 0;
           printf("~ W%d -> DB: submit the child C (its key): new, id %d\n", w, db[C].gen);
           commit_fact(acked);
           if :: acked -> wph[w] = PH_DONE :: else -> lost(w) fi
        :: else -> wph[w] = PH_DONE   /* the key's job exists: its id */
        fi
     fi
  :: wph[w] == PH_DONE -> record(w, P)
  fi
}

/* ctx.wait_for, ctx.wait_job (waits.sql wait__lock, wait__settle, wait__suspend): under the
   row's lock, settle the wait if what it waits for happened, else suspend without a lease */
#define SETTLED(w) ((wpc[w] == P_APPROVAL && (sig != 0 || tmo)) || \
  (wpc[w] == P_CHILD && (TERMINAL(db[C].st) || db[C].st == ABSENT)))
inline settle(w) {
  if
  :: wpc[w] == P_APPROVAL && sig != 0 ->
     printf("~ DB -> W%d: the approval wait settles with approval %d\n", w, sig);
     assert(!SYNC_STANDBY || approval_once && (acksig == 0 || sig == acksig));
     db[P].step = P_SPAWN; wpc[w] = P_SPAWN; commit()
  :: wpc[w] == P_APPROVAL && sig == 0 -> wph[w] = PH_GIVEUP   /* WaitTimeout */
  :: wpc[w] == P_CHILD ->
     if
     :: db[C].st == SUCCEEDED -> printf("~ DB -> W%d: the child wait settles: C succeeded\n", w)
     :: else -> printf("~ DB -> W%d: the child wait settles: C failed, cancelled or gone\n", w)
     fi;
     db[P].step = P_EFFECT; wpc[w] = P_EFFECT; commit();
     /* ChildFailed; or not_a_child: a lost history forgot the child's insert */
     if :: db[C].st != SUCCEEDED -> wph[w] = PH_GIVEUP :: else fi
  fi
}
inline suspend(w) {   /* Suspended: no lease, no owner, the attempt given back */
  if
  :: wpc[w] == P_APPROVAL -> printf("~ DB: P suspends until the approval\n")
  :: else -> printf("~ DB: P suspends until the child ends\n")
  fi;
  assert(terminal_final && !TERMINAL(db[P].st));
  db[P].st = WAITING; db[P].own = 0; db[P].lease = NOLEASE; db[P].att--; db[P].woke = 0;
  db[P].wfor = FOR(wpc[w]);
  commit(); lost(w)
}
inline wait_on(w) {
  if
  :: GUARD(NO_GUARD_WAIT, P, w, wtk[w]) ->
     printf("~ W%d -> DB: wait (token %d)\n", w, wtk[w]);
     LANDS(P, wcd[w]);
     if
     :: SETTLED(w) -> settle(w)
     :: else ->
        if
        :: NO_WAIT_LOCK -> wph[w] = PH_DONE   /* read now, suspend in a statement of its own */
        :: else -> suspend(w)
        fi
     fi
  :: else -> printf("~ W%d -> DB: wait (token %d): LeaseLost\n", w, wtk[w]); lost(w)
  fi
}

/* What a run writes when it fails (runtime/outcomes.py): a refusal floors the token at the
   receiver's highest when that is at least the run's own token (outcomes.refused). */
inline fail_run(w, retry, t, j, f) {
  j = wj[w];
  f = (wfl[w] >= wtk[w] -> wfl[w] : 0);
  if
  :: GUARD(NO_GUARD_FAIL, j, w, wtk[w]) ->
     printf("~ W%d -> DB: fail %c (token %d, floor %d)\n", w, JOB(j), wtk[w], f);
     LANDS(j, wcd[w]);
     assert(terminal_final && !TERMINAL(db[j].st));
     fail_write(j, f, retry, t);
     if
     :: db[j].st == QUEUED -> printf("~ DB: %c queued again, token %d\n", JOB(j), db[j].tok)
     :: else -> printf("~ DB: %c failed, token %d\n", JOB(j), db[j].tok)
     fi;
     commit(); cancel_acked(1);
     if   /* as implemented: Leases.fail cancels the children in statements of their own */
     :: !FIX_CHILDREN && j == P && db[P].st == FAILED -> wph[w] = PH_CASCADE
     :: else -> lost(w)
     fi
  :: else -> printf("~ W%d -> DB: fail (token %d): LeaseLost\n", w, wtk[w]); lost(w)
  fi
}

proctype Worker(byte w) {
  byte t, r, j, f;
  bit acked;
end_idle:
  do
  /* exchange: the committer's results and a claim in one statement */
  :: atomic { wj[w] == NONE && CLAIMABLE(P) -> publish(w, acked);
       if :: CLAIMABLE(P) -> take(w, P, t) :: else fi }
  :: atomic { wj[w] == NONE && CLAIMABLE(C) -> publish(w, acked);
       if :: CLAIMABLE(C) -> take(w, C, t) :: else fi }
  /* the committer alone */
  :: atomic { PENDING(w) -> publish(w, acked) }
  /* the lease keeper (extend_many). A renewal that finds its row changes nothing this model
     sees (lease ends are abstract); one that finds none stops the run (heartbeat_lost): that
     matters only before a step that writes nothing under the lease (an effect's send, the
     child's insert): every other step finds out by itself. */
  :: atomic { wj[w] != NONE && wph[w] == PH_START && UNGUARDED_NEXT(w) &&
              !GUARD(NO_GUARD_EXTEND, wj[w], w, wtk[w]) ->
       printf("~ W%d -> DB: extend (token %d): LeaseLost\n", w, wtk[w]); lost(w) }
  :: atomic { NO_GUARD_EXTEND && wj[w] != NONE && wph[w] <= PH_DONE && EXISTS(wj[w]) &&
              db[wj[w]].lease != LIVE ->
       printf("~ W%d -> DB: extend %c (token %d): renewed\n", w, JOB(wj[w]), wtk[w]);
       LANDS(wj[w], wcd[w]); db[wj[w]].lease = LIVE; commit() }
  /* the handler's next statement */
  :: atomic { wj[w] == P && wph[w] == PH_START && (wpc[w] == P_APPROVAL || wpc[w] == P_CHILD) ->
       wait_on(w) }
  :: atomic { wj[w] == P && wph[w] == PH_DONE && (wpc[w] == P_APPROVAL || wpc[w] == P_CHILD) ->
       /* NO_WAIT_LOCK: the suspend, after the condition was read */
       if
       :: GUARD(NO_GUARD_WAIT, P, w, wtk[w]) -> suspend(w)
       :: else -> lost(w)
       fi }
  :: atomic { wj[w] == P && wph[w] <= PH_DONE && wpc[w] == P_SPAWN -> spawn(w, acked) }
  :: atomic { wj[w] == P && wph[w] <= PH_DONE && wpc[w] == P_EFFECT -> effect(w, 0, 0, r) }
  :: atomic { wj[w] == C && wph[w] <= PH_DONE && wpc[w] < C_END -> effect(w, wgen[w], wpc[w], r) }
  :: atomic { wph[w] == PH_START &&
              ((wj[w] == P && wpc[w] == P_END) || (wj[w] == C && wpc[w] == C_END)) ->
       /* the result goes to the committer; the handler thread goes on */
       printf("~ W%d: %c returns; its result goes to the committer\n", w, JOB(wj[w]));
       pcd[w*2 + wj[w]] = wcd[w]; ptk[w*2 + wj[w]] = wtk[w]; lost(w) }
  :: atomic { wj[w] != NONE && wph[w] == PH_REFUSED -> fail_run(w, 1, t, j, f) }
  :: atomic { wj[w] != NONE && wph[w] == PH_GIVEUP -> fail_run(w, 0, t, j, f) }
  :: atomic { wj[w] != NONE && wph[w] <= PH_DONE && errors > 0 -> errors--;
       fail_run(w, 1, t, j, f) }
  :: atomic { wph[w] == PH_CASCADE -> printf("~ W%d -> DB: cancel P's children\n", w);
       /* each child's own cancel (ledger.cancel): it wakes a parent that waits for it */
       if :: ACTIVE(db[C].st) -> cancel_one(C, t); WAKE_PARENT :: else fi;
       commit(); cancel_acked(1); lost(w) }
  /* a crash, or a graceful stop that publishes and releases the lease (release) */
  :: atomic { w < NW - 1 && exits > 0 -> exits--; printf("~ W%d crashes\n", w);
       pcd[w*2] = 0; ptk[w*2] = 0; pcd[w*2 + 1] = 0; ptk[w*2 + 1] = 0; lost(w) }; break
  :: atomic { w < NW - 1 && exits > 0 && wj[w] != NONE && wph[w] <= PH_DONE -> exits--;
       printf("~ W%d stops gracefully\n", w);
       publish(w, acked);
       if
       :: GUARD(NO_GUARD_RELEASE, wj[w], w, wtk[w]) ->
          printf("~ W%d -> DB: release %c (token %d)\n", w, JOB(wj[w]), wtk[w]);
          LANDS(wj[w], wcd[w]);
          assert(terminal_final && !TERMINAL(db[wj[w]].st));
          db[wj[w]].st = QUEUED; db[wj[w]].own = 0; db[wj[w]].lease = NOLEASE;
          db[wj[w]].att--; commit()
       :: else
       fi;
       lost(w) }; break
  od
}

/* ------------------------------------------------ the clock, the operator, the faults ----- */
/* ledger.signal: stored once per job and name, the first wins; the same payload again is
   answered as the first; a different one is refused (SignalConflict); an unconfirmed one is
   sent again */
inline signal(v, i, acked) {
  if
  :: TERMINAL(db[P].st) -> sent[i] = 1   /* TerminalJob */
  :: else ->
     if
     :: sig == v -> sent[i] = 1
     :: sig != 0 && sig != v && !NO_SIGNAL_ONCE -> sent[i] = 1
     :: else ->   /* stored (NO_SIGNAL_ONCE: over the first) */
        sig = v;
        if :: db[P].st == WAITING && db[P].wfor == FOR(P_APPROVAL) -> db[P].woke = 1 :: else fi;
        printf("~ Sender -> DB: approval %d stored\n", v);
        commit_fact(acked);
        if :: acked -> sent[i] = 1; if :: acksig == 0 -> acksig = v :: else fi :: else fi
     fi
  fi
}

proctype Environment() {
  byte t;
  bit acked;
end_env:
  do
  /* the database clock passes a lease's end: at any time while its holder runs (a pause, a
     slow network: budgeted), whenever nobody runs under it any more */
  :: atomic { db[P].st == RUNNING && db[P].lease == LIVE && (expires > 0 || !HELD(P)) ->
       if :: HELD(P) -> expires-- :: else fi; db[P].lease = PAST; clk = clk + GAP;
       printf("~ Clock -> DB: the lease of P (token %d) passes\n", db[P].tok) }
  :: atomic { db[C].st == RUNNING && db[C].lease == LIVE && (expires > 0 || !HELD(C)) ->
       if :: HELD(C) -> expires-- :: else fi; db[C].lease = PAST; clk = clk + GAP;
       printf("~ Clock -> DB: the lease of C (token %d) passes\n", db[C].tok) }
  /* any claim settles an expired last attempt: failed (exchange's `exhausted`) */
  :: atomic { db[P].st == RUNNING && db[P].lease == PAST && db[P].att >= MAXATT ->
       db[P].st = FAILED; db[P].lease = NOLEASE;
       printf("~ DB: P failed: its last attempt's lease passed\n");
       if :: FIX_CHILDREN -> cancel_children(t) :: else fi;
       commit(); cancel_acked(1) }
  :: atomic { db[C].st == RUNNING && db[C].lease == PAST && db[C].att >= MAXATT ->
       db[C].st = FAILED; db[C].lease = NOLEASE; WAKE_PARENT;
       printf("~ DB: C failed: its last attempt's lease passed\n"); commit() }
  /* the operator: cancel (a parent's cancel takes its child), requeue (ledger.requeue) */
  :: atomic { cancels > 0 && ACTIVE(db[P].st) -> cancels--; printf("~ Operator -> DB: cancel P\n");
       cancel_one(P, t); cancel_children(t); commit_fact(acked); cancel_acked(acked) }
  :: atomic { cancels > 0 && ACTIVE(db[C].st) -> cancels--; printf("~ Operator -> DB: cancel C\n");
       cancel_one(C, t); WAKE_PARENT; commit_fact(acked); cancel_acked(acked) }
  :: atomic { requeues > 0 && (db[P].st == FAILED || db[P].st == CANCELLED) -> requeues--;
       printf("~ Operator -> DB: requeue P\n");
       db[P].st = QUEUED; db[P].att = 0; db[P].own = 0; db[P].lease = NOLEASE;
       if
       :: db[C].st == FAILED || db[C].st == CANCELLED ->
          db[C].st = QUEUED; db[C].att = 0; db[C].own = 0; db[C].lease = NOLEASE
       :: else
       fi;
       commit() }
  /* two approvals */
  :: atomic { !sent[0] -> signal(1, 0, acked) }
  :: atomic { !sent[1] -> signal(2, 1, acked) }
  /* the approval wait's timeout, once no approval is coming */
  :: atomic { !tmo && sent[0] && sent[1] && sig == 0 -> tmo = 1;
       printf("~ Clock: the approval wait's deadline passes\n") }
  /* replication and the lost history */
  :: atomic { SYNC_STANDBY && losses > 0 -> losses--;   /* failover to the synchronous standby */
       printf("~ DB: failover to the synchronous standby\n");
       assert(sync_no_loss && !unrep);
       from_standby(); to_standby() }
  :: atomic { !SYNC_STANDBY && losses > 0 && lag > 0 -> to_standby(); lag = 0;   /* caught up */
       printf("~ DB -> Standby: caught up\n") }
  :: atomic { !SYNC_STANDBY && losses > 0 -> losses--;        /* failover, restore: a suffix lost */
       printf("~ DB: failover or restore: the last %d commits are lost\n", lag);
       from_standby();
       if :: CLOCK_BEHIND -> clk = sbclk :: else fi;   /* the restored server's clock */
       lag = 0; if :: losses == 0 -> forget_standby() :: else -> to_standby() fi }
  /* a receiver's crash: the guard's state is in its own database, unless VOLATILE_GUARD */
  :: atomic { VOLATILE_GUARD && rcrashes > 0 -> rcrashes--; printf("~ R0 crashes, forgets\n");
       high[0] = 0; holder[0] = 0; done[0] = 0 }
  :: atomic { VOLATILE_GUARD && rcrashes > 0 -> rcrashes--; printf("~ R1 crashes, forgets\n");
       high[1] = 0; holder[1] = 0; high[2] = 0; holder[2] = 0;
       done[1] = 0; done[2] = 0; done[3] = 0; done[4] = 0 }
  od
}

/* Reads TENURE_MODEL: switches by name, budgets as NAME=value (defaults below). */
c_code {
  static int cfg_has(const char *name) {
    const char *s = getenv("TENURE_MODEL"); size_t n = strlen(name);
    while (s && *s) {
      const char *e = strchr(s, ','); size_t m = e ? (size_t)(e - s) : strlen(s);
      if (m == n && strncmp(s, name, n) == 0) return 1;
      s = e ? e + 1 : 0;
    }
    return 0;
  }
  static int cfg_num(const char *name, int value) {   /* the last one given wins */
    const char *s = getenv("TENURE_MODEL"); size_t n = strlen(name);
    while (s && *s) {
      const char *e = strchr(s, ','); size_t m = e ? (size_t)(e - s) : strlen(s);
      if (m > n && s[n] == '=' && strncmp(s, name, n) == 0) value = atoi(s + n + 1);
      s = e ? e + 1 : 0;
    }
    return value;
  }
}

init {
  atomic {
    c_code {
      SYNC_STANDBY = cfg_has("SYNC_STANDBY"); CLOCK_BEHIND = cfg_has("CLOCK_BEHIND");
      FIX_CHILDREN = cfg_has("FIX_CHILDREN");
      STABLE_IDS = cfg_has("STABLE_IDS");
      CHECK_WRITES = cfg_has("CHECK_WRITES"); CHECK_TOKENS = cfg_has("CHECK_TOKENS");
      CHECK_EFFECTS = cfg_has("CHECK_EFFECTS"); CHECK_CHILDREN = cfg_has("CHECK_CHILDREN");
      NO_STATE_CHECK = cfg_has("NO_STATE_CHECK"); NO_OWNER_CHECK = cfg_has("NO_OWNER_CHECK");
      NO_TOKEN_CHECK = cfg_has("NO_TOKEN_CHECK"); NO_LEASE_CHECK = cfg_has("NO_LEASE_CHECK");
      NO_GUARD_COMPLETE = cfg_has("NO_GUARD_COMPLETE");
      NO_GUARD_EXTEND = cfg_has("NO_GUARD_EXTEND");
      NO_GUARD_RECORD = cfg_has("NO_GUARD_RECORD"); NO_GUARD_FAIL = cfg_has("NO_GUARD_FAIL");
      NO_GUARD_RELEASE = cfg_has("NO_GUARD_RELEASE"); NO_GUARD_WAIT = cfg_has("NO_GUARD_WAIT");
      NO_WAIT_LOCK = cfg_has("NO_WAIT_LOCK");
      NO_TOKEN_FLOOR = cfg_has("NO_TOKEN_FLOOR"); NO_RECEIVER_FLOOR = cfg_has("NO_RECEIVER_FLOOR");
      NO_BELOW_CHECK = cfg_has("NO_BELOW_CHECK"); NO_BINDING = cfg_has("NO_BINDING");
      VOLATILE_GUARD = cfg_has("VOLATILE_GUARD");
      NO_COMMIT_CONFIRM = cfg_has("NO_COMMIT_CONFIRM"); NO_SIGNAL_ONCE = cfg_has("NO_SIGNAL_ONCE");
      MAXATT = cfg_num("MAXATT", 2); NW = cfg_num("WORKERS", 3);
      GAP = CLOCK_BEHIND ? MAXATT + 1 : 0; LAG = cfg_num("LAG", 3);
      now.expires = cfg_num("EXPIRES", 1); now.exits = cfg_num("EXITS", 1);
      now.losses = cfg_num("LOSSES", 1); now.cancels = cfg_num("CANCELS", 1);
      now.requeues = cfg_num("REQUEUES", 1); now.errors = cfg_num("ERRORS", 0);
      now.rcrashes = cfg_num("RCRASHES", 1); now.waitcancels = cfg_num("WAITCANCELS", 1);
      /* two approvals, one, or none: the parent's handler then starts past its wait */
      now.sent[1] = cfg_num("APPROVALS", 2) < 2; now.sent[0] = cfg_num("APPROVALS", 2) < 1;
      if (now.sent[0]) { now.db[0].step = 1; now.sb[0].step = 1; now.sig = now.sbsig = 1; }
    };
    db[P].st = QUEUED; db[P].gen = 1; sb[P].st = QUEUED; sb[P].gen = 1;   /* submitted */
    wj[0] = NONE; wj[1] = NONE; wj[2] = NONE;
    run Environment();
    run Worker(0); run Worker(1);
    if :: NW == 3 -> run Worker(2) :: else fi
  }
}

#ifdef LIVENESS
/* Every job eventually ends (or is cancelled), for good. */
ltl live_ends { <> [] (TERMINAL(db[P].st) && (db[C].st == ABSENT || TERMINAL(db[C].st))) }
#endif
