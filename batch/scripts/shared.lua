-- Shared keys and counted permits (Locker.Acquire's request form): the
-- helpers of shared_acquire.lua, shared_release.lua and shared_extend.lua,
-- which follow common.lua. docs/design.md, "Shared keys and permits".
--
-- A shared key K keeps its lock key P{T}:K a string, so that every reader
-- of lock keys written before shared keys existed (the exclusive scripts,
-- the bare SET NX, the pipeline strategy, loss tracking) sees a key held
-- by someone else and nothing it cannot parse. '~' is not base64url: no
-- token, hence no holder, equals or starts with it.
--   one holder:   P{T}:K = SHARED .. token ['!'], the key's own PEXPIRE
--                 being that holder's expiry: a lone reader costs what an
--                 exclusive holder costs (one SET NX to take, a GET and a
--                 DEL to give back).
--   several:      P{T}:K = SHARED ['!'], and the holders in a sorted set
--                 beside it, P{T}#s:K: member = lease token, score = its
--                 expiry (ms, server time). Redis 7.0 has no per-member
--                 expiry, so these scripts compare scores with TIME; both
--                 keys get a PEXPIRE no earlier than every live holder's
--                 expiry, and a release brings it down to the latest
--                 remaining one. A crashed holder therefore keeps writers
--                 out until its own expiry at most. Every operation on it
--                 is O(log n): a hundred readers of one key cost each
--                 other little. The second holder to come turns the first
--                 form into the second; the key stays in it.
-- The mark '!' keeps its exclusive meaning: a waiter (exclusive, or shared
-- behind an exclusive one) is in the key's line, and the last shared
-- release hands the key to the line's head (hand_off). A new shared holder
-- is admitted to a marked key only when no live waiter stands before it in
-- the line: a waiting writer is not starved by a stream of readers.
--
-- A permit resource R is one hash in R's slot:
--   P{T}#p:R hash: lease token -> units ':' expiry (ms, server time),
--            and LIMIT_FIELD -> the limit its holders asked for
-- Expired holders count for nothing and are deleted on every acquisition,
-- release and renewal; the hash's PEXPIRE is no earlier than its latest
-- live holder's expiry.
--
-- The Go side of these names and formats is internal/lockval (Shared,
-- PermitLimit, ParsePermitHold) and slot.Namer (SharedKeyInSlot,
-- PermitKeyInSlot): change both together.
local SHARED = '~'
local LIMIT_FIELD = '#l'

-- request_entries reads the entries of a call after nhead arguments, the
-- last of which is the call's kind: 's' (shared keys) or 'p' (permits),
-- unless permits is set (reserve.lua, whose mode says it).
-- Node form: per entry the lock key, and for permits its units and limit.
-- Slot form: ARGV[nhead+1] = '', ARGV[nhead+2] = n, then for permits
-- units and limit per entry; the lock keys are KEYS[1..n]. It returns
-- keys, first, last (the entries are keys[first..last], as in
-- acquire.lua: no table per entry on the common path), whether they are
-- permits, and then their units and limits, indexed like keys.
local function request_entries(nhead, permits)
  permits = permits or ARGV[nhead] == 'p'
  local units, limits = {}, {}
  if ARGV[nhead + 1] == '' then
    local n = tonumber(ARGV[nhead + 2])
    if permits then
      for i = 1, n do
        local a = nhead + 2 * i + 1
        units[i], limits[i] = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
      end
    end
    return KEYS, 1, n, permits, units, limits
  end
  if not permits then
    return ARGV, nhead + 1, #ARGV, false, units, limits
  end
  local keys = {}
  for a = nhead + 1, #ARGV, 3 do
    local i = #keys + 1
    keys[i], units[i], limits[i] = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  end
  return keys, 1, #keys, true, units, limits
end

-- read_holders reads a permit's hash at server time now. It returns the
-- live holders' state: mine (my units, or nil), used (units of the
-- others), first and last (earliest and latest expiry of the others, nil
-- without others), dead (fields whose expiry passed) and limit.
local function read_holders(h, me, now)
  local all = redis.call('HGETALL', h)
  local r = {used = 0, dead = {}}
  for j = 1, #all, 2 do
    local f, v = all[j], all[j + 1]
    if f == LIMIT_FIELD then
      r.limit = tonumber(v)
    else
      local c = string.find(v, ':', 1, true)
      local units = c and tonumber(string.sub(v, 1, c - 1))
      local exp = c and tonumber(string.sub(v, c + 1))
      if not exp or exp <= now then
        r.dead[#r.dead + 1] = f
      elseif f == me then
        r.mine = units
      else
        r.used = r.used + units
        if not r.first or exp < r.first then
          r.first = exp
        end
        if not r.last or exp > r.last then
          r.last = exp
        end
      end
    end
  end
  return r
end

-- is_shared reports whether lock value v is a shared hold.
local function is_shared(v)
  return string.byte(v, 1) == 126 -- '~'
end

-- shared_holders says how lock key k, whose shared value is v, is held:
-- inline is the one holder's token in the one-holder form (nil in the set
-- form), and mine whether me holds it now (in the set form: a live score,
-- exp, as ZSCORE gave it in score; s is the holders set's name, built
-- once for the caller).
local function shared_holders(k, v, me, now)
  local tok = string.sub(holder_of(v), 2)
  if tok ~= '' then
    return {inline = tok, mine = tok == me}
  end
  local s = companion(k, 's')
  local score = redis.call('ZSCORE', s, me)
  local exp = tonumber(score or '0')
  return {mine = exp > now, exp = exp, score = score, s = s}
