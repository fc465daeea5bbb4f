-- Reentrant holds (from package reentrant; prepended to the batch scripts
-- after common.lua).
--
-- All leases of one owner write the same holder (the owner token) into a
-- lock key P{T}:K, and each of them joins the key's hold set, a hash in the
-- same slot: P{T}#n:K, one field per lease token. The count of holds is the
-- size of the set; the key is free when the last lease leaves it. Joining
-- and leaving are idempotent (HSET, HDEL of one's own field), so a retried
-- call never counts twice.

-- hold_key returns the hold set of lock key P{T}:K: P{T}#n:K.
local function hold_key(k)
  local b = string.find(k, '}', 1, true)
  return string.sub(k, 1, b) .. '#n' .. string.sub(k, b + 1)
end

-- is_mine reports whether lock key k, whose value is v, is held by the
-- lease: the holder matches and, for a reentrant lease, the lease is in the
-- key's hold set. A plain lease also owns a key reserved for it (its
-- holder is its lease token, the waiter a reservation names): a waiter by
-- reservation granted directly holds its keys in reserved form until its
-- first renewal converts them (docs/proposals/direct-grant.md 3.2), and
-- release, extend and guard must take them as its own. Only the owner's
-- scripts write over a value naming it, so a reservation for the lease is
-- as much the lease's as its held value. The equality comes first: a
-- plain held key answers at once, and only a value that is not the token
-- pays the pattern search and the reservation's parse.
local function is_mine(k, v, holder, lease)
  if not v then
    return false
  end
  if v ~= holder and holder_of(v) ~= holder then
    return lease == '' and reserved_for(v) == holder
  end
  return lease == '' or redis.call('HEXISTS', hold_key(k), lease) == 1
end
