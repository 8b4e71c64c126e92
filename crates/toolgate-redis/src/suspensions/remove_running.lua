-- Removes the running record that the decision with the token ARGV[3] kept for the call
-- ARGV[2] (keep_outcome.lua with a token), if it is still what is kept: its mark in
-- `:outcome_run:<id>` names that token and the SHA-1 of the row as it is now. Anything
-- else — an outcome kept over the record, another decision's record — is left.
--
-- KEYS[1]  <base>:outcomes
-- ARGV     base, id, token
-- returns  'removed' | 'no'

local base, id, token = ARGV[1], ARGV[2], ARGV[3]
local row = base .. ':outcome:' .. id
local run = base .. ':outcome_run:' .. id

local mark = redis.call('HMGET', run, 'token', 'digest', 'caller')
local value = redis.call('GET', row)
if not value or mark[1] ~= token or mark[2] ~= redis.sha1hex(value) then
  return 'no'
end
redis.call('DEL', row, run)
redis.call('ZREM', KEYS[1], id)
if mark[3] then
  redis.call('ZREM', base .. ':outcome_user:' .. mark[3], id)
end
return 'removed'
