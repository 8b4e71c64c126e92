-- Adds what one replica counted since it last added to the counts every replica shares.
--
-- KEYS[1]  <base>:tools
-- ARGV     base, the most tools counted apart, how long the counts outlive the last
--          addition (ms), then for each tool: its name, how many fields follow, then each
--          field's name and what to add to it; none to add nothing
-- returns  since (ms, '' when nothing was ever added): a replica that finds it moved
--          knows the counts were reset, or expired, since its last addition

-- Adds `by` to one count. A count no replica wrote (text, or a key of another type: another
-- writer's) starts over at `by`, and one at the largest number Redis keeps stays there: an
-- error half way would leave the tools before it added, and the replica, told the
-- addition failed, would add them again at its next flush.
local function add_to(key, field, by)
  local added = redis.pcall('HINCRBY', key, field, by)
  if type(added) ~= 'table' or not added.err then
    return
  end
  if string.find(added.err, 'overflow', 1, true) then
    redis.call('HSET', key, field, '9223372036854775807')
    return
  end
  if redis.call('TYPE', key).ok ~= 'hash' then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, field, by)
end

local base, max, keep = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if #ARGV < 4 then
  return redis.call('GET', base .. ':since') or ''
end
redis.call('SET', base .. ':since', now, 'NX', 'PX', keep)
redis.call('PEXPIRE', base .. ':since', keep)
local i = 4
while i <= #ARGV do
  local tool, fields = ARGV[i], tonumber(ARGV[i + 1])
  if redis.call('SISMEMBER', KEYS[1], tool) == 0 and redis.call('SCARD', KEYS[1]) >= max then
    tool = 'other'
  end
  redis.call('SADD', KEYS[1], tool)
  local key = base .. ':tool:' .. tool
  for field = 0, fields - 1 do
    add_to(key, ARGV[i + 2 + 2 * field], ARGV[i + 3 + 2 * field])
  end
  redis.call('PEXPIRE', key, keep)
  i = i + 2 + 2 * fields
end
redis.call('PEXPIRE', KEYS[1], keep)
return redis.call('GET', base .. ':since')
