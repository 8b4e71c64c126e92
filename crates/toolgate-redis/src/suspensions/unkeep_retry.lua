-- Undoes the keep of an approval for a retry whose answer was lost on the way (the
-- replica gave up at its deadline, and put the call back to wait): the approver was told
-- the approval failed, and the call must not run twice — once by this approval, and once
-- more when the call waiting again is approved. Recognised by its approval id, so nothing
-- another replica kept is undone.
--
-- KEYS[1]  <base>:retries
-- ARGV     base, approval id, the caller (as in save.lua), binding key
-- returns  'undone' | 'no' (not there: never kept, not yet kept, used or expired)

local base, approval = ARGV[1], ARGV[2]
local row = base .. ':retry:' .. approval
if redis.call('EXISTS', row) == 0 then
  return 'no'
end
redis.call('DEL', row)
redis.call('ZREM', KEYS[1], approval)
redis.call('ZREM', base .. ':retry_user:' .. ARGV[3], approval)
redis.call('ZREM', base .. ':retry_key:' .. ARGV[4], approval)
return 'undone'
