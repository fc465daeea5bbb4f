-- release1: delete one plain lock key (no hold set) if it holds the lease's
-- token. The general release covers many keys, both call forms and
-- reentrant holds; a single-key lease, the most common kind, needs none of
-- that, and this script costs its master about a third less server time
-- per call. The value is compared with the token before holder_of's
-- pattern search, as is_mine does (measured with bench/cmd/phases -k 1).
--
-- KEYS[1] the lock key, KEYS[2] its queue (touched only when the value is
-- marked; declared for Redis's migration rules); ARGV[1] the holder (lease
-- token). The value's format, holder ['.' fence] ['!'], is read by
-- holder_of (common.lua, which precedes this file in the loaded script).
--
-- Returns 1 if the key was the lease's and is deleted, 0 if not held.
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and (not v or holder_of(v) ~= ARGV[1]) then
  return 0 -- the equality first: a plain lease's value is its token
end
if string.byte(v, -1) == 33 then -- '!': a waiter marked it
  hand_off(KEYS[1]) -- it reads the line before its first write
  return 1
end
redis.call('DEL', KEYS[1])
return 1
