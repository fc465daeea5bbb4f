-- extend: set a new expiry on every lock key, all or nothing: if any key is
-- no longer held by the lease, none is touched and every such key is named.
-- A key shared by several leases of one owner only ever gets a later
-- expiry, never an earlier one: the others count on theirs.
-- Every key is read before the first write, as for any call here: a key
-- of a slot this node no longer serves fails the call before anything is
-- written.
--
-- ARGV[1] holder, ARGV[2] lease token of a reentrant lease or ""
-- ARGV[3] ttl in milliseconds
-- ARGV[4..] the lock keys when the call covers a whole node; a call for one
-- slot passes ARGV[4] = "", ARGV[5] = n: the lock keys are KEYS[1..n] (the
-- KEYS after them, hold sets, are declared for Redis's migration rules).
--
-- Returns the 1-based positions of the keys that the lease did not hold
-- (empty: all extended).
local holder, lease, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local keys, first, last = lock_keys(4)

local lost = {}
for i = first, last do
  if not is_mine(keys[i], redis.call('GET', keys[i]), holder, lease) then
    lost[#lost + 1] = i - first + 1
  end
end
if #lost > 0 then
  return lost
end
for i = first, last do
  if lease == '' then
    redis.call('PEXPIRE', keys[i], ttl)
  else
    if redis.call('PTTL', keys[i]) < ttl then
      redis.call('PEXPIRE', keys[i], ttl)
    end
    local h = companion(keys[i], 'n')
    if redis.call('PTTL', h) < ttl then
      redis.call('PEXPIRE', h, ttl)
    end
  end
end
return lost
