-- reserve: wait by reservation (docs/design.md, "Waiting by reservation
-- across processes"). A waiting acquisition holds no lock key: it
-- reserves every key it can, and stands in the queue of every other one.
-- Nothing here grants anything; the acquisition is granted by acquire.lua
-- mode 'c' (the confirm), which takes keys that are free, reserved for it
-- or its own, all or nothing.
--
-- ARGV[1] the waiter (its lease token, the holder of a plain lease)
-- ARGV[2] its ticket: server time in microseconds, decimal, the same in
--         every call of one acquisition (its age: smaller is older)
-- ARGV[3] its inbox: the sharded channel its Locker listens on, in a slot
--         of this node
-- ARGV[4] mode: 'r' reserve (or wait in line for) every key, or 'l' leave:
--         give back every key reserved for or held by the waiter and leave
--         every queue
-- ARGV[5..] the lock keys when the call covers a whole node; a call for
--         one slot passes ARGV[5] = "", ARGV[6] = n: the lock keys are
--         KEYS[1..n], followed by their queue keys (declared for Redis's
--         migration rules).
--
-- Mode 'r', per key:
--   free, reserved for the waiter, or held by it (its first attempt's
--   bare SET, or a confirm that failed on another node): if the key's
--   queue has a live waiter older than this one, the key is handed to the
--   oldest (hand_off) and this waiter joins the queue; otherwise it
--   becomes (or stays) this waiter's reservation for RESERVE_MS, marked
--   when others wait.
--   held by another, or reserved for another: the waiter joins the key's
--   queue (with its ticket as score) and marks the value; if the key is
--   reserved for a younger waiter by reservation, that waiter is asked to
--   yield it ('y <key> <waiter>' on its inbox): its next call hands the
--   key to the oldest waiter (rule Y, cooperative wound-wait).
-- A waiter never writes over a value naming another owner.
--
-- Returns {seconds, microseconds, code1, ...}: the server's TIME, then per
-- key 1 when the key is this waiter's reservation now, 0 otherwise.
local waiter, ticket, inbox, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keys, first, last = ARGV, 5, #ARGV
if ARGV[5] == '' then
  keys, first, last = KEYS, 1, tonumber(ARGV[6])
end
local me = waiter .. ' ' .. inbox -- the waiter's queue entry

-- Read every key, and the queue of every key whose queue this call may
-- write, before the first write. An unmarked key of the waiter's own has
-- no queue to read (I-mark: a key with waiters in line is marked, and a
-- waiter leaves a key's line when the key becomes its own). A free key
-- may have one (a reservation expired unused, a holder's lease expired,
-- a script-free release deleted it).
local vals, lined = {}, {}
for i = first, last do
  local v = redis.call('GET', keys[i])
  vals[i] = v or false
  if mode == 'l' or not v or string.byte(v, -1) == 33 or
      (reserved_for(v) ~= waiter and v ~= waiter and holder_of(v) ~= waiter) then
    lined[i] = read_queue(keys[i])
  end
end
local now, t = now_ms()
local out = {tonumber(t[1]), tonumber(t[2])}

-- leave_mine takes the waiter's entries out of lock key k's queue (its
-- entry names the inbox it gave then: after a reshard its inbox may be
-- another channel, and an entry under the old name must not stay behind
-- to be handed keys) and returns whether others remain. Its entries are
-- found by its ticket, the score of each of them.
--
-- The queue was read before this call's first write (read_queue), but
-- this call's own ZREMs (older_waits, or here) may have deleted it since:
-- in a slot MIGRATING away a command on a key missing here is refused
-- after the writes before it, which Redis keeps. So the reads after a
-- write go through pcall, a refusal meaning the key is gone: empty.
local function leave_mine(k)
  local q, qd = queue_keys(k)
  local mine = redis.pcall('ZRANGE', q, ticket, ticket, 'BYSCORE')
  if mine.err then
    return false
  end
  for _, m in ipairs(mine) do
    if entry_of(m, waiter) then
      redis.call('ZREM', q, m)
      redis.pcall('ZREM', qd, m)
    end
  end
  local n = redis.pcall('ZCARD', q)
  return type(n) == 'number' and n > 0
end

-- join puts the waiter in lock key k's queue, ordered by its ticket, and
-- marks k's value v.
local function join(k, v)
  local q, qd = queue_keys(k)
  for _, m in ipairs(redis.call('ZRANGE', q, ticket, ticket, 'BYSCORE')) do
    if m ~= me and entry_of(m, waiter) then
      redis.call('ZREM', q, m) -- an entry under an inbox it no longer listens on
      redis.call('ZREM', qd, m)
    end
  end
  enqueue_at(k, v, me, ticket, now)
end

-- older_waits reports whether lock key k's queue has a live entry older
-- than this waiter.
local function older_waits(k)
  local head, score = drop_dead(k, now)
  if not head or head == me or entry_of(head, waiter) then
    return false
  end
  return older(score, entry_waiter(head), ticket, waiter)
end

for i = first, last do
  local k, v = keys[i], vals[i]
  local code = 0
  local ours = v and (reserved_for(v) == waiter or v == waiter or holder_of(v) == waiter)
  if mode == 'l' then
    if lined[i] then
      leave_mine(k)
    end
    if ours then
      if string.byte(v, -1) == 33 then -- '!'
        hand_off(k, now)
      else
        redis.call('DEL', k)
      end
    end
  elseif not v or ours then
    if lined[i] and older_waits(k) then
      -- An older waiter stands in line: the key is its. (A free key
      -- whose queue has waiters: a reservation expired unused, or a
      -- script-free release deleted it.) The waiter joins first and the
      -- key is handed off after: the hand-off pops the head, and were
      -- the head the line's last entry the line would be gone, and a
      -- join after it would touch a missing key, which in a slot
      -- MIGRATING away is refused after this call's writes (docs/faults.md
      -- bug 11). With the waiter in line, the line stays and the
      -- hand-off writes the key marked.
      join(k, false)
      hand_off(k, now)
    else
      local mark = ''
      if lined[i] and leave_mine(k) then
        mark = '!'
      end
      redis.call('SET', k, '^' .. ticket .. ':' .. waiter .. ':' .. inbox .. mark, 'PX', RESERVE_MS)
      code = 1
    end
  else
    join(k, v)
    local ot, ow, _, oin = res_parse(v)
    if ot and older(ticket, waiter, ot, ow) then
      publish(oin, 'y ' .. k .. ' ' .. ow)
    end
  end
  out[#out + 1] = code
end
return out
