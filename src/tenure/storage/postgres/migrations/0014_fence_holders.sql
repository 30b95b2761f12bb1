-- The fence receiver, version 14 (PostgreSQL): a receiver never accepts two holders of one
-- token (invariant 17). `holder` is the claim (its identity travels with its fence as
-- X-Execution-Claim) that sent the scope's highest accepted token; an equal token from another
-- claim is refused. NULL: the highest came without a claim (older senders), or from the ledger.
ALTER TABLE tenure_fence_scopes ADD COLUMN holder text;
