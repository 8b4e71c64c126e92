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

-- The bytes the waiting calls hold, for `max_bytes_total`: `:sizes` (id → size, for the
-- ids of `:calls` this version saved, which outlives their rows as `:calls` does) and
-- `:bytes`, the sum of `:sizes`. Every path that adds a call to `:calls` or removes one
-- keeps both in step (add_size(), unsize()); with no call waiting both are gone. A call an
-- earlier version saved has no size there and counts nothing, and one it removed is left
-- in `:sizes` until recount_bytes() drops it.

-- Sets `:bytes` to `held`, expiring with `:calls`: gone at 0 or below, and past what a
-- count can be (a counter set by hand), to be counted again.
local function set_bytes(base, held)
  local bytes = base .. ':bytes'
  if held <= 0 or held >= 2 ^ 53 then
    redis.call('DEL', bytes)
    return
  end
  redis.call('SET', bytes, string.format('%d', held))
  local ttl = redis.call('PTTL', base .. ':calls')
  if ttl > 0 then
    redis.call('PEXPIRE', bytes, ttl)
  end
end

-- Counts `:bytes` again, exactly, from `:sizes`: only the ids still in `:calls` count, and
-- the others (removed by an earlier version, which knows no sizes) leave `:sizes`. Reads
-- every waiting call's size, so only when the counter says the bound is reached, or
-- when it is lost. Returns the bytes held.
local function recount_bytes(base)
  local calls, sizes = base .. ':calls', base .. ':sizes'
  local all = redis.call('HGETALL', sizes)
  local held, stale = 0, {}
  for i = 1, #all, 2 do
    local size = tonumber(all[i + 1])
    if size and redis.call('ZSCORE', calls, all[i]) then
      held = held + size
    else
      stale[#stale + 1] = all[i]
    end
  end
  for i = 1, #stale, 500 do
    redis.call('HDEL', sizes, unpack(stale, i, math.min(i + 499, #stale)))
  end
  if held <= 0 then
    redis.call('DEL', sizes)
  end
  set_bytes(base, held)
  return held
end

-- The bytes the waiting calls hold, as `:bytes` counts them; counted again when it is
-- lost or not a count while `:sizes` holds sizes.
local function held_bytes(base)
  local held = tonumber(redis.call('GET', base .. ':bytes'))
  if held and held >= 0 and held == math.floor(held) then
    return held
  end
  if redis.call('EXISTS', base .. ':sizes') == 0 then
    return 0
  end
  return recount_bytes(base)
end

-- Counts the call `id`, of `size` bytes, as waiting: its size in `:sizes` and `:bytes`,
-- both expiring no sooner than `ms` from now (as `:calls`).
local function add_size(base, id, size, ms)
  local sizes = base .. ':sizes'
  local held = held_bytes(base) - (tonumber(redis.call('HGET', sizes, id)) or 0)
  redis.call('HSET', sizes, id, size)
  set_bytes(base, held + size)
  extend(sizes, ms)
  extend(base .. ':bytes', ms)
end

-- Stops counting the call `id` (out of `:calls` already): its size leaves `:sizes` and
-- `:bytes`. With no call left in `:calls`, nothing is held.
local function unsize(base, id)
  local sizes, bytes = base .. ':sizes', base .. ':bytes'
  if redis.call('ZCARD', base .. ':calls') == 0 then
    redis.call('DEL', sizes, bytes)
    return
  end
  local size = tonumber(redis.call('HGET', sizes, id))
  if size then
    redis.call('HDEL', sizes, id)
    local held = tonumber(redis.call('GET', bytes))
    if held then
      set_bytes(base, held - size)
    end
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
  unsize(base, id)
  return user
end
