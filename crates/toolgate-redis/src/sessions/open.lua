-- Opens a session, or refuses it when live sessions fill every place; exact, since Redis
-- runs one script at a time and every count is of the sessions live by the server's clock.
-- Past the bound per user, the user's oldest sessions end first (before the count in
-- all), so that signing in again and again ends only one's own sessions.
--
-- KEYS[1]  <base>:all            (session id → expiry ms)
-- ARGV     base, session id (the SHA-256 of the cookie's value, hex), user id, record,
--          ttl ms, max_per_user, max_total
-- returns  {'ok', expiry ms, sessions ended} | {'full', 0, sessions ended}

local base, id, user, record = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, per_user, total = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local all = KEYS[1]

redis.call('ZREMRANGEBYSCORE', all, '-inf', now)

-- The user's sessions, oldest first (by when they were opened); the ones that expired or
-- were closed leave.
local mine = base .. ':user:' .. user
local own = redis.call('ZRANGE', mine, 0, -1)
for _, session in ipairs(own) do
  if not redis.call('ZSCORE', all, session) then
    redis.call('ZREM', mine, session)
  end
end
local ended = 0
local over = redis.call('ZCARD', mine) + 1 - per_user
if over > 0 then
  local oldest = redis.call('ZRANGE', mine, 0, over - 1)
  for _, session in ipairs(oldest) do
    redis.call('DEL', base .. ':session:' .. session)
    redis.call('ZREM', all, session)
    redis.call('ZREM', mine, session)
    ended = ended + 1
  end
end

if redis.call('ZCARD', all) >= total then
  return {'full', 0, ended}
end

local at = now + ttl
local row = base .. ':session:' .. id
redis.call('HSET', row, 'user', user, 'record', record)
redis.call('PEXPIRE', row, ttl)
redis.call('ZADD', all, at, id)
-- Opened after every other session of the user, even within one millisecond.
local opened = now
local last = redis.call('ZRANGE', mine, -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) >= opened then
  opened = tonumber(last[2]) + 1
end
redis.call('ZADD', mine, opened, id)
extend(all, ttl)
extend(mine, ttl)
return {'ok', at, ended}
