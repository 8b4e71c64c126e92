-- The start of every script of the suspension store: the Redis server's clock, and what
-- the scripts share. Every key is built from the store's base (ARGV[1]), whose hash tag
-- puts them all in the slot of KEYS[1].

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Pushes the expiry of `key` out to `ms` from now; never pulls it in.
local function extend(key, ms)
  ms = math.max(1, math.floor(ms))
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Remembers that `id` expired at `at`, so that it answers "expired" rather than "unknown"
-- for `keep` ms after, and at most `max` such ids (the oldest go first).
local function remember(base, id, at, keep, max)
  if max < 1 or at + keep <= now then
    return
  end
  local expired = base .. ':expired'
  redis.call('ZADD', expired, at, id)
  redis.call('ZREMRANGEBYSCORE', expired, '-inf', now - keep)
  local over = redis.call('ZCARD', expired) - max
  if over > 0 then
    redis.call('ZREMRANGEBYRANK', expired, 0, over - 1)
  end
  extend(expired, at + keep - now)
end

-- Removes the waiting call `id`: its row and its place in every index.
local function forget(base, id)
  local row = base .. ':call:' .. id
  local user = redis.call('HGET', row, 'user')
  if user then
    redis.call('ZREM', base .. ':user:' .. user, id)
  end
  redis.call('ZREM', base .. ':calls', id)
  redis.call('ZREM', base .. ':ids', id)
  redis.call('DEL', row)
end
