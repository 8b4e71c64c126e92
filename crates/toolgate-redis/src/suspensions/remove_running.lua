-- Removes the running record that the decision with the token ARGV[3] kept for the call
-- ARGV[2], if it is still what is kept: remove_running() in outcome.lua.
--
-- KEYS[1]  <base>:outcomes
-- ARGV     base, id, token
-- returns  'removed' | 'no'

return remove_running(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
