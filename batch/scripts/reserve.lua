-- reserve: wait by reservation (docs/design.md, "Waiting by reservation
-- across processes", which also states the seq and the guard). A waiting
-- acquisition holds no lock key: it reserves every key it can, and stands
-- in the queue of every other one. Nothing here grants anything: when its
-- evidence (internal/protocol/evidence.go) says every key is reserved for
-- it, the waiter sends its confirm (acquire.lua mode 'c'), all or nothing.
--
-- ARGV[1] the waiter (its lease token, the holder of a plain lease); for a
--         reentrant lease followed by a space and its owner token
-- ARGV[2] its ticket: server time in microseconds, decimal, the same in
--         every call of one acquisition (its age: smaller is older)
-- ARGV[3] its inbox: the sharded channel its Locker listens on, in a slot
--         of this node
-- ARGV[4] mode and seq: 'r:<seq>' reserve (or wait in line for) every key,
--         's:<seq>' the same for keys wanted shared, 'p:<seq>' for
--         permits, 'P:<seq>' leave the lines of permits, or 'l:<seq>'
--         leave: give back every key reserved for or held by the waiter
--         and leave every queue. seq numbers the acquisition's reserve and
--         leave calls (1, 2, ...; one seq for a round's calls to different
--         nodes); reservations and queue entries name the call that wrote
--         them, so that the waiter can tell what a reply or a hand-off
--         message speaks of.
-- ARGV[5..] the lock keys when the call covers a whole node; a call for
--         one slot passes ARGV[5] = "", ARGV[6] = n: the lock keys are
--         KEYS[1..n], followed by their queue keys (declared for Redis's
--         migration rules). Permits: the entries of request_entries
--         (shared.lua), each permit hash with its units and limit.
--
-- The guard (every mode): a key reserved for the waiter by a later call
-- is left alone with its queue (code -1), whatever this late call says.
--
-- Mode 'r', per key (a key the owner of a reentrant waiter holds
-- exclusively is left as it is, and so is its queue but for the waiter's
-- own entries, unless the waiter wants it shared: there is no downgrade):
--   free, reserved for the waiter (and not guarded), or held by it (its
--   first attempt's bare SET, or a confirm that failed on another node):
--   handed to the oldest waiter (hand_off) if one older than this one is
--   live in the key's queue (round 1 does not look), the waiter standing
--   in it under a new entry; else this waiter's reservation for
--   RESERVE_MS, naming this call, marked when others wait.
--   held by another, or reserved for another: the waiter stands in the
--   key's queue by its ticket (join) and marks the value; if the key is
--   reserved for a younger waiter by reservation, that waiter is asked to
--   yield it ('y <key> <waiter>' on its inbox): its next call hands the
--   key to the oldest waiter (rule Y, cooperative wound-wait).
--   mode 's' (a reader), held shared by others: the key counts as the
--   waiter's (code 0, nothing written) unless a live writer older than
--   it stands in the key's queue (writer_before); then it stands in line,
--   its entry marked as a reader's (READER).
-- A waiter never writes over a value naming another owner.
--
-- Returns {seconds, microseconds, code1, ...}: the server's TIME, then per
-- key (batch/reserve.go reads them into protocol.KeyReply):
--    0  mode 'r': the key is the waiter's reservation now, written by this
--       call, or its owner's (untouched); mode 's' also: held shared,
--       with no writer before it; mode 'l': the key was left
--    e  (>= 1, mode 'r') the waiter stands in the key's queue under the
--       entry created by its call e (this call's seq when it created it)
--   -1  guarded: the key is the waiter's reservation with a seq above this
--       call's; nothing was written for it
local waiter, owner = string.match(ARGV[1], '^(%S+) ?(%S*)$')
local ticket, inbox = ARGV[2], ARGV[3]
local mode, seq = string.match(ARGV[4], '^([rlspP]):(%d+)$')
seq = tonumber(seq)
if not seq or seq < 1 or #ARGV[4] > 17 then
  return redis.error_reply('ERR slotlock reserve: mode ' .. ARGV[4])
end
local reader = mode == 's'
if reader then
  mode = 'r'
end
local permits = mode == 'p' or mode == 'P'
local keys, first, last, units, limits, _
if permits then
  keys, first, last, _, units, limits = request_entries(4, true)
else
  keys, first, last = lock_keys(5)
end
local sq = string.format('%d', seq)

-- ours reports whether value v is the waiter's to change in this call:
-- held by it, or reserved for it with a seq not above this call's (an
-- older version's reservation, seq 0, included); and, as its second
-- result, whether v is the waiter's reservation of a later call (the
-- guard).
local function ours(v)
  if not v then
    return false, false
  end
  if v == waiter or holder_of(v) == waiter then
    return true, false
  end
  local t, w, s = res_parse(v)
  if t then
    if w ~= waiter then
      return false, false
    end
    return s <= seq, s > seq
  end
  return reserved_for(v) == waiter, false
end

-- Read every key, and the queue of every key whose queue this call may
-- write, before the first write; but round 1 reserves a free key as it
-- reads it (SET NX GET) and reads no line of it: the waiter has no entry
-- there yet, and an older waiter in that line (after a lapse, an expiry,
-- a script-free release) asks for the key at its next round (rule Y), as
-- when a younger waiter reserved it before it joined. A refusal in round
-- 1 (a key or line of a moving slot: pcall) deletes what it reserved: an
-- error reply means nothing was written. An unmarked key of the waiter's
-- own has no queue to read (a key with waiters in line is marked).
local now, t = now_ms()
local vals, lined, held = {}, {}, {}
local resv = '^' .. ticket .. ':' .. waiter .. '/' .. sq .. ':' .. inbox
local take, taken = mode == 'r' and seq == 1, {}
for i = first, last do
  if permits then
    -- A permit: its holders (a limit other than the live holders' is
    -- refused before any write, as shared_acquire.lua does) and its line.
    local r = read_holders(keys[i], waiter, now)
    if mode == 'p' and r.limit and r.limit ~= limits[i] and r.first then
      return redis.error_reply('SLOTLOCK_LIMIT ' .. (i - first + 1) .. ' ' .. string.format('%d', r.limit))
    end
    held[i] = r
    lined[i] = read_queue(keys[i])
  else
    local v, e
    if take then
      v = redis.pcall('SET', keys[i], resv, 'NX', 'GET', 'PX', RESERVE_MS)
      taken[i] = not v or nil
    else
      v = redis.call('GET', keys[i])
    end
    vals[i] = v or false
    if type(v) == 'table' then
      e = v
    elseif mode == 'l' or (not v and seq > 1) or (v and (string.byte(v, -1) == 33 or
        (reserved_for(v) ~= waiter and v ~= waiter and holder_of(v) ~= waiter))) then
      e = take and redis.pcall('PTTL', queue_key(keys[i])) or read_queue(keys[i])
      lined[i] = e ~= -2 and e
    end
    if type(e) == 'table' then
      for j in pairs(taken) do
        redis.call('DEL', keys[j])
      end
      return e
    end
  end
end
local out = {tonumber(t[1]), tonumber(t[2])}

-- leave_mine takes the waiter's entries (under any inbox: own_entries)
-- out of lock key k's queue and returns whether others remain, and
-- whether it took a writer's entry. This call's own ZREMs may have
-- deleted the queue since it was read: pcall (rule M), a refusal meaning
-- empty.
local function leave_mine(k)
  local q = queue_key(k)
  local mine = redis.pcall('ZRANGE', q, ticket, ticket, 'BYSCORE')
  if mine.err then
    return false, false
  end
  local writer = false
  for _, m in ipairs(mine) do
    if entry_of(m, waiter) then
      redis.call('ZREM', q, m)
      local _, reader = live_entry(m, now)
      writer = writer or not reader
    end
  end
  local n = redis.pcall('ZCARD', q)
  return type(n) == 'number' and n > 0, writer
end

-- join puts the waiter in lock key k's queue by its ticket, marks k's
-- value v, and returns the seq of the call that created its entry. Its
-- entry under this inbox is kept (seq, score) unless fresh is set (the
-- call gives k away: its reply must name an entry above any evidence the
-- waiter holds for k); other entries of its own go (round 1 has none). A
-- kept entry is written again (deadline now + ENTRY_MS) once less than
-- half of ENTRY_MS is left. The queue outlives every deadline in it: a
-- write that finds less than ENTRY_MS left (ttl, the read phase's PTTL;
-- nothing removed it since) gives it 2 * ENTRY_MS. New before stale go
-- (rule M: never empty between).
local function join(k, v, fresh, ttl)
  local q = queue_key(k)
  local kept, e, stale = nil, seq, {}
  local own = seq > 1 and redis.call('ZRANGE', q, ticket, ticket, 'BYSCORE') or {}
  for _, m in ipairs(own) do
    if entry_of(m, waiter) then
      local _, ms, min, _, d = entry_parse(m)
      if not fresh and not kept and ms > 0 and min == inbox and d then
        kept, e = m, ms
        if d < now + ENTRY_MS / 2 then
          stale[#stale + 1], kept = m, nil
        end
      else
        stale[#stale + 1] = m
      end
    end
  end
  if not kept then
    local m = waiter .. '/' .. string.format('%d', e) .. ' ' .. inbox .. (reader and READER or '')
    redis.call('ZADD', q, ticket, m .. ' ' .. string.format('%d', now + ENTRY_MS))
    if not ttl or ttl < ENTRY_MS then -- -1: none
      redis.call('PEXPIRE', q, 2 * ENTRY_MS)
    end
  end
  if #stale > 0 then
    redis.call('ZREM', q, unpack(stale))
  end
  if v and string.byte(v, -1) ~= 33 then -- '!': its release hands k on
    redis.call('SET', k, v .. '!', 'KEEPTTL')
  end
  return e
end

-- older_waits reports whether lock key k's queue has a live entry older
-- than this waiter.
local function older_waits(k)
  local live = drop_dead(k, now, 0)
  local head, score = live[1], live[2]
  if not head or entry_of(head, waiter) then
    return false
  end
  return older(score, (entry_parse(head)), ticket, waiter)
end

-- Permits (modes 'p' and 'P'). A permit has no reservation: a waiter
-- stands in its line, first come first served by ticket, and the units
-- count as its own (code 0) while no live waiter older than it stands
-- there and they fit; it keeps its entry, so that newcomers queue behind
-- it. Its confirm checks both again. A leave wakes the line's head: the
-- units it waited for may fit the next one.
if permits then
  for i = first, last do
    local k, code = keys[i], 0
    if mode == 'P' then
      if lined[i] and leave_mine(k) then
        wake(k, now, false)
      end
    elseif not held[i].mine then
      code = join(k, false, false, lined[i])
      if held[i].used + units[i] <= limits[i] then
        drop_dead(k, now, 0)
        if not writer_before(k, ticket, now, true) then
          code = 0
        end
      end
    end
    out[#out + 1] = code
  end
  return out
end

for i = first, last do
  local k, v = keys[i], vals[i]
  local code = 0
  local mine, guarded = ours(v)
  if taken[i] then -- reserved as it was read
  elseif guarded then
    code = -1
  elseif mode == 'l' then
    local more, writer = false, false
    if lined[i] then
      more, writer = leave_mine(k)
    end
    if more and writer and v and string.byte(v, 1) == 126 then
      -- Held shared: readers behind a writer that leaves may join now.
      wake(k, now, true)
    end
    if mine then
      if string.byte(v, -1) == 33 then -- '!'
        hand_off(k, now)
      else
        redis.call('DEL', k)
      end
    end
  elseif owner ~= '' and not reader and v and holder_of(v) == owner then
    -- Its owner holds it through another lease: the confirm takes it as
    -- the owner's (a reentrant grant), so it is the waiter's, untouched.
    -- Not for a reader: a shared hold is never taken beside an exclusive
    -- one (no downgrade), so it waits in line for the owner's release.
    if lined[i] then
      leave_mine(k)
    end
  elseif reader and v and string.byte(v, 1) == 126 then -- '~': held shared
    -- A reader may join the holders unless a writer older than it waits
    -- (writer_before): then it stands in line. Nothing is written for it
    -- (others may join too); its confirm checks the same again.
    if lined[i] and writer_before(k, ticket, now) then
      code = join(k, v, false, lined[i])
    elseif lined[i] then
      leave_mine(k)
    end
  elseif not v or mine then
    if lined[i] and older_waits(k) then
      -- An older waiter stands in line (a reservation lapsed, a
      -- script-free release): the key is its. The waiter joins before
      -- the hand-off pops the head, so that the line stays (rule M) and
      -- the hand-off writes the key marked.
      code = join(k, false, true, lined[i])
      hand_off(k, now)
    else
      local mark = ''
      if lined[i] and leave_mine(k) then
        mark = '!'
      end
      redis.call('SET', k, resv .. mark, 'PX', RESERVE_MS)
    end
  else
    code = join(k, v, false, lined[i])
    local ot, ow, _, oin = res_parse(v)
    if ot and older(ticket, waiter, ot, ow) then
      publish(oin, 'y ' .. k .. ' ' .. ow)
    end
  end
  out[#out + 1] = code
end
return out
