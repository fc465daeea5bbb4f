-- Shared by every slotlock script (prepended to each body when the script
-- is loaded; there is no include in Redis scripting).
--
-- A lock key holds a string:  holder ['.' fence] ['!']
--   holder  the lease token, or for reentrant leases the owner token
--   fence   the fencing token of the grant, when fencing is on
--   '!'     a waiter's mark: release publishes on the key's channel
-- Reentrant leases also keep a hold set beside the lock key (package
-- reentrant, hold.lua, which follows this file in every script).
-- Tokens never contain '.', '!' or '#'. The Go side of this format is
-- internal/lockval (Holder, Fence, Marked): change both together.

-- holder_of returns the holder part of a lock value.
local function holder_of(v)
  local e = string.find(v, '[.!]')
  if e then
    return string.sub(v, 1, e - 1)
  end
  return v
end

-- fence_of returns the fencing token of a lock value, 0 when it has none.
local function fence_of(v)
  local d = string.find(v, '.', 1, true)
  if not d then
    return 0
  end
  local e = string.find(v, '!', d, true) or (#v + 1)
  return tonumber(string.sub(v, d + 1, e - 1)) or 0
end

-- slot_key returns the key named suffix in the lock key's slot: the lock
-- key is P{T}:K and its first '}' closes the slot tag (the prefix has no
-- braces), so P{T} .. suffix hashes where the lock key does.
local function slot_key(k, suffix)
  local b = string.find(k, '}', 1, true)
  return string.sub(k, 1, b) .. suffix
end
