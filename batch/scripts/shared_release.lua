-- shared_release: give back shared keys or permits (shared.lua) that the
-- lease still holds, and leave every other entry alone. Every entry is
-- read before any is written (a non-local key then fails the call with
-- nothing written, as release.lua). The last live shared holder of a key
-- deletes it, or hands it to the line's head when a waiter marked it
-- (hand_off); otherwise the key and its holders set get the life of the
-- latest remaining holder, so that a writer waits for no one who left.
--
-- ARGV[1] holder, ARGV[2] lease token of a reentrant lease or ""
-- ARGV[3] 's' shared keys or 'p' permits, ARGV[4..] the entries
--         (request_entries in shared.lua)
--
-- Returns the 1-based positions of the entries the lease did not hold.
local holder, lease = ARGV[1], ARGV[2]
local keys, first, last, permits = request_entries(3)
local me = lease ~= '' and lease or holder
local now = nil

-- state[i]: my_shared_hold's answer for a shared key (1, 2, a table or
-- false), read_holders's for a permit (false when not ours).
local state = {}
local lines = {} -- hand_off_line's read of a marked key's queue
local lost = {}
for i = first, last do
  local k, st = keys[i], false
  if permits then
    now = now or now_ms()
    st = read_holders(k, me, now)
    st = st.mine and st
  else
    st, now = my_shared_hold(k, me, now)
  end
  if st == 2 or (type(st) == 'table' and st.marked) then
    now = now or now_ms()
    lines[i] = hand_off_line(k, now) -- before the first write
  elseif st and permits then
    st.lined = read_queue(k) -- waiters to wake
  end
  if type(st) == 'table' and not permits then
    st.last, st.later = shared_rest(st.s, now, me, st.exp, st.score) -- before the first write
  end
  state[i] = st
  if not st then
    lost[#lost + 1] = i - first + 1
  end
end
for i = first, last do
  local k, st = keys[i], state[i]
  if st == 1 then
    redis.call('DEL', k)
  elseif st == 2 then
    hand_off(k, now, lines[i])
  elseif st then
    -- rest: the latest expiry of the others, or ours when one of them
    -- expires no earlier (read before the first write: shared_latest in
    -- shared.lua says why).
    local rest, h = st.last, permits and k or st.s
    if not rest then -- no one else
      redis.call('DEL', h)
      if permits and st.lined then
        wake(k, now, false)
      end
      if st.marked then
        hand_off(k, now, lines[i])
      elseif not permits then
        redis.call('DEL', k)
      end
    else
      if permits then
        st.dead[#st.dead + 1] = me
        prune(k, st.dead)
      else
        shared_leave(h, me, st.later)
      end
      if permits and st.lined then
        wake(k, now, false) -- its units may fit the line's head now
      end
      if permits or rest < st.exp then
        -- Ours was the latest expiry: bring the keys down to the latest
        -- remaining one (a later one than ours needs no change).
        redis.call('PEXPIRE', h, rest - now)
        if not permits then
          redis.call('PEXPIRE', k, rest - now)
        end
      end
    end
  end
end
return lost
