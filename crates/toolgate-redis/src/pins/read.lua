-- Reads every pin and every change waiting, at one moment.
--
-- KEYS[1]  <base>:pinned
-- ARGV     base
-- returns  the fields and values of the pins, of their definitions, of the changes waiting
--          and of their definitions (four flat lists)

local base = ARGV[1]
return {
  redis.call('HGETALL', KEYS[1]),
  redis.call('HGETALL', base .. ':pinned_forms'),
  redis.call('HGETALL', base .. ':pending'),
  redis.call('HGETALL', base .. ':pending_forms'),
}
