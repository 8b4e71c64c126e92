-- What the scripts of the suspension store share, after `server_clock.lua`.

-- Forgets the remembered expired ids `ids`, and who made each.
local function unremember(base, ids)
  for i = 1, #ids, 500 do
    local batch = {unpack(ids, i, math.min(i + 499, #ids))}
    redis.call('ZREM', base .. ':expired', unpack(batch))
    redis.call('HDEL', base .. ':expired_owners', unpack(batch))
  end
end

-- Remembers that `id` expired at `at`, so that it answers "expired" rather than "unknown"
-- for `keep` ms after, and at most `max` such ids (the oldest go first). `user`, who made
-- the call (the caller as save.lua keeps it), is kept with it (in `:expired_owners`, which holds the same ids as `:expired`
-- and expires with it), so that only they are told it expired; `false` when not known.
-- An id in `:expired` without an owner (remembered by an earlier version, which kept none)
-- is nobody's: everyone but an approver is told it is unknown.
local function remember(base, id, at, keep, max, user)
  if max < 1 or at + keep <= now then
    return
  end
  local expired, owners = base .. ':expired', base .. ':expired_owners'
  redis.call('ZADD', expired, at, id)
  if user then
    redis.call('HSET', owners, id, user)
  else
    redis.call('HDEL', owners, id)
  end
  unremember(base, redis.call('ZRANGEBYSCORE', expired, '-inf', now - keep))
  local over = redis.call('ZCARD', expired) - max
  if over > 0 then
    unremember(base, redis.call('ZRANGE', expired, 0, over - 1))
  end
  extend(expired, at + keep - now)
  if redis.call('EXISTS', owners) == 1 then
    extend(owners, at + keep - now)
  end
end

-- Removes the waiting call `id`: its row and its place in every index. Returns who made
-- it (from `:owners`, which outlives the row, or the row), or `false` when not known.
local function forget(base, id)
  local row = base .. ':call:' .. id
  local owners = base .. ':owners'
  local user = redis.call('HGET', owners, id) or redis.call('HGET', row, 'user')
  if user then
    redis.call('ZREM', base .. ':user:' .. user, id)
  end
  redis.call('HDEL', owners, id)
  redis.call('ZREM', base .. ':calls', id)
  redis.call('ZREM', base .. ':ids', id)
  redis.call('DEL', row)
  return user
end
