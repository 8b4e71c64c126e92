-- Keeping and removing outcomes and running records, shared by keep_outcome.lua,
-- remove_running.lua, lookup.lua (a take that keeps its decision's running record) and
-- undo.lua (an undone take, which removes it again). After `common.lua`.

local SWEEP = 64

-- Who holds outcomes, so that past `total` the caller who holds the most loses one:
-- `:outcome_owners`, id → caller, for the ids of `:outcomes` this version kept, and
-- `:outcome_counts`, caller → how many ids their index `:outcome_user:<caller>` holds, a
-- caller at 0 removed. Every path that adds or removes an outcome keeps both in step
-- (drop_outcome(), keep_outcome()); both expire with the latest outcome, and an empty one
-- is gone.

-- Sets `caller`'s count to the number of ids in their index, removing them at 0.
local function recount(base, caller)
  local counts = base .. ':outcome_counts'
  local held = redis.call('ZCARD', base .. ':outcome_user:' .. caller)
  if held > 0 then
    redis.call('ZADD', counts, held, caller)
  else
    redis.call('ZREM', counts, caller)
  end
end

-- Takes `id` out of the index of `caller`, whose outcome it no longer is (whoever
-- `:outcome_owners` names for it too), and recounts them.
local function unown(base, id, caller)
  local owners = base .. ':outcome_owners'
  local owner = redis.call('HGET', owners, id)
  if owner then
    redis.call('HDEL', owners, id)
    redis.call('ZREM', base .. ':outcome_user:' .. owner, id)
    recount(base, owner)
  end
  if caller and caller ~= owner then
    redis.call('ZREM', base .. ':outcome_user:' .. caller, id)
    recount(base, caller)
  end
end

-- Removes the outcome `id` — its row, its mark, its place in `kept` (<base>:outcomes) and
-- in its caller's index and count — if it is kept.
local function drop_outcome(kept, base, id)
  redis.call('ZREM', kept, id)
  redis.call('DEL', base .. ':outcome:' .. id, base .. ':outcome_run:' .. id)
  unown(base, id, false)
end

-- Removes the oldest outcome of the caller who holds the most outcomes:
-- of callers who hold as many, whichever `:outcome_counts` ranks last (the caller whose
-- key sorts last). An id of theirs gone from `kept` another way (by an earlier version)
-- is dropped from their index instead, and no longer counts. With no caller counted
-- (every outcome kept by an earlier version), the first kept of all goes.
local function drop_from_the_most(kept, base)
  local top = redis.call('ZREVRANGE', base .. ':outcome_counts', 0, 0)[1]
  if not top then
    local oldest = redis.call('ZRANGE', kept, 0, 0)[1]
    if oldest then
      drop_outcome(kept, base, oldest)
    end
    return
  end
  local oldest = redis.call('ZRANGE', base .. ':outcome_user:' .. top, 0, 0)[1]
  if oldest and redis.call('ZSCORE', kept, oldest) then
    drop_outcome(kept, base, oldest)
  end
  if oldest then
    unown(base, oldest, top)
  else
    recount(base, top)
  end
end

-- Keeps `value` as the outcome of the call `id` until `at` (ms), replacing one kept for the
-- same id, at most `per_user` of them for `caller` and `total` in all. A caller at its cap
-- loses its own oldest (the first kept), never another caller's; past `total`, the caller
-- who holds the most outcomes loses their own oldest (drop_from_the_most()), never a
-- caller who holds fewer than `caller`.
--
-- With a `token`, the value is a running record of the decision with that token, kept only
-- when nothing is kept for the id (set-if-absent): 'present' when something is, which is
-- left as it is. The record is marked in `:outcome_run:<id>`, a hash of the token, the
-- SHA-1 of the value it marks and the caller, which expires with the row;
-- remove_running() removes the record only when both still match, so that an outcome
-- written over it — by this version, which drops the mark, or by an earlier one, which
-- does not know it — is never removed by its token. Without a token the value is an
-- outcome, and replaces a running record whoever kept it.
--
-- With `over_running`, the value is kept only over a running record — a row whose mark's
-- digest is that of the row as it is now — or over nothing: 'ended' when an outcome is
-- kept already, which is left as it is. So a caller's withdrawal of a running call and
-- the call's own end replace the record, and whichever comes second finds the first and
-- is refused. With a token too, it is the running record of the decision that took the
-- call (lookup.lua), kept over one a failed decision left behind.
--
-- Each caller's outcome ids are in `:outcome_user:<caller>`, scored by when each was kept
-- (not by expiry: outcomes kept under different `expire_after`s, across a reload or by
-- replicas configured apart, expire out of the order they were kept in, and the oldest is
-- what goes). An outcome that expires leaves it through `:outcome_owners` (drop_outcome()).
-- Reading an outcome never uses that index (only the row, and `:outcomes` for listings):
-- an earlier version keeps outcomes without it, and they read as any other. An id in it
-- whose outcome left `:outcomes` another way (past total, by an earlier version, which
-- scored it by expiry) no longer counts: while the caller is at its cap, their first SWEEP
-- ids are checked and such ids dropped, past total such an id of the caller who holds the
-- most is dropped before anything of theirs goes, and the index expires with the caller's
-- latest outcome.
--
-- `kept` is <base>:outcomes. Returns 'ok' | 'present' | 'ended'.
local function keep_outcome(kept, base, id, value, at, total, caller, per_user, token, over_running)
  local mine = base .. ':outcome_user:' .. caller
  local row = base .. ':outcome:' .. id
  local run = base .. ':outcome_run:' .. id
  local owners, counts = base .. ':outcome_owners', base .. ':outcome_counts'

  if token and not over_running and redis.call('EXISTS', row) == 1 then
    return 'present'
  end
  if over_running then
    local was = redis.call('GET', row)
    if was and redis.call('HGET', run, 'digest') ~= redis.sha1hex(was) then
      return 'ended'
    end
  end

  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', kept, '-inf', now)) do
    drop_outcome(kept, base, gone)
  end
  drop_outcome(kept, base, id)
  unown(base, id, caller)
  if at <= now then
    return 'ok'
  end

  if redis.call('ZCARD', mine) >= per_user then
    for _, other in ipairs(redis.call('ZRANGE', mine, 0, SWEEP - 1)) do
      if not redis.call('ZSCORE', kept, other) then
        unown(base, other, caller)
      end
    end
  end
  while redis.call('ZCARD', mine) >= per_user do
    local oldest = redis.call('ZRANGE', mine, 0, 0)[1]
    drop_outcome(kept, base, oldest)
    unown(base, oldest, caller)
  end
  while redis.call('ZCARD', kept) >= total do
    drop_from_the_most(kept, base)
  end

  redis.call('SET', row, value, 'PX', at - now)
  if token then
    redis.call('HSET', run, 'token', token, 'digest', redis.sha1hex(value), 'caller', caller)
    redis.call('PEXPIRE', run, at - now)
  end
  redis.call('ZADD', kept, at, id)
  extend(kept, at - now)
  redis.call('ZADD', mine, now, id)
  extend(mine, at - now)
  redis.call('HSET', owners, id, caller)
  extend(owners, at - now)
  recount(base, caller)
  extend(counts, at - now)
  return 'ok'
end

-- Removes the running record that the decision with `token` kept for the call `id`, if it
-- is still what is kept: its mark in `:outcome_run:<id>` names that token and the SHA-1 of
-- the row as it is now. Anything else — an outcome kept over the record, another
-- decision's record — is left. `kept` is <base>:outcomes. Returns 'removed' | 'no'.
local function remove_running(kept, base, id, token)
  local row = base .. ':outcome:' .. id
  local run = base .. ':outcome_run:' .. id

  local mark = redis.call('HMGET', run, 'token', 'digest', 'caller')
  local value = redis.call('GET', row)
  if not value or mark[1] ~= token or mark[2] ~= redis.sha1hex(value) then
    return 'no'
  end
  drop_outcome(kept, base, id)
  unown(base, id, mark[3] or false)
  return 'removed'
end
