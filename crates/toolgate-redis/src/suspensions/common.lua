-- What the scripts of the suspension store share, after `server_clock.lua`.

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
