-- Reentrant holds (from package reentrant; prepended to the batch scripts
-- after common.lua).
--
-- All leases of one owner write the same holder (the owner token) into a
-- lock key P{T}:K, and each of them joins the key's hold set, a hash in the
-- same slot: P{T}#n:K, one field per lease token. The count of holds is the
-- size of the set; the key is free when the last lease leaves it. Joining
-- and leaving are idempotent (HSET, HDEL of one's own field), so a retried
-- call never counts twice.

-- is_mine reports whether lock key k, whose value is v, is held by the
-- lease: the holder matches and, for a reentrant lease, the lease is in the
-- key's hold set. A key reserved for a waiter is nobody's lease, even one
-- naming the lease's token: a lease holds its keys from its grant. The
-- equality comes first: a plain held key answers without the pattern
-- search.
local function is_mine(k, v, holder, lease)
  if not v or (v ~= holder and holder_of(v) ~= holder) then
    return false
  end
  return lease == '' or redis.call('HEXISTS', companion(k, 'n'), lease) == 1
end
