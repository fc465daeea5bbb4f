-- release1: delete one plain lock key (no hold set) if it holds the lease's
-- token. The general release script covers many keys, both call forms and
-- reentrant holds; a single-key lease, the most common kind, needs none of
-- that, and this script costs its master about half the server time.
--
-- KEYS[1] the lock key; ARGV[1] the holder (lease token).
-- The value is  holder ['.' fence] ['!']  (common.lua); tokens never contain
-- '.' or '!', so the holder is the value up to the first of them.
--
-- Returns 1 if the key was the lease's and is deleted, 0 if not held.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local h = ARGV[1]
if string.sub(v, 1, #h) ~= h then
  return 0
end
local after = string.byte(v, #h + 1)
if after and after ~= 46 and after ~= 33 then -- '.', '!'
  return 0
end
redis.call('DEL', KEYS[1])
if string.byte(v, -1) == 33 then -- '!': a waiter marked it
  redis.call('SPUBLISH', KEYS[1], 'r')
end
return 1
