-- Checks the definition a replica was offered for a tool against the tool's pin: pins it the
-- first time (trust on first use), records a change when it differs from the pin, and
-- withdraws a change waiting when the definition came back to the pinned one.
--
-- KEYS[1]  <base>:pinned
-- ARGV     base, tool, the fingerprint offered, the definition offered (JSON), the most
--          history entries kept, '1' when a definition that is the pinned one leaves the
--          change waiting in place, and a definition that differs from the pin leaves a
--          different change waiting in place (an import of pins kept elsewhere: not what the
--          upstream offers now, which a replica recorded)
-- returns  'pinned' (new, served), 'same' (served), 'withdrawn' (served again: the change
--          that waited is gone), 'changed' (held back, recorded now), 'still_changed' (held
--          back, the same change waits already)

local base, tool, offered, form = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local pinned = redis.call('HGET', KEYS[1], tool)
if not pinned then
  redis.call('HSET', KEYS[1], tool, offered)
  redis.call('HSET', base .. ':pinned_forms', tool, form)
  record(base, tool, 'pinned', offered, tonumber(ARGV[5]))
  return 'pinned'
end
if pinned == offered then
  if ARGV[6] ~= '1' and redis.call('HDEL', base .. ':pending', tool) == 1 then
    redis.call('HDEL', base .. ':pending_forms', tool)
    return 'withdrawn'
  end
  return 'same'
end
local waiting = redis.call('HGET', base .. ':pending', tool)
if waiting == offered or (waiting and ARGV[6] == '1') then
  return 'still_changed'
end
redis.call('HSET', base .. ':pending', tool, offered)
redis.call('HSET', base .. ':pending_forms', tool, form)
record(base, tool, 'changed', offered, tonumber(ARGV[5]))
return 'changed'
