-- join: put a waiter in line for one lock key, or tell it to try now. The
-- waiter has subscribed to the key's channel and sends this instead of a
-- plain GET: one call both closes the window in which a release could slip
-- by unheard and takes the waiter's place in the key's queue, so that the
-- release hands the key to the oldest waiter (hand_off, common.lua)
-- instead of waking every waiter to race for it.
--
-- KEYS[1] the lock key, KEYS[2] and KEYS[3] its queue keys (queue_keys)
-- ARGV[1] the waiter (its lease token), ARGV[2] its holder (the lease
--         token, or the owner token of a reentrant lease)
--
-- Returns {0, 0} when the waiter should try now (the key is free,
-- reserved for it, or its own), else, after joining its queue and
-- marking it, {the key's remaining time in ms (-1: no expiry), 1 if the
-- key is reserved for another waiter, else 0}: a waiter that keeps a
-- prefix must give it back before it waits for a reserved key (the
-- protocol's rule), so the reservation is news to it.
local k, waiter, holder = KEYS[1], ARGV[1], ARGV[2]
local v = redis.call('GET', k)
local r = v and reserved_for(v)
if not v or r == waiter or v == holder or holder_of(v) == holder then
  return {0, 0}
end
read_queue(k) -- before the first write
local left = redis.call('PTTL', k)
enqueue(k, v, waiter)
return {left == 0 and 1 or left, r and 1 or 0} -- 0 would say "try now"
