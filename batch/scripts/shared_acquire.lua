-- shared_acquire: take shared keys or permits (shared.lua) all or nothing,
-- or up to the first conflict, as acquire.lua does for exclusive keys:
-- every entry is read before any is written, so a conflict, a limit
-- mismatch or a non-local key leaves nothing written (the fast path for
-- free shared keys writes as it checks and deletes what it wrote, as
-- acquire.lua's). A request's exclusive keys, shared keys and permits go
-- in separate calls of the same pipelined round trip; the protocol treats
-- them as it treats calls to different nodes.
--
-- ARGV[1] holder (owner token of a reentrant lease, else the lease
--         token), ARGV[2] lease token of a reentrant lease or ""
-- ARGV[3] ttl in milliseconds, ARGV[4] mode: 'a', 'w' or 'c:<ticket>'
--         as in acquire.lua (shared grants and permits get no fencing
--         token). The confirm ('c') of a reader by reservation takes a
--         shared key that is free, reserved for it, or held shared with no
--         live writer older than it in line (writer_before), leaves its
--         own entries, and wakes the readers at the head of the line
--         (wake).
-- ARGV[5] 's' shared keys or 'p' permits, ARGV[6..] the entries
--         (request_entries in shared.lua)
--
-- Each lease holds by its lease token: leases of one owner are separate
-- shared holders and permit takers. A shared key is free when its lock
-- key is absent or reserved for this acquisition; joinable when it is
-- shared and, if marked, no live waiter stands before us in its line;
-- held otherwise (an exclusive holder, the owner's own included: there is
-- no upgrade or downgrade). A permit is free when the units of its other
-- live holders plus ours fit the limit; a live holder with another limit
-- fails the call with "SLOTLOCK_LIMIT <position> <limit in use>".
--
-- Returns {granted, nconflicts, i1, pttl1, ...} as acquire.lua (no
-- fences; i negated for a key reserved for a waiter); a permit's pttl is
-- the time until its first other holder's expiry.
local holder, lease, ttl, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local keys, first, last, permits, units, limits = request_entries(5)
local m1 = string.sub(mode, 1, 1)
local wait = m1 == 'w'
local queued = m1 == 'c'
local ticket = m1 == 'c' and string.match(mode, ':(%d+)$') or nil
local me = lease ~= '' and lease or holder

-- The common case first: shared keys nobody holds, each taken with one
-- SET NX in the one-holder form (take_free in common.lua, acquire.lua's
-- fast path), which also returns the value of the first key not free.
local seen_i, seen_v -- the first key found held, and its value
if not permits and not queued then
  local r
  r, seen_i, seen_v = take_free(keys, first, last, SHARED .. me, ARGV[3], true)
  if r then
    return r
  end
  if first == last and seen_v == SHARED then
    -- The other common case, one key held shared by several and not
    -- marked: a join, the general path's below for that value (read the
    -- holders set before writing: its expiry; then ZADD and cover)
    -- without its tables and loops, which cost the node about 2 us per
    -- join under 100 readers of one key (docs/design.md, "Cheaper set
    -- operations"). A marked key (a line to check) and the one-holder
    -- form (the second holder turns it) go on.
    local now = now_ms()
    local k = keys[first]
    local s = companion(k, 's')
    local sexp = redis.call('PEXPIRETIME', s)
    redis.call('ZADD', s, string.format('%d', now + ttl), me)
    shared_cover(k, s, now + ttl, sexp)
    return {1, 0}
  end
end

local now = now_ms()
local conflicts = {}
local stop = last + 1 -- first entry not taken
local vals, hold, handed = {}, {}, {}
local ours = {} -- keys reserved for us: a hand-off popped our entry
local own, others = {}, {} -- confirm: our entries in a key's line, and whether it has others
local yields = {} -- keys whose line has a waiter by reservation before us
for i = first, last do
  local k = keys[i]
  local busy = nil -- remaining time of what keeps the entry from us
  if not permits then
    local v
    if i == seen_i then
      v = seen_v
    else
      v = redis.call('GET', k)
    end
    if v and reserved_for(v) == me then
      v = nil
      handed[i] = read_queue(k)
      ours[i] = true
    elseif queued then
      handed[i] = read_queue(k)
    end
    if ticket and handed[i] then
      own[i], others[i] = own_entries(k, me, ticket)
    end
    local ahead = false
    if v and is_shared(v) and string.byte(v, -1) == 33 -- '!'
      and not shared_holders(k, v, me, now).mine then
      -- Writer preference turns away new readers only: a reader that
      -- holds the key already (a waiter without a ticket keeps its
      -- prefix) counts it as taken, or it would wait for its own key
      -- while the writer before it waits for its release.
      if ticket then
        ahead = handed[i] and writer_before(k, ticket, now)
      else
        ahead = line_ahead(k, now)
      end
    end
    if v and not is_shared(v) then
      busy = redis.call('PTTL', k)
    elseif ahead then
      busy = redis.call('PTTL', k)
      yields[i] = not ticket
    elseif v then
      local tok = string.sub(holder_of(v), 2) -- the one holder, or '' (set form)
      local h = {inline = tok ~= '' and tok or nil, mine = tok == me}
      if tok ~= me then
        -- The write phase will ZADD to the holders set: read it now
        -- (rule M), with its expiry, which shared_cover needs (only the
        -- set form's creation changes it before then, and reads it again).
        h.s = companion(k, 's')
        h.sexp = redis.call('PEXPIRETIME', h.s)
      end
      hold[i] = h
    end
    vals[i] = v or false
  else
    local r = read_holders(k, me, now)
    if r.limit and r.limit ~= limits[i] and r.first then
      return redis.error_reply('SLOTLOCK_LIMIT ' .. (i - first + 1) .. ' ' .. string.format('%d', r.limit))
    end
    -- First come first served: no taker passes a live waiter in the
    -- permit's line (reserve.lua), older than it for a confirm, any for
    -- a newcomer, which is reported as at a reserved key: a waiter by
    -- reservation may wait for what the newcomer holds.
    handed[i] = read_queue(k)
    if ticket and handed[i] then
      own[i], others[i] = own_entries(k, me, ticket)
    end
    if not r.mine then
      if handed[i] and writer_before(k, ticket or '+inf', now, true) then
        busy, yields[i] = (r.first or now + 1) - now, true
      elseif r.used + units[i] > limits[i] then
        busy = r.first - now
      end
    end
    hold[i] = r
  end
  if busy then
    if stop > last then
      stop = i
    end
    -- Reported negated, as acquire.lua does, when reserved for a waiter
    -- or waited for by one before us (writer preference): the protocol
    -- gives its whole prefix back first (that waiter may wait for it).
    local reserved = (vals[i] and reserved_for(vals[i])) or yields[i]
    conflicts[#conflicts + 1] = reserved and first - i - 1 or i - first + 1
    conflicts[#conflicts + 1] = busy
    if wait or #conflicts >= 128 then
      break
    end
  end
end

local out = conflict_reply(conflicts)
if not wait and stop <= last then
  return out
end

local exp = string.format('%d', now + ttl)
for i = first, stop - 1 do
  local k, r, v = keys[i], hold[i], vals[i]
  if permits then
    prune(k, r.dead)
    redis.call('HSET', k, me, string.format('%d', r.mine or units[i]) .. ':' .. exp,
      LIMIT_FIELD, string.format('%d', limits[i]))
    later_expiry(k, ttl)
    if ticket and handed[i] then
      leave_own(k, own[i])
      if others[i] then
        wake(k, now, false) -- the next may fit in what is left
      end
    end
  else
    local more, lined = false, false
    if handed[i] and ticket then
      leave_own(k, own[i])
      more, lined = others[i], #own[i] > 0
    elseif handed[i] then
      more = true -- reserved for us outside a confirm: keep the mark
    end
    if not v then
      redis.call('SET', k, SHARED .. me .. (more and '!' or ''), 'PX', ttl)
    elseif r.mine and r.inline then
      later_expiry(k, ttl)
    else
      local s = r.s
      if r.inline then
        -- A second holder: the key turns to the set form, its first
        -- holder keeping the key's expiry as its own.
        local left = redis.call('PTTL', k)
        local mark = string.byte(v, -1) == 33 and '!' or '' -- '!'
        redis.call('ZADD', s, string.format('%d', now + left), r.inline)
        redis.call('SET', k, SHARED .. mark, 'KEEPTTL')
        redis.call('PEXPIRE', s, math.max(left, ttl))
        r.sexp = nil -- changed: shared_cover reads it
      end
      redis.call('ZADD', s, exp, me)
      shared_cover(k, s, now + ttl, r.sexp)
    end
    if ticket and more and (lined or ours[i]) then
      -- Readers behind us in the line may join us now (those behind a
      -- waiting writer find it before them and wait on): a reader handed
      -- the key (its entry popped) wakes them; a reader woken in line
      -- that joins wakes only the one its leaving brings into the span a
      -- wake reaches (a message per reader, not per pair). Another
      -- reader's take changes nothing for the line.
      wake(k, now, true, not ours[i])
    end
  end
end
out[1] = stop - first
return out
