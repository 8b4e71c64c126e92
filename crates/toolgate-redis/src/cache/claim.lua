-- A cache read that claims the fill on a miss, so that one replica runs the tool and the
-- others wait for its result.
--
-- The fill lock's key hashes to the entry's slot (its hash tag is the entry's key), so
-- this script works on Redis Cluster.
--
-- KEYS[1]  the entry
-- KEYS[2]  the entry's fill lock
-- ARGV[1]  this replica's id
-- ARGV[2]  how long the claim holds, in ms
-- returns  {1, value} on a hit; {2, ''} on a miss this replica fills (it just claimed it,
--          or already held the claim); {3, ''} on a miss another replica is filling

local value = redis.call('GET', KEYS[1])
if value then
  return {1, value}
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {2, ''}
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  return {2, ''}
end
return {3, ''}
