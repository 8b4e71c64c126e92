-- Keeping and removing outcomes and running records, shared by keep_outcome.lua,
-- remove_running.lua, lookup.lua (a take that keeps its decision's running record) and
-- undo.lua (an undone take, which removes it again). After `common.lua`.

local SWEEP = 64

-- Keeps `value` as the outcome of the call `id` until `at` (ms), replacing one kept for the
-- same id, at most `per_user` of them for `caller` and `total` in all. A caller at its cap
-- loses its own soonest to expire, never another caller's; past `total`, the soonest to
-- expire of all go first.
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
-- Each caller's outcome ids are in `:outcome_user:<caller>`, scored by expiry. Reading an
-- outcome never uses that index (only the row, and `:outcomes` for listings): an earlier
-- version keeps outcomes without it, and they read as any other. An id in it whose
-- outcome left `:outcomes` another way (past total, by this version or an earlier one)
-- no longer counts: while the caller is at its cap, their first SWEEP ids are checked and
-- such ids dropped, and whatever is left expires with its score.
--
-- `kept` is <base>:outcomes. Returns 'ok' | 'present' | 'ended'.
local function keep_outcome(kept, base, id, value, at, total, caller, per_user, token, over_running)
  local mine = base .. ':outcome_user:' .. caller
  local row = base .. ':outcome:' .. id
  local run = base .. ':outcome_run:' .. id

  if token and not over_running and redis.call('EXISTS', row) == 1 then
    return 'present'
  end
  if over_running then
    local was = redis.call('GET', row)
    if was and redis.call('HGET', run, 'digest') ~= redis.sha1hex(was) then
      return 'ended'
    end
  end

  redis.call('ZREMRANGEBYSCORE', kept, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', mine, '-inf', now)
  redis.call('ZREM', kept, id)
  redis.call('ZREM', mine, id)
  redis.call('DEL', row, run)
  if at <= now then
    return 'ok'
  end

  if redis.call('ZCARD', mine) >= per_user then
    for _, other in ipairs(redis.call('ZRANGE', mine, 0, SWEEP - 1)) do
      if not redis.call('ZSCORE', kept, other) then
        redis.call('ZREM', mine, other)
      end
    end
  end
  while redis.call('ZCARD', mine) >= per_user do
    local oldest = redis.call('ZPOPMIN', mine)[1]
    redis.call('ZREM', kept, oldest)
    redis.call('DEL', base .. ':outcome:' .. oldest, base .. ':outcome_run:' .. oldest)
  end
  while redis.call('ZCARD', kept) >= total do
    local oldest = redis.call('ZPOPMIN', kept)
    redis.call('DEL', base .. ':outcome:' .. oldest[1], base .. ':outcome_run:' .. oldest[1])
  end

  redis.call('SET', row, value, 'PX', at - now)
  if token then
    redis.call('HSET', run, 'token', token, 'digest', redis.sha1hex(value), 'caller', caller)
    redis.call('PEXPIRE', run, at - now)
  end
  redis.call('ZADD', kept, at, id)
  extend(kept, at - now)
  redis.call('ZADD', mine, at, id)
  extend(mine, at - now)
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
  redis.call('DEL', row, run)
  redis.call('ZREM', kept, id)
  if mark[3] then
    redis.call('ZREM', base .. ':outcome_user:' .. mark[3], id)
  end
  return 'removed'
end
