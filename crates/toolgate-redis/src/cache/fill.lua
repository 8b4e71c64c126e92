-- Stores a cached result (with its TTL) and gives back this replica's fill claim, if it
-- holds one, in one step: waiting replicas see the value before the claim disappears.
--
-- KEYS[1]  the entry
-- KEYS[2]  the entry's fill lock
-- ARGV[1]  this replica's id
-- ARGV[2]  the value, or '' to store nothing (only give the claim back)
-- ARGV[3]  the TTL in ms

if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
return 1
