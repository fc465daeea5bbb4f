-- acquire: take lock keys all or nothing, so that a failure (a conflict,
-- or a key of a slot this node no longer serves, which raises an error on
-- first touch) leaves nothing written: the general path checks every key
-- before writing any; the fast path for plain leases writes as it checks
-- and deletes what it wrote before it returns otherwise.
--
-- ARGV[1] holder: the lease token, or the owner token of a reentrant lease
-- ARGV[2] lease token of a reentrant lease, "" otherwise
-- ARGV[3] ttl in milliseconds (server-side expiry; no client clock here)
-- ARGV[4] mode: 'a' all or nothing, reporting up to 64 conflicts, or 'w'
--         take the keys before the first conflict (a waiter's canonical
--         prefix; the conflicting key is left as it is: a waiter by
--         reservation marks it when it joins its line), or 'c'
--         (confirm) as 'a' for an acquisition that waited by
--         reservation (reserve.lua): no fast path, keys reserved for it
--         count as free and keep their mark, and of a free key (a lapsed
--         reservation) it reads the queue, leaves the waiter's own
--         entries there and marks the grant when others wait;
--         followed by 'f' when grants take fencing tokens, and in mode 'c'
--         by ':' and the waiter's ticket (reserve.lua's ARGV[2]: its
--         entries in a queue are 'token/seq inbox', scored by the ticket)
-- ARGV[5..] the lock keys in canonical order (slot, then bytes), when the
--         call covers a whole node (KEYS[1] then only routes the call).
--         A call for one slot passes ARGV[5] = "" and ARGV[6] = n instead:
--         the lock keys are KEYS[1..n], and the KEYS after them (the slot's
--         fence counter, the hold sets) are declared only so that Redis
--         applies its migration rules (TRYAGAIN while a slot's keys are
--         split between two nodes) to every key the script touches.
--
-- A key already held by the holder counts as taken: a retry of the same
-- lease, or another lease of the same owner (then the lease joins the
-- key's hold set). Expiry only ever moves later for such a key.
-- A key reserved for this acquisition (a release handed it over: value
-- '^' .. waiter, where the waiter is the lease token) counts as free: it
-- is taken as a new grant, marked if others still wait in its queue. Any
-- other reservation is a conflict, in every mode.
--
-- Returns {granted, nconflicts, i1, pttl1, ..., fence1, ..., fence_granted}:
-- the first `granted` keys are held; each i is the 1-based position of a key
-- held by someone else, negated when the key is reserved for a waiter, with
-- its remaining time in ms (-1: no expiry); the
-- fences (with 'f') are the fencing tokens of the granted keys, in order.
local holder, lease, ttl, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local keys, first, last = lock_keys(5)
local m1 = string.sub(mode, 1, 1)
local wait = m1 == 'w'
local queued = m1 == 'c'
local fencing = string.find(mode, 'f', 1, true) ~= nil
local ticket = m1 == 'c' and string.match(mode, ':(%d+)$') or nil

-- The common case first: a plain lease (no fencing token to draw, no hold
-- set to join) whose keys are all free. Each key is taken with one call,
-- SET NX, where the general path below reads every key and then
-- writes each (two calls per key; a call from a script costs about a
-- microsecond of server time whatever it does). At the first key that is
-- not free, the keys this loop set are deleted again and the general path
-- decides as if nothing had been written; at the first key that fails (a
-- slot this node no longer serves, a migrating slot, a wrong type: caught
-- by pcall, so that the undo still runs), they are deleted and the error
-- returned. The script runs alone, so no client ever sees those keys, and
-- the engine's rule holds: an error reply means nothing was written.
if lease == '' and not fencing and not queued then
  local r = take_free(keys, first, last, holder, ARGV[3])
  if r then
    return r
  end
end

local waiter = lease ~= '' and lease or holder
local conflicts = {}
local stop = last + 1 -- first key not taken
local vals = {}
local handed = {} -- keys whose queue this acquisition reads and leaves
local keep = {}   -- keys reserved for it whose mark its grant keeps
local own = {}    -- mode 'c': per key in handed, the waiter's entries there
local others = {} -- mode 'c': per key in handed, whether anyone else is in line

for i = first, last do
  local v = redis.pcall('GET', keys[i])
  if type(v) == 'table' and v.err then
    -- Nothing is written yet. A value of another type, written by hand:
    -- name the key (Redis's WRONGTYPE does not). Any other error (a key
    -- of a slot this node no longer serves) goes back as it came, for
    -- the engine to read.
    if string.find(v.err, 'WRONGTYPE', 1, true) == 1 then
      return redis.error_reply(v.err .. ' (lock key ' .. keys[i] .. ')')
    end
    return v
  end
  if v and reserved_for(v) == waiter then
    -- No entry of the waiter's is in the queue of a key reserved for it
    -- (the hand-off popped it, or reserve.lua left the queue): whether
    -- others wait is the value's mark (I-mark: every join marks it),
    -- which the grant keeps.
    keep[i] = string.byte(v, -1) == 33 -- '!'
    v = nil
  elseif m1 == 'c' and not v then
    -- A free key (a reservation lapsed, a script-free release) may still
    -- list waiters: the grant leaves the waiter's own entries (one left
    -- behind would be handed the key at the grant's release) and is
    -- marked when others remain.
    handed[i] = read_queue(keys[i])
    if handed[i] then
      own[i], others[i] = own_entries(keys[i], waiter, ticket)
    end
  end
  if v and v ~= holder and holder_of(v) ~= holder then
    if stop > last then
      stop = i
    end
    conflicts[#conflicts + 1] = reserved_for(v) and first - i - 1 or i - first + 1
    conflicts[#conflicts + 1] = redis.call('PTTL', keys[i])
    if wait or #conflicts >= 128 then
      break
    end
  end
  vals[i] = v or false
end

local out = conflict_reply(conflicts)
if not wait and stop <= last then
  return out
end

-- Draw every slot's fencing token before the first write (fence.lua): a
-- refused draw returns an error with nothing written.
local fences, stored = {}, {}
if fencing then
  local epoch, err = fence_epoch()
  if not epoch then
    return err
  end
  for i = first, stop - 1 do
    local fk = slot_key(keys[i], '#fence')
    if not vals[i] and not fences[fk] then
      local f, ferr = fence_draw(fk, epoch)
      if not f then
        return ferr
      end
      fences[fk] = f
    end
  end
end

for i = first, stop - 1 do
  local k, v = keys[i], vals[i]
  local f = 0
  if not v then
    local val = holder
    if fencing then
      -- One token per slot and grant: every grant of a key takes a
      -- number above every earlier grant in its slot.
      local fk = slot_key(k, '#fence')
      f = fences[fk]
      if not stored[fk] then
        fence_store(fk, f)
        stored[fk] = true
      end
      val = holder .. '.' .. string.format('%d', f) -- tostring would print large tokens in exponent form
    end
    local mark = keep[i]
    if handed[i] then
      leave_own(k, own[i])
      mark = others[i]
    end
    if mark then
      val = val .. '!' -- others still wait: its release hands it on
    end
    redis.call('SET', k, val, 'PX', ttl)
    if lease ~= '' then
      local h = companion(k, 'n')
      redis.call('DEL', h) -- members left by a lock that was deleted by hand
      redis.call('HSET', h, lease, 1)
      redis.call('PEXPIRE', h, ttl)
    end
  else
    f = fence_of(v)
    local left = redis.call('PTTL', k)
    if left >= 0 and left < ttl then
      redis.call('PEXPIRE', k, ttl)
    end
    if lease ~= '' then
      local h = companion(k, 'n')
      redis.call('HSET', h, lease, 1)
      local hl = redis.call('PTTL', h)
      if hl < ttl then
        redis.call('PEXPIRE', h, math.max(ttl, left))
      end
    end
  end
  if fencing then
    out[#out + 1] = f
  end
end
out[1] = stop - first
return out
