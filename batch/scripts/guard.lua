-- guard: run one Redis command on the user's keys only while the lease
-- holds its lock keys in the same slot: the check and the command run in
-- one script, so no other holder can come between them (the compare of a
-- compare-and-set transaction, as etcd's Mutex.IsOwner gives).
--
-- ARGV[1] holder, ARGV[2] lease token of a reentrant lease or ""
-- ARGV[3] n: KEYS[1..n] are the lease's lock keys in this slot; the rest
--         of KEYS are the user's keys the command touches and, for a
--         reentrant lease, the hold sets (declared for Redis's migration
--         rules)
-- ARGV[4..] the command and its arguments
--
-- Returns the command's reply, or an error reply starting "SLOTLOCK_LOST"
-- followed by the 1-based positions of the lock keys no longer held.
local holder, lease, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local lost = {}
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  local mine = is_mine(KEYS[i], v, holder, lease)
  if not mine then
    lost[#lost + 1] = tostring(i)
  end
end
if #lost > 0 then
  return redis.error_reply('SLOTLOCK_LOST ' .. table.concat(lost, ' '))
end
return redis.call(unpack(ARGV, 4))
