-- The start of every script of the suspension and session stores: the Redis server's clock
-- in milliseconds, and how a key's expiry is pushed out. Every key such a script touches is
-- built from its store's base (ARGV[1]), whose hash tag puts them all in the slot of
-- KEYS[1].

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Pushes the expiry of `key` out to `ms` from now; never pulls it in.
local function extend(key, ms)
  ms = math.max(1, math.floor(ms))
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
