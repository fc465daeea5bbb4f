#!lua flags=allow-cross-slot-keys
-- release_node: the smallest owner-checked release of many keys of one
-- node in one call, the checked-pipeline contender's: read every key, then
-- delete those that still hold the caller's token (every read before the
-- first write, as slotlock's release, for Redis's migration rules). The
-- flag lets the keys of several slots of the node go in one call; KEYS[1]
-- only routes it. Without a compare-and-delete command (Redis 7.0), two
-- commands per key is the least an owner check costs.
--
-- ARGV[1] the owner token, ARGV[2..] the lock keys.
-- Returns how many keys were not the caller's.
local token = ARGV[1]
local ours = {}
local lost = 0
for i = 2, #ARGV do
  if redis.call('GET', ARGV[i]) == token then
    ours[#ours + 1] = ARGV[i]
  else
    lost = lost + 1
  end
end
for _, k in ipairs(ours) do
  redis.call('DEL', k)
end
return lost
