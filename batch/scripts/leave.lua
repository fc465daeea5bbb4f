-- leave: a waiter in line (join.lua) that gave up leaves the key's line,
-- and gives the key back if a release handed it to the waiter meanwhile
-- ('^' waiter ['!'], hand_off in common.lua): the release may have popped
-- its entry just before this call, and a key left so would stay reserved
-- for an acquisition that is over for RESERVE_MS. Scripts run one at a
-- time, so either the release sees the entry gone, or this call sees the
-- key handed: nothing is left either way.
--
-- KEYS[1] the lock key, KEYS[2] and KEYS[3] its queue keys (queue_keys)
-- ARGV[1] the waiter (its lease token)
--
-- Returns 1 if the key had been handed to the waiter and was given back,
-- else 0.
local k, waiter = KEYS[1], ARGV[1]
local v = redis.call('GET', k)
local lined = read_queue(k) -- before the first write
if v and reserved_for(v) == waiter and not string.find(v, ':', 2, true) then
  -- The line's form of a hand-off ('^' waiter ['!']; a waiter by
  -- reservation's names its ticket, after a ':'). Its entry went with
  -- the hand-off; a mark says others wait.
  if lined and string.byte(v, -1) == 33 then -- '!'
    hand_off(k)
  else
    redis.call('DEL', k)
  end
  return 1
end
if lined then
  leave_queue(k, waiter)
end
return 0
