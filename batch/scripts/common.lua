-- Shared by every slotlock script (prepended to each body when the script
-- is loaded; there is no include in Redis scripting).
--
-- A lock key holds a string, held, reserved or shared:
--   held      holder ['.' fence] ['!']
--   reserved  '^' waiter ['!']                        (an older version's hand-off)
--             '^' ticket ':' waiter ['/' seq] ':' inbox ['!']
--                                                     (a waiter by reservation)
--   shared    '~' [holder] ['!']                      (SHARED in shared.lua, the request form's)
--   holder  the lease token, or for reentrant leases the owner token
--   fence   the fencing token of the grant, when fencing is on
--   waiter  the acquisition the key is reserved for (its lease token)
--   ticket  that acquisition's age: server time in microseconds, decimal
--   seq     the call of that acquisition the reservation rests on: the
--           reserve call that wrote it, or the call that created the queue
--           entry a hand-off popped; decimal, 1 to 15 digits; absent
--           (seq 0) in a value written by an older version
--   inbox   the sharded channel its Locker listens on, on this node
--   '!'     a waiter's mark: the key's queue may hold waiters, and its
--           release hands the key on (hand_off)
-- Tokens are base64url: never '.', '!', '#', ':', ' ', '^' or '~'. So a
-- reserved value never equals or starts with a token: every check that
-- compares a value with a holder (SET NX, the pipeline strategy's
-- compare, is_mine in hold.lua) refuses a reservation, even one naming
-- the lease's own token (a lease holds its keys from its grant, never in
-- reserved form); and as an inbox ends with a token (its Locker id), a
-- trailing '!' is always the mark.
-- Reentrant leases also keep a hold set beside the lock key (package
-- reentrant, hold.lua, which follows this file in every script).
-- The Go side of this format is internal/lockval (Holder, Fence, Marked,
-- ParseReserved, QueueEntry): change both together.

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

-- publish sends a wake-up on a sharded channel through pcall: a script
-- that has written must not fail at its publish (no channel rights, a slot
-- this node no longer serves), and a lost message costs a waiter its
-- timer, never a lock. It returns how many clients of this node heard it,
-- or the error of a publish that failed, which says nothing of them.
local function publish(ch, msg)
  return redis.pcall('SPUBLISH', ch, msg)
end

-- Waiting across processes (docs/design.md, "Waiting by reservation
-- across processes"). A waiter that meets a held key joins the key's
-- queue, one sorted set in the key's slot, P{T}#q:K, which orders entries
-- by ticket (microseconds of server time), each 'token/seq inbox
-- deadline' (entry_parse): the deadline (server ms) is pushed on by a
-- later join of the same waiter, which replaces its entry. A release of
-- a marked key hands it to the oldest live waiter: the key becomes that
-- waiter's reservation for RESERVE_MS, which only that waiter takes, and
-- a message on its inbox wakes it. A live waiter renews its reservations
-- every third of RESERVE_MS (protocol.ReserveRefresh) and joins again at
-- least every 400 ms (protocol.QueuedRefresh): a dead one's lapse within
-- RESERVE_MS, its entries within ENTRY_MS (internal/lockval names both).
--
-- Rule M (docs/faults.md bug 11): in a slot MIGRATING away, Redis refuses
-- a command on a key missing here after the call's earlier writes, which
-- it keeps. So a script reads every key it may write before its first
-- write (a missing key then fails the call with nothing written), and a
-- key its own writes may have deleted since (a ZREM of a queue's last
-- entry, an HDEL of a set's last field) is touched only through pcall, a
-- refusal meaning the key is gone.
local RESERVE_MS = 500
local ENTRY_MS = 3000

-- companion returns lock key P{T}:K's key of kind c in its slot,
-- P{T}#c:K: c is q (its queue), n (its hold set, hold.lua) or s
-- (its holders, shared.lua); slot.Namer names the same keys.
local function companion(k, c)
  local b = string.find(k, '}', 1, true)
  return string.sub(k, 1, b) .. '#' .. c .. string.sub(k, b + 1)
end

-- queue_key returns the queue of lock key P{T}:K: P{T}#q:K
-- (slot.Namer.QueueKeyInSlot).
local function queue_key(k)
  return companion(k, 'q')
end

-- lock_keys decodes a call's lock keys, after n - 1 other arguments:
-- ARGV[n..] when the call covers a whole node, or KEYS[1..m] when it is
-- for one slot (ARGV[n] = '', ARGV[n + 1] = m). It returns keys, first
-- and last: the lock keys are keys[first..last].
local function lock_keys(n)
  if ARGV[n] == '' then
    return KEYS, 1, tonumber(ARGV[n + 1])
  end
  return ARGV, n, #ARGV
end

-- read_queue reads lock key k's queue before a script's first write
-- (rule M; a call for one slot declares it): false if it does not exist,
-- else its PTTL, which a join needs.
local function read_queue(k)
  local ttl = redis.call('PTTL', queue_key(k))
  return ttl ~= -2 and ttl
end

-- reserved_for returns the waiter a reserved value names (its token,
-- without the seq), nil for a held value.
local function reserved_for(v)
  if string.byte(v, 1) ~= 94 then -- '^'
    return nil
  end
  local c = string.find(v, ':', 2, true)
  if not c then
    return holder_of(string.sub(v, 2)) -- '^' waiter ['!']
  end
  local e = string.find(v, '[/:]', c + 1)
  return string.sub(v, c + 1, e - 1)
end

-- token_seq splits token ['/' seq] (a reservation's waiter, a queue
-- entry's head) into the token and the seq as a number: 0 when there is
-- none, nil when it is malformed (not 1 to 15 decimal digits, or zero;
-- lockval's parseSeq).
local function token_seq(s)
  local sl = string.find(s, '/', 1, true)
  if not sl then
    return s, 0
  end
  local d = string.sub(s, sl + 1)
  if not string.find(d, '^%d+$') or #d > 15 or tonumber(d) < 1 then
    return string.sub(s, 1, sl - 1), nil
  end
  return string.sub(s, 1, sl - 1), tonumber(d)
end

-- res_parse returns the ticket, waiter, seq (a number, 0 when the value
-- has none) and inbox of a reservation of a waiter by reservation ('^'
-- ticket ':' waiter ['/' seq] ':' inbox ['!']), nil for any other value
-- (a malformed seq included, as lockval.ParseReserved).
local function res_parse(v)
  if string.byte(v, 1) ~= 94 then -- '^'
    return nil
  end
  local c = string.find(v, ':', 2, true)
  if not c then
    return nil
  end
  local d = string.find(v, ':', c + 1, true)
  local e = #v
  if string.byte(v, -1) == 33 then -- '!'
    e = e - 1
  end
  local w, seq = token_seq(string.sub(v, c + 1, d - 1))
  if not seq then
    return nil
  end
  return string.sub(v, 2, c - 1), w, seq, string.sub(v, d + 1, e)
end

-- entry_of reports whether member m of a key's queue is an entry of the
-- waiter by reservation named waiter: 'waiter/seq inbox', or 'waiter
-- inbox' as an older version wrote it (lockval.QueueEntry). Tokens have
-- no '/' and no ' ', so no other token's entry starts so.
local function entry_of(m, waiter)
  local n = #waiter
  local b = string.byte(m, n + 1)
  return (b == 47 or b == 32) and string.sub(m, 1, n) == waiter -- '/' or ' '
end

-- entry_parse takes a queue member 'token/seq inbox [READER] deadline'
-- apart (lockval.QueueEntry): token, seq (0 if none or malformed), inbox
-- (nil for an older version's waiter in line), reader or not, deadline in
-- server ms (nil in an older version's entry: it lives as long as its
-- queue). An inbox's last word holds '{': a last word of digits is the
-- deadline.
local READER = '~'
local function entry_parse(m)
  local sp = string.find(m, ' ', 1, true)
  local token, seq = token_seq(sp and string.sub(m, 1, sp - 1) or m)
  if not sp then
    return token, seq or 0, nil, false, nil
  end
  local dp = string.find(m, ' %d+$', sp + 1)
  local inbox = string.sub(m, sp + 1, dp and dp - 1 or -1)
  local reader = string.byte(inbox, -1) == 126 -- READER
  if reader then
    inbox = string.sub(inbox, 1, -2)
  end
  return token, seq or 0, inbox, reader, dp and tonumber(string.sub(m, dp + 1))
end

-- live_entry reports whether queue entry m's deadline has not passed at
-- server ms now, and whether it is a reader's.
local function live_entry(m, now)
  local _, _, _, reader, d = entry_parse(m)
  return not d or d > now, reader
end

-- heard reports whether someone listens on the inbox of queue entry m (a
-- Locker listens on its inbox for as long as it lives): PUBSUB
-- SHARDNUMSUB counts the listeners on this node without a message. An
-- entry without an inbox, or a count Redis refuses, counts as heard.
local function heard(m)
  local _, _, inbox = entry_parse(m)
  if not inbox then
    return true
  end
  local r = redis.pcall('PUBSUB', 'SHARDNUMSUB', inbox)
  return r.err ~= nil or r[2] ~= 0
end

-- writer_before reports whether lock key k's queue holds a live entry
-- older than ticket (by score) other than a reader's (with any, any live
-- entry): one a reader (or a permit taker) must not pass. Live: its
-- deadline has not passed and its inbox is heard (a killed waiter blocks
-- nobody). Reads only, through pcall (rule M: then nobody is before it).
local function writer_before(k, ticket, now, any)
  local older = redis.pcall('ZRANGE', queue_key(k), '-inf', '(' .. ticket, 'BYSCORE')
  if older.err then
    return false
  end
  for _, m in ipairs(older) do
    local live, reader = live_entry(m, now)
    if live and (any or not reader) and heard(m) then
      return true
    end
  end
  return false
end

-- own_entries returns waiter's entries in lock key k's queue (under any
-- inbox it gave: after a reshard its inbox may be another channel),
-- found by its ticket, and whether the queue holds anyone else. The
-- confirms read it before their first write (rule M).
local function own_entries(k, waiter, ticket)
  local q = queue_key(k)
  local n = redis.call('ZCARD', q)
  local found = {}
  if n > 0 and ticket then
    for _, m in ipairs(redis.call('ZRANGE', q, ticket, ticket, 'BYSCORE')) do
      if entry_of(m, waiter) then
        found[#found + 1] = m
      end
    end
  end
  return found, n > #found
end

-- leave_own takes the entries own_entries found out of lock key k's queue.
local function leave_own(k, found)
  if #found > 0 then
    redis.call('ZREM', queue_key(k), unpack(found)) -- read before: q has them
  end
end

-- older reports whether ticket t1 of waiter w1 is older than ticket t2 of
-- waiter w2: tickets first (exact as numbers below 2^53: microseconds
-- since 1970 are about 1.8e15), the waiters' bytes break ties. The same
-- order as the queue's (score, then member, which starts with the waiter).
local function older(t1, w1, t2, w2)
  local a, b = tonumber(t1), tonumber(t2)
  if a ~= b then
    return a < b
  end
  return w1 < w2
end

-- now_ms returns the server's time in milliseconds, and its two TIME parts.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

-- read_line reads lock key k's queue from its head to its n + 1st live
-- entry (server ms now): {live = {member, score, ...}, dead = members
-- past their deadline, more = whether the queue may go on}. Reads only.
local function read_line(k, now, n)
  local q = queue_key(k)
  local live, dead, from, more, chunk = {}, {}, 0, true, n + 9
  while more and #live < 2 * (n + 1) do
    local c = redis.call('ZRANGE', q, from, from + chunk - 1, 'WITHSCORES')
    more = #c == 2 * chunk
    for j = 1, #c, 2 do
      if #live == 2 * (n + 1) then
        more = true
        break
      elseif live_entry(c[j], now) then
        live[#live + 1], live[#live + 2] = c[j], c[j + 1]
      else
        dead[#dead + 1] = c[j]
      end
    end
    from = from + chunk
  end
  return {live = live, dead = dead, more = more}
end

-- drop_dead removes the dead entries read_line found (line, or read
-- here) and returns its live and more; dead ones further back wait to
-- reach the head. Rule M: read first; live entries keep the queue.
local function drop_dead(k, now, n, line)
  line = line or read_line(k, now, n)
  local dead = line.dead
  for i = 1, #dead, 1000 do -- unpack's stack limit is about 8,000
    redis.pcall('ZREM', queue_key(k), unpack(dead, i, math.min(i + 999, #dead)))
  end
  return line.live, line.more
end

-- hand_off gives lock key k, which its owner's script has just given up
-- (or which is free), to the oldest live waiter in its queue who can
-- still hear of it, or deletes it when there is none. Only the owner's
-- own script calls it on a key that has an owner: no script writes over
-- a value naming someone else. The waiter is handed a reservation naming
-- its ticket, token/seq and inbox, then woken on its inbox by a message
-- naming token/seq: the seq of the call that created the entry, copied
-- unchanged, so that it can tell this hand-off from one of an older entry
-- of its own (rule F, internal/protocol/evidence.go). now is the server's
-- time in ms, nil to read it here; line is hand_off_line's read of k's
-- queue before the caller's first write (rule M), nil to read it here.
--
-- SPUBLISH answers how many clients of this node heard the message. When
-- nobody did, the waiter is gone (or reconnecting: it joins again at its
-- next refresh under its old ticket), and the same call rewrites the key
-- for the next one, instead of keeping it RESERVE_MS for a waiter that
-- will not come: each message follows the write it announces. A publish
-- that fails says nothing; the waiter keeps the key, as when a message
-- is lost. At most DEAF_SCAN are passed over per call. An entry without
-- an inbox (an older version's waiter in line) is passed over.
--
-- Rule M: drop_dead reads the first DEAF_SCAN + 2 live entries before
-- any write (every waiter it may hand the key to and, when others wait,
-- the one after them), and each entry goes while the ones read after it
-- still keep the queue.
local DEAF_SCAN = 4
local function hand_off(k, now, line)
  local q = queue_key(k)
  local live, full = drop_dead(k, now or now_ms(), DEAF_SCAN + 1, line)
  local n = #live / 2
  for c = 1, n do
    local head, score = live[2 * c - 1], live[2 * c]
    redis.call('ZREM', q, head) -- a live entry: q has it
    local _, _, inbox = entry_parse(head)
    if inbox then
      local waiter = string.sub(head, 1, string.find(head, ' ', 1, true) - 1)
      redis.call('SET', k, '^' .. string.format('%d', tonumber(score)) .. ':' .. waiter .. ':' .. inbox ..
        ((c < n or full) and '!' or ''), 'PX', RESERVE_MS)
      if publish(inbox, 'h ' .. k .. ' ' .. waiter) ~= 0 or c > DEAF_SCAN then -- lockval.HandOff
        return
      end
    end
  end
  -- Nobody (left) in line: the order was read to its end.
  redis.call('DEL', k)
end

-- hand_off_line reads what hand_off(k, now) reads of k's queue.
local function hand_off_line(k, now)
  return read_line(k, now, DEAF_SCAN + 1)
end

-- take_free is the acquire scripts' fast path: it takes keys[first..last]
-- with one SET NX PX each, writing val (px: the string it came as). It
-- returns the script's reply when every key was free ({n, 0}) or when a
-- SET failed (the error, caught by pcall so that the undo runs), and nil
-- at the first key that was not free. Either way but the first, the keys
-- it set are deleted again (the script runs alone: no client sees them),
-- and the caller's general path decides as if nothing had been written.
-- With old, each SET is SET NX GET, and a nil answer comes with the index
-- and value of the key that was not free, which need not be read again.
local function take_free(keys, first, last, val, px, old)
  for i = first, last do
    local r, taken
    if old then
      r = redis.pcall('SET', keys[i], val, 'NX', 'GET', 'PX', px)
      taken = r == false -- nil: there was no value, and it wrote
    else
      r = redis.pcall('SET', keys[i], val, 'NX', 'PX', px)
      taken = type(r) == 'table' and r.ok ~= nil -- OK: it wrote
    end
    if not taken then
      for j = first, i - 1 do -- the keys this loop set
        redis.call('DEL', keys[j])
      end
      if type(r) == 'table' then
        return r -- the error
      end
      return nil, i, r
    end
  end
  return {last - first + 1, 0}
end

-- conflict_reply starts the acquire scripts' reply, {0, nconflicts, i1,
-- pttl1, ...} (conflicts holds the position, remaining-time pairs); the
-- caller sets out[1] to the count granted and appends any fences
-- (decodeAcquire in batch/reply.go reads it).
local function conflict_reply(conflicts)
  local out = {0, #conflicts / 2}
  for _, c in ipairs(conflicts) do
    out[#out + 1] = c
  end
  return out
end