end

-- shared_latest returns the latest live expiry in holders set s of a
-- holder other than me (expired members, crashed holders', stay until the
-- set goes or a renewal prunes them: they count for nothing), nil when
-- there is none. O(log n). A release reads it before it writes: its ZREM
-- of the last member deletes the set (rule M; TestMigratingSlotLastReader).
local function shared_latest(s, now, me)
  local last = redis.call('ZRANGE', s, '+inf', '(' .. string.format('%d', now), 'BYSCORE', 'REV', 'LIMIT', 0, 2, 'WITHSCORES')
  if last[1] == me then
    return last[4] and tonumber(last[4])
  end
  return last[2] and tonumber(last[2])
end

-- shared_rest returns what a release of holder me needs to know of the
-- others, me's live score in holders set s being exp (score: as ZSCORE
-- wrote it): exp itself when another expires no earlier (nothing need
-- shorten), else shared_latest's answer; and the count of holders
-- expiring no earlier than me, me included, for shared_leave. The common
-- case costs one ZCOUNT, a microsecond less than shared_latest on 50
-- holders. Reads only, for shared_latest's reason.
local function shared_rest(s, now, me, exp, score)
  local n = redis.call('ZCOUNT', s, score, '+inf')
  if n > 1 then
    return exp, n
  end
  return shared_latest(s, now, me), n
end

-- A holders set of up to 128 members of up to 64 bytes is a listpack,
-- which ZADD, ZREM and ZSCORE scan: under 50 readers of one key a join
-- and a release cost about 2 us more than on a skiplist (O(log n)). A
-- member over 64 bytes makes the set a skiplist for as long as it lives,
-- so a release that finds SKIPLIST_AT holders expiring no earlier than
-- itself adds SKIPLIST_PAD and removes it with itself in one ZREM (no
-- client sees it; the set keeps a member). Small sets stay listpacks
-- (about 150 bytes for two holders, against 1,000). The pad is not
-- base64url: never a token.
local SKIPLIST_AT = 32
local SKIPLIST_PAD = string.rep('#', 65)

