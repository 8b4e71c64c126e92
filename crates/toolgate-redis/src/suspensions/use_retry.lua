-- Uses up the oldest live approval for a retry of one binding: removes it and returns it,
-- in one step, so that of two calls asking at once only one gets it. Void ones met on the
-- way are removed.
--
-- KEYS[1]  <base>:retries
-- ARGV     base, binding key, the fingerprint of this replica's key
-- returns  {'ok', value} | {'none', false}, or {'sealed', value} for a live approval
--          sealed with another key, which is left in place

local base, all = ARGV[1], KEYS[1]
local queue = base .. ':retry_key:' .. ARGV[2]
for _, approval in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
  local at = redis.call('ZSCORE', all, approval)
  local row = base .. ':retry:' .. approval
  local found = redis.call('HMGET', row, 'user', 'value', 'seal')
  local live = at and tonumber(at) > now and found[2]
  if live and found[3] ~= ARGV[3] then
    return {'sealed', found[2]}
  end
  redis.call('ZREM', queue, approval)
  redis.call('ZREM', all, approval)
  if found[1] then
    redis.call('ZREM', base .. ':retry_user:' .. found[1], approval)
  end
  redis.call('DEL', row)
  if live then
    return {'ok', found[2]}
  end
end
return {'none', false}