-- shared_leave takes me out of holders set s, of which n members
-- (shared_rest's count, read before the first write) expire no earlier
-- than me. The caller found another live holder: the set keeps a member.
local function shared_leave(s, me, n)
  if n == SKIPLIST_AT then
    redis.call('ZADD', s, '0', SKIPLIST_PAD)
    redis.call('ZREM', s, me, SKIPLIST_PAD)
    return
  end
  redis.call('ZREM', s, me)
end

-- later_expiry gives shared key k, or its holders set, at least ttl ms to
-- live: PEXPIRE GT moves an expiry later only, in one call. A key without
-- an expiry (a set just created beside a key an operator emptied) is
-- given one.
local function later_expiry(k, ttl)
  if redis.call('PEXPIRE', k, ttl, 'GT') == 0 and redis.call('PTTL', k) == -1 then
    redis.call('PEXPIRE', k, ttl)
  end
end

-- shared_cover makes shared key k and its holders set s live at least
-- until at (ms, server time), never shortening either, in two calls
-- (later_expiry on both takes four when the expiry does not move, the
-- common case under a stream of readers). The set's expiry is read (or
-- given as sexp, PEXPIRETIME's answer) for the case where it has none;
-- the lock key always has one, so PEXPIREAT GT alone keeps it.
local function shared_cover(k, s, at, sexp)
  local a = string.format('%d', at)
  if (sexp or redis.call('PEXPIRETIME', s)) < at then -- earlier, or none (-1, -2)
    redis.call('PEXPIREAT', s, a)
  end
  redis.call('PEXPIREAT', k, a, 'GT')
end

-- my_shared_hold says how me holds shared lock key k: 1 as its one
-- holder, 2 the same with a waiter's mark, a shared_holders table (with
-- marked) in the set form, false when not at all. now is read only when
-- needed (nil otherwise) and returned. The one-holder values, SHARED ..
-- me with or without the mark, are told by their length and a plain find
-- of me right after SHARED, without building them as strings.
local function my_shared_hold(k, me, now)
  local v = redis.call('GET', k)
  if not v or not is_shared(v) then
    return false, now
  end
  local extra = #v - #me -- 1: SHARED .. me, 2: SHARED .. me .. '!'
  if (extra == 1 or (extra == 2 and string.byte(v, -1) == 33)) and string.find(v, me, 2, true) == 2 then
    return extra, now
  end
  now = now or now_ms()
  local st = shared_holders(k, v, me, now)
  st.marked = string.byte(v, -1) == 33 -- '!'
  return st.mine and st, now
end

-- line_ahead reports whether a live waiter other than a reader (readers
-- pass readers) stands in lock key k's line: a newcomer's first attempt
-- does not pass it, nor wait behind it keeping any key (that waiter holds
-- nothing and may wait for the newcomer's keys: shared_acquire.lua
-- reports the key as reserved). Reads only.
local function line_ahead(k, now)
  for _, m in ipairs(redis.call('ZRANGE', queue_key(k), 0, -1)) do
    local live, reader = live_entry(m, now)
    if live and not reader then
      return true
    end
  end
  return false
end

-- prune deletes the fields of holders whose expiry passed.
local function prune(h, dead)
  if #dead > 0 then
    redis.call('HDEL', h, unpack(dead))
  end
end

-- WAKE_MAX bounds how many readers one call wakes.
local WAKE_MAX = 64

-- wake tells waiters at the head of lock key k's line (read before the
-- caller's first write) that what they wait for may be theirs now: a
-- hand-off naming the entry ('h <key> <token/seq>', as hand_off's), which
-- the waiter's evidence takes as the key being its own; its confirm
-- checks. With readers (a reader was granted the key shared, or a writer
-- left its line): the live readers up to the first live writer heard
-- (with last, only the WAKE_MAX-th entry, if a reader so reached). Else
-- (a permit): the oldest live waiter that hears it, passing over up to
-- DEAF_SCAN nobody heard, as hand_off does. Nothing else is written.
local function wake(k, now, readers, last)
  local q = queue_key(k)
  local head = redis.pcall('ZRANGE', q, 0, readers and WAKE_MAX - 1 or DEAF_SCAN)
  if head.err then
    return
  end
  for i, m in ipairs(head) do
    local _, _, inbox, reader, d = entry_parse(m)
    if not d or d > now then
      if readers and not reader then
        if heard(m) then
          return
        end
      elseif inbox and not (last and i < WAKE_MAX) then
        local n = publish(inbox, 'h ' .. k .. ' ' .. string.sub(m, 1, string.find(m, ' ', 1, true) - 1))
        if not readers then
          if n ~= 0 then
            return
          end
          redis.pcall('ZREM', q, m)
        end
      end
    end
  end
end
